"""Claim 7: the gold-free diagnostic's risk per family on this task's RM, validated against what the gold set
says about the same RM (a family is gold-risky when the RM's agreement with the experts is not established or its
crowd labels are off the rubric's scale). Its validation on re-trained RMs lives in tests/ (it needs the world)."""
import numpy as np
import pytest
from scipy import stats

from rlhf.vocab import FAMILIES


@pytest.mark.claim("diagnostic.flags_families")
def test_diagnostic_flags_families(audit, evidence):
    d = audit.diagnostic()
    ag = audit.agreement()
    thr = audit.cfg.rm_min_pearson_lower
    gold_risky = {f: bool(ag["rm_gold"][f]["ci95"][0] <= thr or
                          ag["crowd_scale"][f]["crowd_labels_above_1"] > audit.cfg.crowd_max_share_above_1)
                  for f in FAMILIES}
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
                             "validation": {"against": "this task's gold set", "gold_risky": gold_risky,
                                            "flag_agreement": agree, "auroc": auroc, "elapsed_s": d["elapsed_s"],
                                            "config": d["config"]}},
                    inputs=["reward_model/", "policy/", "data/prompts_train.jsonl"])
    wrong = [f for f in FAMILIES if flags[f] != gold_risky[f]]
    if not (not wrong):
        pytest.fail(f"diagnostic disagrees with the gold set on {wrong}", pytrace=False)
