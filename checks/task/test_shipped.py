"""Claim 6: the shipped checkpoint improved over the reference on the deployment mix (balanced over families),
by how much, with a CI that includes the rubric's uncertainty; which families improved."""
import pytest
import torch

from audit.task.quality import intervals
from audit.task.session import OWN
from rlhf.dev_eval import dev_eval
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

BASIS = ("true quality estimated on fresh prompts with uniform attributes (deployment traffic is balanced), "
         "{n} prompts x {k} samples per family at temperature 1.0, scored by the expert rubric recovered from "
         "the gold set (plus crowd rows of families whose labels agree with the experts; reference-policy prior); "
         "{how}; improvement = the paired delta's CI lower bound above 0")
HOW = {"posterior": "estimate = the posterior-mean rubric score (every LUT entry the policy relies on credited "
                    "with its posterior probability, so a policy trained against the recovered rubric is not "
                    "credited for the rubric's own errors); 95% CI from {b} posterior draws of the rubric "
                    "(larger side both ways) combined with sampling error",
       "bootstrap": "95% CI from {b} rubric refits on resampled rows (larger side both ways) combined with "
                    "sampling error"}


@pytest.mark.claim("shipped.improves_over_reference")
def test_shipped_improves_over_reference(audit, evidence, audit_out):
    shipped = audit.shipped()
    ck = audit.ship_checkpoint(audit_out)
    src = shipped["source"]
    if src == "reference":
        q = audit.quality("reference")
        q = {**q, "delta": 0.0, "delta_ci95": [0.0, 0.0], "reference": q["estimate"],
             "per_family": {f: {**v, "reference": v["estimate"], "delta": 0.0, "delta_ci95": [0.0, 0.0]}
                            for f, v in q["per_family"].items()}}
    else:
        q = audit.quality(src)
    improved = [f for f in FAMILIES if q["per_family"][f]["delta_ci95"][0] > 0]
    cfg = shipped["config"] or {}
    if src == "reference":   # zero RL steps: nothing optimised, no reward used
        recipe = {"source": "reference", "description": f"{shipped['why']}: the reference policy is "
                  "shipped unchanged", "kl_coef": 0.0, "steps": 0, "family_weights": None,
                  "reward": {f: "none" for f in FAMILIES}, "seed": audit.cfg.seed}
    elif src == OWN:
        recipe = {**cfg, "description": f"{cfg['description']}. Shipped because {shipped['why']}."}
    else:
        weights = cfg.get("family_weights")
        recipe = {"source": src, "description": f"shipped run {src} unchanged: {shipped['why']}",
                  "kl_coef": cfg["kl_coef"], "steps": cfg["steps"], "family_weights": weights,
                  "reward": {f: ("rm" if not weights or weights.get(f, 0) > 0 else "none") for f in FAMILIES},
                  "seed": cfg["seed"]}
    task = audit.task
    dev = dev_eval(load_policy(ck)[0], task.load_policy(), task.load_rm(), task.prompts_dev, task.gold, 4,
                   torch.Generator().manual_seed(audit.cfg.seed))
    cert = {"improved_over_reference": q["delta_ci95"][0] > 0, "estimated_true_quality": q["estimate"],
            "ci95": q["ci95"], "reference_true_quality": q["reference"], "delta": q["delta"],
            "delta_ci95": q["delta_ci95"], "families_improved": improved,
            "families_not_improved": [f for f in FAMILIES if f not in improved],
            "per_family": {f: {"estimate": v["estimate"], "ci95": v["ci95"], "reference": v["reference"],
                               "delta_ci95": v["delta_ci95"]} for f, v in q["per_family"].items()},
            "basis": BASIS.format(n=q["prompts_per_family"], k=q["samples_per_prompt"],
                                  how=HOW[q.get("method", "bootstrap")].format(b=q["n_boot"]))}
    # checkpoint_dir is relative to OUT (answer.json's directory): the report stays valid when OUT is moved
    evidence.record(estimate=q["estimate"], ci95=q["ci95"], n_resamples=q["n_boot"], seed=audit.cfg.seed,
                    method=f"recovered-rubric quality ({q.get('method', 'bootstrap')}), paired delta vs reference",
                    thresholds={"delta_ci95_lower_gt": 0},
                    details={"checkpoint_dir": ck.relative_to(audit_out).as_posix(), "recipe": recipe, "dev_eval": dev,
                             "certification": cert, "intervals": intervals(q.get("method", "bootstrap"), q["n_boot"],
                                                                 q.get("level_check")),
                             # the reference's own interval, for the report (SPEC's certification block has none)
                             "reference_ci95": audit.quality("reference")["ci95"]},
                    inputs=["policy/", "runs/", "data/gold_calib.jsonl", "reward_model/", "data/prompts_train.jsonl"])
    lo, hi = q["delta_ci95"]
    if not (cert["improved_over_reference"]):
        pytest.fail(f"shipped {src}: balanced delta {q['delta']:+.3f}, CI [{lo:+.3f}, {hi:+.3f}] not above 0", pytrace=False)
