"""Claim 5: per run and family, the true-quality change vs the reference (CI includes the rubric's
uncertainty); does each run pass the release rule?"""
import pytest

from audit.task.task_dir import proxy_curve
from rlhf.vocab import FAMILIES


def _split(run_family):
    run, fam = run_family.rsplit("-", 1)
    return run, fam


def _proxy(audit, run):
    ev = audit.task.runs[run].dev_eval
    return None if ev is None else ev.get("proxy_mean")


def _family_record(audit, evidence, run_family, thr_key, thr):
    run, fam = _split(run_family)
    q = audit.quality(run)["per_family"][fam]
    evidence.record(estimate=q["delta"], ci95=q["delta_ci95"], n_resamples=audit.quality(run)["n_boot"],
                    seed=audit.cfg.seed, method="paired delta of recovered-rubric quality; CI = rubric refits on "
                    "resampled gold (+ trusted crowd) combined with Monte-Carlo sampling error",
                    thresholds={thr_key: thr}, details={"run": run, "family": fam, **q},
                    inputs=[f"runs/{run}/", "policy/", "data/gold_calib.jsonl"])
    return run, fam, q


@pytest.mark.claim("run.improves")
def test_run_improves(audit, evidence, run_family):
    run, fam, q = _family_record(audit, evidence, run_family, "delta_ci95_lower_gt", 0.0)
    lo, hi = q["delta_ci95"]
    if not (lo > 0):
        pytest.fail(f"{run} {fam}: delta {q['delta']:+.3f}, CI [{lo:+.3f}, {hi:+.3f}] not above 0", pytrace=False)


@pytest.mark.claim("run.non_inferior")
def test_run_non_inferior(audit, evidence, run_family):
    margin = audit.cfg.release_rule.family_ci_lower_gt
    run, fam, q = _family_record(audit, evidence, run_family, "delta_ci95_lower_gt", margin)
    lo, hi = q["delta_ci95"]
    if not (lo > margin):
        pytest.fail(f"{run} {fam}: delta CI [{lo:+.3f}, {hi:+.3f}] lower bound not above {margin}", pytrace=False)


@pytest.mark.claim("run.passes_release_rule")
def test_run_passes_release_rule(audit, evidence, run_name):
    v = audit.run_verdict(run_name)
    q = v["quality"]
    per = {f: {"estimate": q["per_family"][f]["estimate"], "ci95": q["per_family"][f]["ci95"],
               "reference": q["per_family"][f]["reference"], "delta": q["per_family"][f]["delta"],
               "delta_ci95": q["per_family"][f]["delta_ci95"]} for f in FAMILIES}
    evidence.record(estimate=q["estimate"], ci95=q["ci95"], n_resamples=q["n_boot"], seed=audit.cfg.seed,
                    method="release rule on paired deltas of recovered-rubric quality", thresholds=v["rule"],
                    details={"estimated_true_quality": q["estimate"], "ci95": q["ci95"], "per_family": per,
                             "balanced_delta": q["delta"], "balanced_delta_ci95": q["delta_ci95"],
                             "reasons": v["reasons"], "passes_release_rule": v["passes"],
                             "proxy": _proxy(audit, run_name), "config": audit.task.runs[run_name].config,
                             "curve": proxy_curve(audit.task.runs[run_name].log)},
                    inputs=[f"runs/{run_name}/", "policy/", "data/gold_calib.jsonl"])
    if not (v["passes"]):
        pytest.fail("; ".join(v["reasons"]), pytrace=False)
