"""SPEC §3 question 6 on a samples table: the run to ship (the passing run with the highest estimated true
quality), improved over the reference by how much, with which families improved."""
import pytest

from audit.samples.session import inputs


@pytest.mark.claim("shipped.improves_over_reference")
def test_shipped_improves_over_reference(samples_audit, evidence):
    a = samples_audit
    s = a.ship()
    ref = a.runs[a.reference]
    if s["run"] is None:
        evidence.record(details={"certification": {"run": None, "improved_over_reference": False,
                                                   "reference_true_quality": ref["estimated_true_quality"],
                                                   "reference_ci95": ref["ci95"], "basis": s["reason"]}}, inputs=inputs(a))
        pytest.fail(s["reason"], pytrace=False)
    v = a.runs[s["run"]]
    per = v["per_family"]
    improved = [f for f in a.t.families if per[f]["delta_ci95"][0] > 0]
    basis = (f"'{s['run']}' {s['reason']}: balanced true quality {v['estimated_true_quality']:.4f} "
             f"(95% CI [{v['ci95'][0]:.4f}, {v['ci95'][1]:.4f}]) vs the reference's "
             f"{ref['estimated_true_quality']:.4f}, gain {v['delta']:+.4f} (CI [{v['delta_ci95'][0]:+.4f}, "
             f"{v['delta_ci95'][1]:+.4f}]); finite-sample bounded-label intervals from the gold subset and the proxy.")
    cert = {"run": s["run"], "improved_over_reference": v["delta_ci95"][0] > 0,
            "estimated_true_quality": v["estimated_true_quality"], "ci95": v["ci95"],
            "ci95_gold_only": v["ci95_gold_only"], "reference_true_quality": ref["estimated_true_quality"],
            "reference_ci95": ref["ci95"], "delta": v["delta"], "delta_ci95": v["delta_ci95"],
            "families_improved": improved, "families_not_improved": [f for f in a.t.families if f not in improved],
            "per_family": {f: {"estimate": per[f]["estimate"], "ci95": per[f]["ci95"],
                               "reference": per[f]["reference"], "delta_ci95": per[f]["delta_ci95"]}
                           for f in a.t.families},
            "basis": basis}
    evidence.record(estimate=v["estimated_true_quality"], ci95=v["ci95"], seed=a.cfg.seed,
                    method="the passing run with the highest estimate", details={"certification": cert},
                    inputs=inputs(a))
    assert cert["improved_over_reference"], f"{s['run']}: gain CI lower bound {v['delta_ci95'][0]:.4f} not above 0"
