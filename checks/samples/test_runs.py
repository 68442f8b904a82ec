"""SPEC §3 question 5 on a samples table: per run and family, the true-quality change vs the reference run
(finite-sample intervals for a bounded label, prediction-powered; the gold-only ones beside them); does each run
pass the release rule?"""
import pytest

from audit.samples.session import inputs



def method(audit) -> str:
    i = audit.intervals()
    lo, hi = i["gold_range"]
    return (f"{i['description']}; per run x family, the proxy as the prediction and the gold rows as the rectifier; "
            f"labels in [{lo:g}, {hi:g}] ({i['gold_range_source']})")


@pytest.mark.claim("run.non_inferior")
def test_run_non_inferior(samples_audit, evidence, candidate_cell):
    run, fam = candidate_cell
    p = samples_audit.runs[run]["per_family"][fam]
    margin = samples_audit.cfg.release_rule.family_ci_lower_gt
    evidence.record(estimate=p["delta"], ci95=p["delta_ci95"], method=method(samples_audit), seed=samples_audit.cfg.seed,
                    thresholds={"delta_ci95_lower_gt": margin}, details={"run": run, "family": fam, **p},
                    inputs=inputs(samples_audit))
    lo, hi = p["delta_ci95"]
    if not lo > margin:
        pytest.fail(f"{run} {fam}: true-quality change {p['delta']:+.3f}, CI [{lo:+.3f}, {hi:+.3f}] lower bound "
                    f"not above {margin} (proxy change {p['proxy_mean'] - p['reference_proxy_mean']:+.3f})",
                    pytrace=False)


def _entry(v):
    keys = ("estimated_true_quality", "ci95", "ci95_gold_only", "gold_only_estimate", "delta", "delta_ci95",
            "delta_ci95_gold_only", "proxy_mean", "per_family", "reasons", "is_reference")
    return {**{k: v[k] for k in keys}, "passes_release_rule": v["passes"]}


@pytest.mark.claim("run.passes_release_rule")
def test_run_passes_release_rule(samples_audit, evidence, candidate_run):
    a = samples_audit
    v = a.runs[candidate_run]
    rule = a.cfg.release_rule
    evidence.record(estimate=v["estimated_true_quality"], ci95=v["ci95"], method=method(a), seed=a.cfg.seed,
                    thresholds={**rule.__dict__, "text": rule.describe(
                        "The intervals are finite-sample intervals for a bounded label from the gold subset and the "
                        "proxy (prediction-powered); they cover prompt sampling and gold-label noise.")},
                    details={**_entry(v), "reference_run": a.reference, "reference": _entry(a.runs[a.reference]),
                             "intervals": a.intervals()},
                    inputs=inputs(a))
    if not v["passes"]:
        pytest.fail("; ".join(v["reasons"]), pytrace=False)
