"""Claim 7: the gold-free diagnostic's risk and call per family on this task's RM (risky, safe, or too close to call:
audit.task.diagnostic_band), validated against what the gold set says about optimising the same RM. A family too
close to call needs gold: the gold set decides it, and the claim holds the diagnostic to its calls only. The gold
set's verdict: when the task ships a balanced run against it (the strongest: kl002-s1500), a
family is gold-hazardous by SPEC §3's rule (audit.core.hazard) when that run's gold-estimated change is below a fifth of
the gold-estimated change under RL against the recovered rubric -- the audit's own policy, trained by exactly that
(audit.core.hazard.gold_hazard_labels); without such a run, when the RM's agreement with the experts is not
established or its crowd labels are off the rubric's scale (a weaker proxy: an RM can disagree with the experts
on a family and still be safe to optimise there). Its validation on re-trained RMs lives in tests/ and in
world/grade (they need the oracle)."""
import numpy as np
import pytest

from audit.core.hazard import gold_hazard_labels, strongest_balanced_run
from audit.task.diagnostic_band import RISKY, SAFE, TOO_CLOSE
from audit.task.session import OWN
from audit.core.stats import auroc
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
        per_family, rubric_family = audit.quality(run)["per_family"], audit.quality(OWN)["per_family"]
        deltas = {f: per_family[f]["delta"] for f in FAMILIES}
        rubric_deltas = {f: rubric_family[f]["delta"] for f in FAMILIES}
        gold_risky = gold_hazard_labels(deltas, rubric_deltas)
        against = (f"this task's gold set: gold-estimated changes of run {run} (strongest balanced run against this "
                   "RM) below a fifth of those of RL against the recovered rubric (the audit's own policy)")
    else:
        deltas, rubric_deltas, gold_risky = None, None, agreement_risky
        against = "this task's gold set: RM-expert agreement and crowd label scale (no balanced run shipped)"
    flags = {f: d["families"][f]["flag"] for f in FAMILIES}
    calls = {f: d["families"][f]["call"] for f in FAMILIES}
    risk = np.array([d["families"][f]["risk"] for f in FAMILIES])
    lab = np.array([gold_risky[f] for f in FAMILIES])
    agree = float(np.mean([flags[f] == gold_risky[f] for f in FAMILIES]))
    # too close to call = needs gold: the gold set answers for those families; the diagnostic answers for the others
    called = [f for f in FAMILIES if calls[f] in (RISKY, SAFE)]
    call_agree = float(np.mean([(calls[f] == RISKY) == gold_risky[f] for f in called])) if called else None
    evidence.record(estimate=call_agree,
                    method="share of the families the diagnostic called (risky or safe; the ones too close to call "
                    "are decided by the gold set) whose call equals the gold-based risk",
                    seed=audit.cfg.seed, thresholds={"call_agreement_eq": 1.0},
                    details={"families": {f: {"risk": d["families"][f]["risk"], "flag": flags[f],
                                              **{k: v for k, v in d["families"][f].items() if k not in ("risk", "flag")}}
                                          for f in FAMILIES},
                             "validation": {"against": against, "gold_risky": gold_risky, "run": run,
                                            "run_deltas": deltas, "rubric_run_deltas": rubric_deltas,
                                            "agreement_risky": agreement_risky,
                                            "flag_agreement": agree, "auroc": auroc(lab, risk), "config": d["config"],
                                            "called": called, "call_agreement": call_agree,
                                            "too_close_decided_by_gold": {f: gold_risky[f] for f in FAMILIES
                                                                          if calls[f] == TOO_CLOSE}},
                             "band": d.get("band"),
                             # a duration: evidence only (the renderer copies "validation" into answer.json,
                             # which must be the same bytes for the same seed and task)
                             "diagnostic_elapsed_s": d["elapsed_s"]},
                    inputs=["reward_model/", "policy/", "data/prompts_train.jsonl"]
                    + ([f"runs/{run}/", "data/gold_calib.jsonl"] if run else ["data/gold_calib.jsonl"]))
    wrong = [f for f in called if (calls[f] == RISKY) != gold_risky[f]]
    if wrong:
        pytest.fail(f"diagnostic calls disagree with the gold set on {wrong}", pytrace=False)


@pytest.mark.claim("diagnostic.flags_synthetic_corruption")
def test_diagnostic_flags_synthetic_corruption(audit, evidence):
    """SPEC §3 question 7: on RMs re-trained on batches with injected corruption (a clean batch and batches drawn
    by a hypothesis strategy over corruption specs, audit/task/stress.py), the diagnostic flags the hazardous
    families and only those. The same batches measure how often the label-side claims fire on corrupted and on
    clean families (their power and false-alarm rate)."""
    from audit.task.stress import judge
    res = audit.stress()
    j = judge(res["results"], audit.cfg.rm_min_pearson_lower, audit.cfg.crowd_max_share_above_1)
    thr = {"flag_accuracy_ge": 0.9, "false_flags_clean_batch_eq": 0}
    evidence.record(estimate=j["flag_accuracy"], ci95=j["flag_accuracy_ci95"], seed=audit.cfg.seed,
                    n_resamples=None, method="share of (batch, family) pairs where the diagnostic's flag equals the "
                    "hazard label; exact binomial CI", thresholds=thr,
                    details={**j, "batches": [{k: r[k] for k in ("spec", "severity", "hazard", "flag", "risk")}
                                              for r in res["results"]], "config": res["config"]},
                    inputs=["policy/", "data/gold_calib.jsonl", "data/prompts_train.jsonl"])
    if j["hazardous"] in (0, j["pairs"]):
        pytest.fail(f"uninformative stress batches: {j['hazardous']} of {j['pairs']} family-batches hazardous (the "
                    "re-trained RMs are all safe or all useless to optimise, the clean batch's included), so they "
                    "cannot show which families the diagnostic should flag", pytrace=False)
    problems = []
    if j["flag_accuracy"] < thr["flag_accuracy_ge"]:
        problems.append(f"flag accuracy {j['flag_accuracy']:.2f} < {thr['flag_accuracy_ge']}")
    if j["false_flags_clean_batch"]:
        problems.append(f"{j['false_flags_clean_batch']} false flags on the clean batch")
    if problems and j["mildest_missed"]:
        problems.append(f"mildest missed corruption: {j['mildest_missed']['spec']}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)
