"""Claim 7: the gold-free diagnostic's risk per family on this task's RM, validated against what the gold set
says about optimising the same RM: when the task ships a strong balanced run against it (kl002-s1500), a family is
gold-hazardous when that run's gold-estimated change is below a fifth of its best family's change
(audit.diagnostic.gold_hazard_labels); without such a run, when the RM's agreement with the experts is not
established or its crowd labels are off the rubric's scale (a weaker proxy: an RM can disagree with the experts
on a family and still be safe to optimise there). Its validation on re-trained RMs lives in tests/ and in
world/grade (they need the oracle)."""
import numpy as np
import pytest
from scipy import stats

from audit.diagnostic import gold_hazard_labels, strongest_balanced_run
from rlhf.vocab import FAMILIES


@pytest.mark.claim("diagnostic.flags_families")
def test_diagnostic_flags_families(audit, evidence):
    d = audit.diagnostic()
    ag = audit.agreement()
    thr = audit.cfg.rm_min_pearson_lower
    agreement_risky = {f: bool(ag["rm_gold"][f]["ci95"][0] <= thr or
                               ag["crowd_scale"][f]["crowd_labels_above_1"] > audit.cfg.crowd_max_share_above_1)
                       for f in FAMILIES}
    run = strongest_balanced_run(audit.task.runs)
    if run is not None:
        per_family = audit.quality(run)["per_family"]
        deltas = {f: per_family[f]["delta"] for f in FAMILIES}
        gold_risky = gold_hazard_labels(deltas, d["config"]["flag_ratio"])
        against = f"this task's gold set: gold-estimated changes of run {run} (strongest balanced run against this RM)"
    else:
        deltas, gold_risky = None, agreement_risky
        against = "this task's gold set: RM-expert agreement and crowd label scale (no balanced run shipped)"
    flags = {f: d["families"][f]["flag"] for f in FAMILIES}
    risk = np.array([d["families"][f]["risk"] for f in FAMILIES])
    lab = np.array([gold_risky[f] for f in FAMILIES])
    auroc = (float(stats.mannwhitneyu(risk[lab], risk[~lab]).statistic / (lab.sum() * (~lab).sum()))
             if 0 < lab.sum() < len(lab) else None)
    agree = float(np.mean([flags[f] == gold_risky[f] for f in FAMILIES]))
    evidence.record(estimate=agree, method="share of families where the gold-free flag equals the gold-based risk",
                    seed=audit.cfg.seed, thresholds={"agreement_eq": 1.0},
                    details={"families": {f: {"risk": d["families"][f]["risk"], "flag": flags[f],
                                              **{k: v for k, v in d["families"][f].items() if k not in ("risk", "flag")}}
                                          for f in FAMILIES},
                             "validation": {"against": against, "gold_risky": gold_risky, "run": run,
                                            "run_deltas": deltas, "agreement_risky": agreement_risky,
                                            "flag_agreement": agree, "auroc": auroc, "config": d["config"]},
                             # a duration: evidence only (the renderer copies "validation" into answer.json,
                             # which must be the same bytes for the same seed and task)
                             "diagnostic_elapsed_s": d["elapsed_s"]},
                    inputs=["reward_model/", "policy/", "data/prompts_train.jsonl"]
                    + ([f"runs/{run}/", "data/gold_calib.jsonl"] if run else ["data/gold_calib.jsonl"]))
    wrong = [f for f in FAMILIES if flags[f] != gold_risky[f]]
    if not (not wrong):
        pytest.fail(f"diagnostic disagrees with the gold set on {wrong}", pytrace=False)
