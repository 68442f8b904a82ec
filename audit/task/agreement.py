"""Does the RM agree with the experts, and are the crowd labels on the rubric's scale? Per family, with CIs."""
from __future__ import annotations

import numpy as np

from rlhf.data import prompts_tensor, responses_tensor
from rlhf.reward_model import score
from rlhf.vocab import FAMILIES

from audit.core.stats import pearson_ci, spearman_ci

# a label is a fraction of 8 positions (plus small noise): the rubric's maximum is 1
RUBRIC_MAX = 1.0


def rm_scores(rm, records) -> np.ndarray:
    return score(rm, prompts_tensor(records), responses_tensor(records)).numpy()


def by_family(records):
    return {f: [r for r in records if r["family"] == f] for f in FAMILIES}


def rm_vs_labels(rm, records, *, n_resamples=2000, seed=0) -> dict:
    """Per family: Pearson and Spearman of RM score vs label, with paired-bootstrap CIs."""
    out = {}
    for f, recs in by_family(records).items():
        if len(recs) < 3:
            out[f] = {"n": len(recs), "error": f"{len(recs)} rows: too few for a correlation"}
            continue
        x, y = rm_scores(rm, recs), np.array([r["label"] for r in recs], float)
        p = pearson_ci(x, y, n_resamples=n_resamples, seed=seed)
        s = spearman_ci(x, y, n_resamples=n_resamples, seed=seed)
        out[f] = {"pearson": p["estimate"], "ci95": p["ci95"], "method": p["method"],
                  "spearman": s["estimate"], "spearman_ci95": s["ci95"], "n": len(recs),
                  "n_resamples": n_resamples, "seed": seed}
    return out


def crowd_scale(records) -> dict:
    """Per family: the share of crowd labels above the rubric's maximum, the largest label, the mean."""
    out = {}
    for f, recs in by_family(records).items():
        y = np.array([r["label"] for r in recs], float)
        out[f] = {"n": len(y), "crowd_labels_above_1": float((y > RUBRIC_MAX).mean()) if len(y) else None,
                  "max_label": float(y.max()) if len(y) else None, "mean_label": float(y.mean()) if len(y) else None}
    return out
