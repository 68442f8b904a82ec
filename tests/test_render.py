"""audit.render: evidence.json -> answer.json / summary.md / figures, honestly and atomically."""
import copy
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from audit.task import render as R
from audit.task.figures import FIGURE_NAMES

FAMS = ["anvil", "birch", "cobalt", "dune", "ember", "fjord"]
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def claim(cid, status="pass", message="", **kw):
    name, _, p = cid.partition("[")
    c = {"id": cid, "name": name, "param": p[:-1] if p else None, "status": status, "estimate": None, "ci95": None,
         "method": "bca bootstrap", "n_resamples": 2000, "seed": 0, "thresholds": {}, "input_hashes": {},
         "details": {}, "message": message}
    c.update(kw)
    return c


def shipped_claim(status="pass", message="", **cert_over):
    cert = {"improved_over_reference": True, "estimated_true_quality": 0.71, "ci95": [0.68, 0.74],
            "reference_true_quality": 0.27, "families_improved": FAMS[:3] + FAMS[5:],
            "families_not_improved": ["dune", "ember"],
            "per_family": {f: {"estimate": 0.7, "ci95": [0.66, 0.74], "reference": 0.27, "delta_ci95": [0.39, 0.47]}
                           for f in FAMS},
            "basis": "rubric refit on 200 gold resamples x prompt bootstrap"}
    cert.update(cert_over)
    return claim("shipped.improves_over_reference", status, message, estimate=0.71, ci95=[0.68, 0.74], details={
        "checkpoint_dir": "out/ship/policy",
        "recipe": {"source": "own", "description": "hybrid reward", "kl_coef": 0.02, "steps": 1500,
                   "family_weights": None, "reward": {f: ("rubric" if f in ("dune", "ember") else "rm") for f in FAMS},
                   "seed": 0},
        "dev_eval": {"proxy_mean": 1.1, "proxy_std": 0.3, "proxy_p50": 1.0, "proxy_p90": 1.5, "kl_mean": 14.0,
                     "rm_gold_pearson": 0.23},
        "certification": cert, "intervals": INTERVALS, "reference_ci95": [0.25, 0.29]})


BAND = {"line": 0.8, "below": 0.2, "above": 0.05, "safe_below": 0.6, "risky_above": 0.85, "level": 0.99,
        "measured": True, "basis": "measured on benches", "to_settle": "gold labels on this family; or --settle"}
INTERVALS = {"method": "rubric + sampling", "rubric": "posterior draws", "sampling": "bounded-mean interval",
             "confidence": 0.95, "why": "never of zero width"}


def run_claim(run, status="pass", message="", reasons=(), **det):
    details = {"estimated_true_quality": 0.33, "ci95": [0.31, 0.35], "passes_release_rule": status == "pass",
               "reasons": list(reasons),
               "per_family": {f: {"estimate": 0.3 + 0.01 * i, "proxy": 0.4 + 0.1 * i, "reference": 0.27}
                              for i, f in enumerate(FAMS)},
               "curve": [{"step": s, "proxy": s / 1000, "true": 0.27 + s / 20000} for s in range(0, 801, 200)]}
    details.update(det)
    return claim(f"run.passes_release_rule[{run}]", status, message, estimate=0.33, ci95=[0.31, 0.35],
                 thresholds={"min_gain": 0.05, "noninferiority_margin": -0.03}, details=details)


def full_evidence():
    claims = [shipped_claim(),
              run_claim("fourfam-s800"),
              run_claim("kl002-s1500", "fail", "AssertionError: dune change CI lower -0.21 <= -0.03",
                        reasons=["dune: CI lower bound of change -0.21 <= -0.03"])]
    for f in FAMS:
        bad = f in ("dune", "ember")
        claims.append(claim(f"rm.agrees_with_experts[{f}]", "fail" if bad else "pass",
                            "AssertionError: r too low" if bad else "", estimate=0.1 if bad else 0.5,
                            ci95=[-0.1, 0.3] if bad else [0.35, 0.62],
                            details={"rm_gold_pearson": 0.1 if bad else 0.5,
                                     "ci95": [-0.1, 0.3] if bad else [0.35, 0.62],
                                     "spearman": 0.45, "spearman_ci95": [0.3, 0.6], "n": 100}))
        claims.append(claim(f"crowd.on_rubric_scale[{f}]", "fail" if f == "dune" else "pass",
                            "AssertionError: 32% above 1" if f == "dune" else "",
                            estimate=0.32 if f == "dune" else 0.0,
                            details={"crowd_labels_above_1": 0.32 if f == "dune" else 0.0,
                                     "max_label": 4.8 if f == "dune" else 0.9, "n": 200}))
    claims.append(claim("diagnostic.flags_families", details={
        "families": {f: {"risk": 0.9 if f in ("dune", "ember") else 0.1, "flag": f in ("dune", "ember"),
                         "call": "risky" if f in ("dune", "ember") else "safe",
                         "call_interval": [0.85, 1.1] if f in ("dune", "ember") else [0.05, 0.3]}
                     for f in FAMS},
        "band": BAND,
        "validation": {"auroc": 0.97, "n_rms": 7},
        "experiment": {"name": "diagnostic-validation", "files": ["exp/diag.json"], "results": {"auroc": 0.97}}}))
    return {"schema_version": 1,
            "meta": {"task_dir": "worlds/canonical/task", "seed": 0, "input_hashes": {"data/x.jsonl": "ab" * 32},
                     "started_at": "2025-01-01T00:00:00+00:00", "finished_at": "2025-01-01T00:10:00+00:00",
                     "config": {}},
            "claims": claims}


def write_ev(path, doc):
    path.write_text(json.dumps(doc))
    return path


def replace_claim(doc, cid, new):
    doc["claims"] = [new if c["id"] == cid else c for c in doc["claims"]]
    if new is not None and not any(c["id"] == cid for c in doc["claims"]):
        doc["claims"].append(new)
    doc["claims"] = [c for c in doc["claims"] if c is not None]
    return doc


def do_render(tmp_path, doc, **kw):
    ev = write_ev(tmp_path / "evidence_in.json", doc)
    out = tmp_path / "out"
    ans = R.render(ev, out, figures=kw.pop("figures", False), **kw)
    on_disk = json.loads((out / "answer.json").read_text())
    assert on_disk == ans
    R.validate_answer(on_disk)
    return on_disk, (out / "summary.md").read_text()


# ------------------------------------------------------------------------------------------- the contract
def test_all_passing_evidence_is_certified_and_matches_spec_shape(tmp_path):
    ans, summary = do_render(tmp_path, full_evidence(), rule_text="Default rule: gain >= 0.05, non-inferior.")
    assert list(ans) == ["checkpoint_dir", "recipe", "dev_eval", "certification", "runs", "reward_model",
                         "diagnostic", "intervals", "checks", "experiments"]
    cert = ans["certification"]
    assert cert["improved_over_reference"] is True
    assert cert["estimated_true_quality"] == 0.71 and cert["ci95"] == [0.68, 0.74]
    assert cert["families_not_improved"] == ["dune", "ember"]
    assert set(cert["per_family"]["dune"]) == {"estimate", "ci95", "reference", "delta_ci95"}
    assert ans["checkpoint_dir"] == "out/ship/policy" and ans["recipe"]["kl_coef"] == 0.02
    assert ans["runs"]["fourfam-s800"]["passes_release_rule"] is True
    assert ans["runs"]["kl002-s1500"]["passes_release_rule"] is False
    assert ans["runs"]["kl002-s1500"]["reasons"] == ["dune: CI lower bound of change -0.21 <= -0.03"]
    assert {f for f, m in ans["reward_model"].items() if m["flag"]} == {"dune", "ember"}
    assert ans["reward_model"]["dune"] == {"rm_gold_pearson": 0.1, "ci95": [-0.1, 0.3],
                                           "crowd_labels_above_1": 0.32, "flag": True}
    assert ans["diagnostic"]["families"]["dune"] == {"risk": 0.9, "flag": True, "call": "risky",
                                                     "call_interval": [0.85, 1.1]}
    assert ans["diagnostic"]["band"] == {k: BAND[k] for k in R.BAND_KEYS}
    assert "- Gold-free diagnostic: risky to optimise: dune, ember; safe: anvil, birch, cobalt, fjord; too close " \
           "to call, **needs gold**: none." in summary
    assert ans["diagnostic"]["validation"]["auroc"] == 0.97
    assert ans["diagnostic"]["validation"]["check_status"] == "pass"
    # 1 shipped + 2 runs + 12 rm/crowd + 1 diagnostic = 16 claims; 4 failed
    assert ans["checks"] == {"passed": 12, "failed": 4, "evidence": "evidence.json"}
    assert ans["experiments"] == [{"name": "diagnostic-validation", "files": ["exp/diag.json"],
                                   "results": {"auroc": 0.97}}]
    assert ans["intervals"] == INTERVALS and "Intervals: rubric + sampling; posterior draws" in summary
    assert (tmp_path / "out" / "evidence.json").read_text() == (tmp_path / "evidence_in.json").read_text()
    assert cert["reference_ci95"] == [0.25, 0.29]           # the reference's CI in answer.json, as in summary.md
    # summary: the decision and how sure, then the audit's health, then the findings, method last
    order = ["**Ship `out/ship/policy`: certified", "## The audit's own health", "## Findings",
             "## Method and provenance"]
    assert [summary.index(h) for h in order] == sorted(summary.index(h) for h in order)
    assert "95% confident: its true quality on the deployment mix is at least **0.680** (estimate 0.710, " \
           "at most 0.740), against 0.270 for the reference (95% CI [0.250, 0.290])" in summary
    assert summary.count("0.710") == 1                          # every figure once
    method = summary.split("## Method and provenance")[1]
    assert "Default rule: gain >= 0.05" in method and "`min_gain` = `0.05`" in method
    assert "Intervals: rubric + sampling" in method
    assert re.search(r"\| `fourfam-s800` \| 0.330 \| \[0.310, 0.350\] \| \*\*passes\*\*", summary)
    assert re.search(r"\| `kl002-s1500` \|.*\| does not pass \| dune: CI lower", summary)
    # the audit's own health (here: the diagnostic's validation) apart from its findings: 14, of which 4 do not hold
    assert "All 1 checks of the audit's own validity hold (`diagnostic.flags_families`)" in summary
    assert "14 claims about the task: 10 hold, 4 do not" in summary
    failed_section = summary.split("### Claims that do not hold")[1].split("## Method")[0]
    assert "- `run.passes_release_rule` (1): kl002-s1500" in failed_section
    assert "- `rm.agrees_with_experts` (2): dune, ember" in failed_section
    assert "- `crowd.on_rubric_scale` (1): dune" in failed_section
    assert "anvil" not in failed_section


def test_health_checks_apart_from_findings(tmp_path):
    """A failed check of the audit's own validity is said at the top and listed under health, not among findings."""
    doc = full_evidence()
    doc["claims"] += [claim("rubric.predicts_heldout_gold[anvil]"),
                      claim("rubric.predicts_heldout_gold[birch]", "fail", "AssertionError: R2 0.1 <= 0.5")]
    _, summary = do_render(tmp_path, doc)
    assert "**1 of 3 checks of the audit's own validity did not hold.**" in summary
    health = summary.split("## The audit's own health")[1].split("## Findings")[0]
    findings = summary.split("## Findings")[1].split("## Method")[0]
    assert summary.index("## The audit's own health") < summary.index("## Findings")   # health before findings
    assert "`rubric.predicts_heldout_gold[birch]` **fail**: AssertionError: R2 0.1 <= 0.5" in health
    assert "Hold: " in health and "`rubric.predicts_heldout_gold[anvil]`" in health
    assert "rubric.predicts_heldout_gold" not in findings
    assert "14 claims about the task: 10 hold, 4 do not" in summary


@pytest.mark.parametrize("status", ["fail", "error"])
def test_failed_or_errored_shipped_claim_is_not_certified_but_numbers_shown(tmp_path, status):
    msg = "AssertionError: CI lower bound 0.25 <= reference 0.27" if status == "fail" else "RuntimeError: boom"
    doc = replace_claim(full_evidence(), "shipped.improves_over_reference", shipped_claim(status, msg))
    ans, summary = do_render(tmp_path, doc)
    cert = ans["certification"]
    assert cert["improved_over_reference"] is False
    assert cert["estimated_true_quality"] == 0.71 and cert["ci95"] == [0.68, 0.74]     # shown, not hidden
    assert cert["basis"].startswith("NOT CERTIFIED")
    assert msg in cert["basis"] and ("failed" if status == "fail" else "errored") in cert["basis"]
    assert ans["checks"]["failed"] == 5
    assert "**Not certified: keep the reference policy.**" in summary and "**Ship" not in summary
    assert f"`shipped.improves_over_reference` **{status}**" in summary


def test_missing_shipped_claim_renders_nulls_and_no_evidence(tmp_path):
    doc = replace_claim(full_evidence(), "shipped.improves_over_reference", None)
    ans, summary = do_render(tmp_path, doc)
    cert = ans["certification"]
    assert cert["improved_over_reference"] is False
    assert cert["estimated_true_quality"] is None and cert["ci95"] is None
    assert cert["reference_true_quality"] is None and cert["per_family"] == {}
    assert cert["families_improved"] == [] and cert["families_not_improved"] == []
    assert "no evidence" in cert["basis"]
    assert ans["checkpoint_dir"] is None and ans["recipe"] is None and ans["dev_eval"] is None
    assert "**Not certified: keep the reference policy.**" in summary
    assert "No evidence: claim `shipped.improves_over_reference`" in summary


@pytest.mark.parametrize("variant", ["says_not_improved", "no_numbers"])
def test_passing_shipped_claim_without_support_is_not_certified(tmp_path, variant):
    if variant == "says_not_improved":
        c = shipped_claim(improved_over_reference=False)
    else:
        c = shipped_claim(estimated_true_quality=None, ci95=None, reference_true_quality=None)
        c["estimate"], c["ci95"] = None, None
    ans, _ = do_render(tmp_path, replace_claim(full_evidence(), c["id"], c))
    assert ans["certification"]["improved_over_reference"] is False
    assert ans["certification"]["basis"].startswith("NOT CERTIFIED")


def test_empty_evidence_certifies_nothing(tmp_path):
    doc = full_evidence()
    doc["claims"] = []
    ans, summary = do_render(tmp_path, doc)
    assert ans["certification"]["improved_over_reference"] is False
    assert ans["runs"] == {} and ans["reward_model"] == {} and ans["experiments"] == []
    assert ans["diagnostic"] == {"families": {}, "band": None, "validation": None}
    assert ans["checks"] == {"passed": 0, "failed": 0, "evidence": "evidence.json"}
    assert "No run verdicts (no evidence)" in summary


def test_run_verdict_only_from_a_passing_claim(tmp_path):
    doc = full_evidence()
    doc["claims"] += [run_claim("kl05-s800", "error", "ValueError: no checkpoint"),
                      run_claim("default-s800", "pass", passes_release_rule=False),
                      run_claim("pilotmix-s800", "pass", estimated_true_quality=None, ci95=None)]
    doc["claims"][-1]["estimate"] = doc["claims"][-1]["ci95"] = None
    ans, summary = do_render(tmp_path, doc)
    runs = ans["runs"]
    assert [r for r, v in runs.items() if v["passes_release_rule"]] == ["fourfam-s800"]
    assert runs["kl05-s800"]["reasons"] == ["check errored: ValueError: no checkpoint"]
    assert runs["kl05-s800"]["estimated_true_quality"] == 0.33                       # numbers still shown
    assert any("release rule is not met" in r for r in runs["default-s800"]["reasons"])
    assert any("no estimate" in r for r in runs["pilotmix-s800"]["reasons"])
    assert "(1 of them could not be evaluated)" in summary
    assert "kl05-s800 (error: ValueError: no checkpoint)" in summary


def test_reward_model_flag_unless_both_claims_pass(tmp_path):
    doc = full_evidence()
    doc = replace_claim(doc, "crowd.on_rubric_scale[birch]", None)            # missing -> flagged, value null
    doc = replace_claim(doc, "rm.agrees_with_experts[cobalt]",
                        claim("rm.agrees_with_experts[cobalt]", "error", "RuntimeError: x"))
    ans, _ = do_render(tmp_path, doc)
    rm = ans["reward_model"]
    assert rm["anvil"]["flag"] is False
    assert rm["birch"]["flag"] is True and rm["birch"]["crowd_labels_above_1"] is None
    assert rm["cobalt"]["flag"] is True and rm["cobalt"]["rm_gold_pearson"] is None
    assert rm["ember"]["flag"] is True and rm["ember"]["crowd_labels_above_1"] == 0.0


def test_failed_diagnostic_claim_is_marked(tmp_path):
    doc = full_evidence()
    diag = next(c for c in doc["claims"] if c["id"] == "diagnostic.flags_families")
    diag["status"], diag["message"] = "fail", "AssertionError: AUROC 0.6 < 0.8"
    ans, summary = do_render(tmp_path, doc)
    v = ans["diagnostic"]["validation"]
    assert v["check_status"] == "fail" and "AUROC 0.6" in v["check_message"]
    assert "its validation on this task failed" in summary


def test_nan_in_evidence_becomes_null(tmp_path):
    doc = full_evidence()
    text = json.dumps(doc).replace('"rm_gold_pearson": 0.5', '"rm_gold_pearson": NaN', 1)
    ev = tmp_path / "ev.json"
    ev.write_text(text)
    ans = R.render(ev, tmp_path / "out", figures=False)
    assert ans["reward_model"]["anvil"]["rm_gold_pearson"] is None


# ----------------------------------------------------------------------------------------- schema, atomicity
def test_schema_rejects_certified_without_numbers_and_extra_keys():
    schema = json.loads((TEMPLATES / "answer.schema.json").read_text())
    good = R.build_answer(full_evidence())
    jsonschema.validate(good, schema)
    bad = copy.deepcopy(good)
    bad["certification"]["estimated_true_quality"] = None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(good)
    bad["runs"]["fourfam-s800"]["ci95"] = None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(good)
    bad["made_up"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_answer_template_puts_every_value_through_tojson():
    text = (TEMPLATES / "answer.json.j2").read_text()
    exprs = re.findall(r"\{\{(.*?)\}\}", text)
    assert exprs
    for e in exprs:
        assert "tojson" in e or "loop.last" in e, e


def _leftovers(out):
    return sorted(p.name for p in out.rglob("*.tmp"))


def test_schema_violating_evidence_leaves_previous_answer_intact(tmp_path):
    _, _ = do_render(tmp_path, full_evidence())
    out = tmp_path / "out"
    before = {n: (out / n).read_bytes() for n in ("answer.json", "summary.md", "evidence.json")}
    bad = full_evidence()
    bad["claims"][0]["details"]["certification"]["estimated_true_quality"] = "0.71"   # a string, not a number
    ev = write_ev(tmp_path / "bad.json", bad)
    with pytest.raises(R.AnswerSchemaError, match="estimated_true_quality"):
        R.render(ev, out, figures=False)
    assert {n: (out / n).read_bytes() for n in before} == before
    assert _leftovers(out) == []
    assert R.main(["--evidence", str(ev), "--out", str(out), "--no-figures"]) == 2
    assert (out / "answer.json").read_bytes() == before["answer.json"]


def test_crash_mid_render_leaves_previous_answer_byte_identical(tmp_path, monkeypatch):
    do_render(tmp_path, full_evidence())
    out = tmp_path / "out"
    old = (out / "answer.json").read_bytes()
    doc = replace_claim(full_evidence(), "shipped.improves_over_reference", shipped_claim("fail", "no"))
    ev = write_ev(tmp_path / "new.json", doc)

    real_replace = os.replace

    def crash_on_answer(src, dst, *a, **k):          # temp file fully written, then the process "dies"
        if str(dst).endswith("answer.json"):
            raise KeyboardInterrupt("simulated crash")
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", crash_on_answer)
    with pytest.raises(KeyboardInterrupt):
        R.render(ev, out, figures=False)
    monkeypatch.setattr(os, "replace", real_replace)
    assert (out / "answer.json").read_bytes() == old
    assert _leftovers(out) == []

    def crash_in_summary(*a, **k):
        raise RuntimeError("simulated crash while rendering the summary")

    monkeypatch.setattr(R, "render_summary", crash_in_summary)
    with pytest.raises(RuntimeError):
        R.render(ev, out, figures=False)
    assert (out / "answer.json").read_bytes() == old
    monkeypatch.undo()
    ans = R.render(ev, out, figures=False)                # and a clean re-run replaces it
    assert ans["certification"]["improved_over_reference"] is False
    assert (out / "answer.json").read_bytes() != old


def test_figures_only_from_data_present(tmp_path):
    ans, summary = do_render(tmp_path, full_evidence(), figures=True)
    figs = tmp_path / "out" / "figures"
    names = sorted(p.name for p in figs.iterdir())
    assert names == sorted(FIGURE_NAMES)
    for n in names:
        assert (figs / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](figures/{n})" in summary
    # evidence without diagnostic, curves or proxies: those figures disappear, stale files removed
    doc = full_evidence()
    doc = replace_claim(doc, "diagnostic.flags_families", None)
    for c in doc["claims"]:
        c["details"].pop("curve", None)
    ans, summary = do_render(tmp_path, doc, figures=True)
    names = sorted(p.name for p in figs.iterdir())
    assert names == ["quality_vs_proxy.png", "rm_agreement.png"]
    assert "diagnostic_risk.png" not in summary and "training_curves.png" not in summary
    assert "](figures/rm_agreement.png)" in summary


def test_render_stages_temp_files_and_cleans_up(tmp_path):
    do_render(tmp_path, full_evidence(), figures=True)
    out = tmp_path / "out"
    assert not (out / ".staging").exists() and _leftovers(out) == []
    assert oct((out / "answer.json").stat().st_mode & 0o777) != oct(0o600)   # not mkstemp's private mode


def test_measured_numbers_carry_four_decimals_and_experiments_are_a_table(tmp_path):
    """Estimates, CIs and every other measured number are rounded to 4 decimals (the schema says so); the
    recipe is configuration and stays exact; the summary's experiments are a table, not raw JSON."""
    doc = full_evidence()
    ship = doc["claims"][0]["details"]
    ship["certification"].update(estimated_true_quality=0.98861234567, ci95=[0.97812345678, 0.99912345678])
    ship["recipe"]["lr"] = 0.000123456789
    ship["dev_eval"]["kl_mean"] = 14.123456789
    diag = next(c for c in doc["claims"] if c["id"] == "diagnostic.flags_families")
    diag["details"]["experiment"]["results"] = {"auroc": 0.987654321, "steps": 60, "passes": True, "name": "a|b"}
    ans, summary = do_render(tmp_path, doc)
    cert = ans["certification"]
    assert cert["estimated_true_quality"] == 0.9886 and cert["ci95"] == [0.9781, 0.9991]
    assert ans["dev_eval"]["kl_mean"] == 14.1235 and ans["recipe"]["lr"] == 0.000123456789

    def floats(x, path=""):
        if isinstance(x, float):
            yield path, x
        elif isinstance(x, dict):
            for k, v in x.items():
                yield from floats(v, f"{path}/{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from floats(v, f"{path}/{i}")
    loose = [(p, v) for p, v in floats({k: v for k, v in ans.items() if k != "recipe"}) if round(v, 4) != v]
    assert not loose
    assert "0.987654321" not in summary and "`{" not in summary.split("| experiment | result | value |")[1]
    section = summary.split("## Method and provenance")[1]
    assert "| experiment | result | value |" in section
    assert re.search(r"\| diagnostic-validation \(exp/diag.json\) \| auroc \| 0\.9877 \|", section)
    assert re.search(r"\|\s+\| steps \| 60 \|", section) and re.search(r"\|\s+\| passes \| yes \|", section)
    assert "a\\|b" in section


def test_each_diagnostic_decision_says_how_sure_from_the_stress(tmp_path):
    doc = full_evidence()
    ans, summary = do_render(tmp_path, doc)                      # no stress claim: nothing to read it from
    assert "how_sure" not in ans["diagnostic"]["validation"] and "how sure" not in summary
    # three stress batches; the flag is wrong at risks 0.75 and 0.85 (near the line), right everywhere else
    risks = [[0.0, 0.05, 0.1, 0.15, 0.2, 0.25], [0.3, 0.35, 0.4, 0.45, 0.5, 0.55], [0.7, 0.75, 0.85, 0.9, 1.2, 1.5]]
    batches = [{"spec": {} if b == 0 else {"dune": {"kind": "scaled", "replaced_share": 0.5, "scale": 2.0}},
                "severity": b, "risk": dict(zip(FAMS, rs)), "flag": {f: r > 0.8 for f, r in zip(FAMS, rs)},
                "hazard": {f: (r > 0.8) != (r in (0.75, 0.85)) for f, r in zip(FAMS, rs)}}
               for b, rs in enumerate(risks)]
    stress = claim("diagnostic.flags_synthetic_corruption", details={
        "pairs": 18, "hazardous": 4, "flag_accuracy": 16 / 18, "flag_accuracy_ci95": [0.5, 0.98], "auroc": 0.9,
        "false_flags": 1, "false_flags_clean_batch": 0, "missed": 1, "mildest_missed": None,
        "label_claims": {}, "batches": batches})
    ans, summary = do_render(tmp_path, replace_claim(doc, stress["id"], stress))
    sure = ans["diagnostic"]["validation"]["how_sure"]
    assert set(sure["families"]) == set(FAMS) and "exact binomial 95% CI" in sure["method"]
    flagged, far = sure["families"]["dune"], sure["families"]["anvil"]    # risks 0.9 (flagged) and 0.1
    assert flagged["decisions"] == 4 and flagged["risk_range"] == [0.85, 1.5]   # the stress's four flags
    assert flagged["right"] == 3                                       # the flag at 0.85 was wrong
    assert far["decisions"] == 10 and far["right"] == 10 and far["risk_range"] == [0.0, 0.45]
    assert sure["families"]["ember"]["right"] == 3 and sure["nearest"] == 10
    assert "how sure: right of the nearest stress decisions with the same call" in summary
    assert "| dune | 0.900 | **flagged** | risky | [0.850, 1.100] | 3/4 ([" in summary
    # the task's band (safe below 0.6, risky above 0.85) on the same 18 decisions: the two wrong flags (0.75, 0.85)
    # are too close to call, as is 0.7; the 15 called are all right
    sc = ans["diagnostic"]["validation"]["stress_calls"]
    assert (sc["called"], sc["right"], sc["too_close"]) == (15, 15, 3)
    assert "The same band on this audit's stress decisions" in summary and "15 called, 15 of them right" in summary


def test_too_close_to_call_says_needs_gold_and_what_the_gold_set_says(tmp_path):
    """A family too close to call: answer.json carries the call and where SPEC's rule may put it, the band and
    what would settle it; summary.md's first lines say it needs gold and give the gold set's verdict on it."""
    doc = full_evidence()
    diag = next(c for c in doc["claims"] if c["id"] == "diagnostic.flags_families")
    diag["details"]["families"]["anvil"].update(risk=0.7, call="too close to call", call_interval=[0.65, 0.9])
    diag["details"]["validation"]["too_close_decided_by_gold"] = {"anvil": True}
    ans, summary = do_render(tmp_path, doc)
    assert ans["diagnostic"]["families"]["anvil"] == {"risk": 0.7, "flag": False, "call": "too close to call",
                                                      "call_interval": [0.65, 0.9]}
    assert ans["diagnostic"]["validation"]["too_close_decided_by_gold"] == {"anvil": True}
    assert "too close to call, **needs gold**: anvil (the gold set here: hazardous)" in summary
    assert "**risky** when the risk is above 0.850, **safe** below 0.600" in summary
    assert "A family too close to call needs gold: gold labels on this family; or --settle." in summary
    assert "| anvil | 0.700 | no | **too close to call** | [0.650, 0.900] |" in summary
    from audit.task.certify import diagnostic_line
    assert diagnostic_line(ans) == ("[certify] gold-free diagnostic: risky dune, ember; safe birch, cobalt, fjord; "
                                    "too close to call, needs gold: anvil (gold: hazardous)")
    diag["details"]["families"]["anvil"].pop("call")          # evidence without calls: no call, no line
    (tmp_path / "old").mkdir()
    ans, _ = do_render(tmp_path / "old", doc)
    assert ans["diagnostic"]["families"]["anvil"]["call"] is None and diagnostic_line(ans) is None


def test_an_errored_stress_claim_renders_with_its_message(tmp_path):
    """A stress claim that errored before recording anything (details empty: hypothesis failed to draw, say)
    is reported as such; the rest of the report renders (it once stopped the render: exit 1, no report)."""
    doc = full_evidence()
    stress = claim("diagnostic.flags_synthetic_corruption", "error", "ImportError: cannot import name 'x'")
    ans, summary = do_render(tmp_path, replace_claim(doc, stress["id"], stress))
    assert "Claim `diagnostic.flags_synthetic_corruption`: **error** (ImportError: cannot import name 'x')" in summary
    assert ans["certification"]["improved_over_reference"] is True
