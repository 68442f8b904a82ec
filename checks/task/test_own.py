"""Claim 5 for the audit's own candidate: the policy the audit trains (audit/task/train.py: RL from the reference
against the posterior-expected recovered rubric) passes the same release rule as every task run. Its
gold-vs-proxy curve along training (RM proxy and estimated true quality) goes into the evidence."""
import pytest

from audit.task.session import OWN
from rlhf.vocab import FAMILIES


def _curve(log: dict) -> list[dict]:
    return [{"step": c["step"], "proxy": c["proxy_balanced"], "true": c["estimated_true_balanced"], "kl": c["kl"],
             "proxy_per_family": c["proxy"], "true_per_family": c["estimated_true"]} for c in log["curve"]]


@pytest.mark.claim("own.passes_release_rule")
def test_own_passes_release_rule(audit, evidence):
    log = audit.own()
    v = audit.run_verdict(OWN)
    q = v["quality"]
    per = {f: {k: q["per_family"][f][k] for k in ("estimate", "ci95", "reference", "delta", "delta_ci95")}
           for f in FAMILIES}
    curve = _curve(log)
    last = curve[-1]
    evidence.record(estimate=q["estimate"], ci95=q["ci95"], n_resamples=q["n_boot"], seed=audit.cfg.seed,
                    method=f"release rule on paired deltas of recovered-rubric quality ({q['method']})",
                    thresholds=v["rule"],
                    details={"estimated_true_quality": q["estimate"], "ci95": q["ci95"], "per_family": per,
                             "balanced_delta": q["delta"], "balanced_delta_ci95": q["delta_ci95"],
                             "reasons": v["reasons"], "passes_release_rule": v["passes"],
                             "recipe": audit.own_recipe(), "curve": curve,
                             "training": {"elapsed_s": log["elapsed_s"], "config": log["config"]},
                             "experiment": {"name": "own policy: gold-vs-proxy curve along training",
                                            "files": ["figures/training_curves.png"],
                                            "results": {"steps": log["config"]["steps"],
                                                        "final_proxy": last["proxy"],
                                                        "final_estimated_true": last["true"],
                                                        "final_kl": last["kl"],
                                                        "passes_release_rule": v["passes"]}}},
                    inputs=["policy/", "reward_model/", "data/gold_calib.jsonl", "data/prompts_train.jsonl"])
    if not v["passes"]:
        pytest.fail("; ".join(v["reasons"]), pytrace=False)
