"""Claim 4: the expert rubric is recovered from gold (+ trusted crowd rows, + the reference policy as prior),
and it predicts held-out gold."""
import pytest

from audit.task.recovery import summary


@pytest.mark.claim("rubric.predicts_heldout_gold")
def test_rubric_predicts_heldout_gold(audit, evidence, family):
    fr = audit.rubrics()[family]
    cv = fr.cv
    thr = audit.cfg.rubric_min_cv_pearson
    evidence.record(estimate=cv["pearson"], method=f"{cv['k']}-fold cross-validated Pearson of recovered-rubric "
                    "score vs held-out expert label", seed=cv["seed"], n_resamples=len(fr.boots),
                    thresholds={"cv_pearson_ge": thr}, details=summary(fr),
                    inputs=["data/gold_calib.jsonl", "reward_model/train.jsonl", "policy/"])
    if not (cv["pearson"] >= thr):
        pytest.fail(f"{family}: held-out Pearson {cv['pearson']:.2f} < {thr}", pytrace=False)
