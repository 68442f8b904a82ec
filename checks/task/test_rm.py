"""Claims 2-3: per family, does the RM agree with the experts, and are the crowd labels on the rubric's scale?"""
import pytest


@pytest.mark.claim("rm.agrees_with_experts")
def test_rm_agrees_with_experts(audit, evidence, family):
    a = audit.agreement()["rm_gold"][family]
    qa = audit.agreement()["rm_qa"][family]
    thr = audit.cfg.rm_min_pearson_lower
    evidence.record(estimate=a["pearson"], ci95=a["ci95"], method=f"pearson, paired bootstrap ({a['method']})",
                    n_resamples=a["n_resamples"], seed=a["seed"], thresholds={"ci95_lower_gt": thr},
                    details={"rm_gold_pearson": a["pearson"], "ci95": a["ci95"], "spearman": a["spearman"],
                             "spearman_ci95": a["spearman_ci95"], "n": a["n"],
                             "rm_crowd_pearson_in_sample": qa.get("pearson")},
                    inputs=["data/gold_calib.jsonl", "reward_model/"])
    lo, hi = a["ci95"]
    if not (lo > thr):
        pytest.fail(f"{family}: RM-expert Pearson {a['pearson']:.2f}, CI [{lo:.2f}, {hi:.2f}] not above {thr}", pytrace=False)


@pytest.mark.claim("crowd.on_rubric_scale")
def test_crowd_on_rubric_scale(audit, evidence, family):
    s = audit.agreement()["crowd_scale"][family]
    thr = audit.cfg.crowd_max_share_above_1
    evidence.record(estimate=s["crowd_labels_above_1"], method="share of QA crowd labels above the rubric's max (1)",
                    thresholds={"share_above_1_le": thr},
                    details={"crowd_labels_above_1": s["crowd_labels_above_1"], "max_label": s["max_label"],
                             "mean_label": s["mean_label"], "n": s["n"]},
                    inputs=["reward_model/train.jsonl"])
    if not s["crowd_labels_above_1"] <= thr:
        pytest.fail(f"{family}: {s['crowd_labels_above_1']:.1%} of crowd labels exceed 1 (max {s['max_label']:.2f}): "
                    "not fractions of 8 positions", pytrace=False)
