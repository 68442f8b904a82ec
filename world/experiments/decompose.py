"""python -m world.experiments.decompose WORLD [--rm-seeds 1,2] [--json OUT]: where SPEC §2's "RM vs expert Pearson, all
gold rows" comes from in a built world, and how much of it is the draw.

1. The pooled Pearson r = cov(s, y) / (sd_s sd_y) over the gold rows, split exactly into one term per family:
   within = sum over its rows of (s - mean_f s)(y - mean_f y) / (N sd_s sd_y), and between = n_f (mean_f s -
   mean s)(mean_f y - mean y) / (N sd_s sd_y). The terms sum to r. For a family whose count rows are keyed on the
   prompt, its gold rows are also split by the key (the RM's keyed/unkeyed means and the true quality of each).
2. Per corrupted family, the Pearson of the wrong rubric's match fraction with the true one on the world's crowd
   samples, for wrong rubrics with a share w of the LUT replaced by the policy's favourite other token (20 draws
   a share): what sign an RM that learns the wrong rubric can have at each w.
3. With --rm-seeds, the RM retrained on the world's own crowd batch with other training seeds (the build's
   epochs and lr; ~3 min each on 2 cores): the pooled figure's spread from the RM's training draw alone.

The oracle is read (true quality, wrong LUTs, the full crowd batch): this is a tool for the replay, never the
audit. Figures in docs/calibration.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rlhf.common import setup_torch
from rlhf.data import labels_tensor, read_jsonl, responses_tensor, write_json
from rlhf.errors import run_cli
from rlhf.reward_model import load_rm
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import CONTENT0, FAMILIES

from ..calibrate import pearson, rm_agreement, rm_scores
from ..config import Corruption, load_world_config
from audit.task.corruption import count_row_mask, policy_favourites, wrong_lut
from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, seed_list
from ..truth import load_truth, match_fraction, require_built_world

REPLACED_SHARES = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _arrays(records):
    """Records' attributes and responses as content-token indices (what match_fraction takes)."""
    return np.array([r["attrs"] for r in records]), responses_tensor(records).numpy() - CONTENT0


def pooled_terms(s: np.ndarray, y: np.ndarray, fam: np.ndarray) -> dict:
    """The exact per-family split of pearson(s, y): {family: {"within", "between"}} and "pooled"."""
    denom = len(s) * s.std() * y.std()
    if denom == 0:
        raise ValueError("constant RM scores or expert labels on the gold rows: their Pearson is undefined")
    out = {"pooled": pearson(s, y), "families": {}}
    for f in FAMILIES:
        g = fam == f
        if not g.any():
            continue
        within = float(((s[g] - s[g].mean()) * (y[g] - y[g].mean())).sum() / denom)
        between = float(g.sum() * (s[g].mean() - s.mean()) * (y[g].mean() - y.mean()) / denom)
        out["families"][f] = {"r": round(pearson(s[g], y[g]), 3), "rm_sd": round(float(s[g].std()), 3),
                              "rm_mean": round(float(s[g].mean()), 3), "within": round(within, 4),
                              "between": round(between, 4)}
    return out


def key_split(s, y, tq, attrs, corruption: Corruption, denom: float) -> dict | None:
    """A family's gold rows split by its count-row key (None when its count rows are not keyed): per side the
    RM's and the true quality's means, and the part of the family's within term that is the split itself."""
    if corruption.kind != "wrong_rubric" or corruption.count_rows == "random":
        return None
    keyed = count_row_mask(attrs, corruption, np.random.default_rng(0))
    out = {name: {"n": int(m.sum()), "rm_mean": round(float(s[m].mean()), 3),
                  "true_mean": round(float(tq[m].mean()), 3)}
           for name, m in (("keyed", keyed), ("unkeyed", ~keyed)) if m.any()}
    out["split_term"] = round(float(sum(m.sum() * (s[m].mean() - s.mean()) * (y[m].mean() - y.mean())
                                        for m in (keyed, ~keyed) if m.any()) / denom), 4)
    return out


def wrong_rubric_sign(truth_f, crowd_f, shares=REPLACED_SHARES, draws: int = 20) -> dict:
    """Mean Pearson(wrong-rubric match, true match) on a family's crowd samples per replaced share."""
    attrs, resp = _arrays(crowd_f)
    fav = policy_favourites(attrs, resp, truth_f["assign"])
    tq = match_fraction(truth_f["assign"], truth_f["lut"], attrs, resp)
    out = {}
    for w in shares:
        c = Corruption("wrong_rubric", replaced_share=w)
        rs = [pearson(match_fraction(truth_f["assign"], wrong_lut(truth_f["lut"], truth_f["assign"], c, fav,
                                                                     np.random.default_rng(k)), attrs, resp), tq)
              for k in range(draws)]
        out[str(w)] = round(float(np.mean(rs)), 3)
    return out


def decompose(world, rm_seeds=(), quiet: bool = True) -> dict:
    world = Path(world)
    truth = load_truth(world)
    cfg = load_world_config(world)
    gold = read_jsonl(world / "task" / "data" / "gold_calib.jsonl")
    crowd = read_jsonl(world / "oracle" / "crowd_full.jsonl")
    rm, _ = load_rm(world / "task" / "reward_model")
    s, y = rm_scores(rm, gold), labels_tensor(gold).numpy()
    fam = np.array([r["family"] for r in gold])
    attrs, resp = _arrays(gold)
    tq = np.zeros(len(gold))
    for f in FAMILIES:
        g = fam == f
        tq[g] = match_fraction(truth[f]["assign"], truth[f]["lut"], attrs[g], resp[g])
    res = {"world": str(world), "shipped_rm": pooled_terms(s, y, fam),
           "pooled_vs_true_quality": round(pearson(s, tq), 3), "key_split": {}, "wrong_rubric_sign": {}}
    for f in FAMILIES:
        c = cfg.corruption_for(f)
        g = fam == f
        split = key_split(s[g], y[g], tq[g], attrs[g], c, len(gold) * s.std() * y.std())
        if split:
            res["key_split"][f] = split
        if c.kind != "none":
            res["wrong_rubric_sign"][f] = wrong_rubric_sign(truth[f], [r for r in crowd if r["family"] == f])
    if rm_seeds:
        qa = read_jsonl(world / "task" / "reward_model" / "train.jsonl")
        res["rm_seeds"] = {}
        for seed in rm_seeds:
            other, _, _ = train_rm(crowd, RMTrainConfig(epochs=cfg.rm_epochs, lr=cfg.rm_lr, batch=cfg.rm_batch,
                                                        seed=seed), quiet=quiet)
            fig = rm_agreement(other, gold, qa)
            res["rm_seeds"][str(seed)] = {"all_gold": round(fig["rm_gold_all"], 3),
                                          "rm_gold": {k: round(v, 3) for k, v in fig["rm_gold"].items()}}
    return res


def render(res: dict) -> str:
    lines = [f"pooled RM-expert Pearson on gold {res['shipped_rm']['pooled']:.3f} "
             f"(against true quality {res['pooled_vs_true_quality']:.3f})",
             "family   r       RM sd  RM mean  within   between"]
    for f, t in res["shipped_rm"]["families"].items():
        lines.append(f"{f:8s} {t['r']:+.3f}  {t['rm_sd']:.3f}  {t['rm_mean']:.3f}    {t['within']:+.4f}  "
                     f"{t['between']:+.4f}")
    for f, split in res["key_split"].items():
        lines.append(f"{f} count-row key on gold: " + "; ".join(
            f"{k} n {v['n']} RM mean {v['rm_mean']:.2f} true {v['true_mean']:.3f}" for k, v in split.items()
            if k != "split_term") + f"; the split's share of the within term {split['split_term']:+.4f}")
    for f, signs in res["wrong_rubric_sign"].items():
        lines.append(f"{f} r(wrong-rubric match, true) by replaced share: "
                     + " ".join(f"{w}: {r:+.2f}" for w, r in signs.items()))
    for seed, v in res.get("rm_seeds", {}).items():
        lines.append(f"RM seed {seed}: all gold {v['all_gold']:.3f}  "
                     + " ".join(f"{f} {r:+.2f}" for f, r in v["rm_gold"].items()))
    return "\n".join(lines)


def main(argv=None):
    ap = Parser(prog="python -m world.experiments.decompose", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("world", type=Path)
    ap.add_argument("--rm-seeds", type=seed_list, default=[],
                    help="comma-separated RM training seeds to retrain with (slow)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    require_built_world(a.world)
    check_out_file(a.json, "the --json file")
    setup_torch()
    res = decompose(a.world, a.rm_seeds, quiet=a.quiet)
    print(render(res))
    if a.json:
        write_json(a.json, res)


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.decompose"))
