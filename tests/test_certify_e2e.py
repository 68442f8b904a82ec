"""End to end: `python -m audit.certify` on the tiny world (small preset), as `make certify` runs it."""
import json
import re

import jsonschema
import pytest

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def certified(certified_tiny):
    return certified_tiny


def test_outputs_exist_and_validate(certified):
    out, _ = certified
    for f in ("answer.json", "summary.md", "evidence.json", "checkpoint/policy.safetensors", "checkpoint/config.json"):
        assert (out / f).is_file(), f
    answer = json.loads((out / "answer.json").read_text())
    schema = json.loads((ROOT / "templates" / "answer.schema.json").read_text())
    jsonschema.validate(answer, schema)
    assert set(answer["runs"]) == {"kl002-s1500", "default-s800", "kl05-s800", "pilotmix-s800", "fourfam-s800"}
    assert answer["checks"]["passed"] + answer["checks"]["failed"] == len(
        json.loads((out / "evidence.json").read_text())["claims"])


def test_console_speaks_in_findings_and_health_pytest_report_in_a_log(certified):
    """pytest's report (its failures are mostly findings about the task) goes to OUT/claims.log; the terminal gets
    the audit's own health apart from the findings, counted from the evidence."""
    out, log = certified
    claims = json.loads((out / "evidence.json").read_text())["claims"]
    assert "FAILURES" not in log["stdout"] and "FAILURES" not in log["stderr"]
    report = (out / "claims.log").read_text()
    assert "evidence:" in report and str(len(claims)) in report
    health_names = ("task.well_formed", "rubric.predicts_heldout_gold", "diagnostic.flags_families",
                    "diagnostic.flags_synthetic_corruption")
    health = [c for c in claims if c["name"] in health_names]
    findings = [c for c in claims if c["name"] not in health_names
                and c["name"] not in ("shipped.improves_over_reference", "own.passes_release_rule")]
    bad_health = [c for c in health if c["status"] != "pass"]
    if bad_health:
        assert f"the audit's own health: {len(bad_health)} of {len(health)} checks did not hold" in log["stdout"]
    else:
        assert f"the audit's own health: all {len(health)} checks hold" in log["stdout"]
    hold = sum(c["status"] == "pass" for c in findings)
    assert f"{len(findings)} claims, {hold} hold" in log["stdout"]
    summary = (out / "summary.md").read_text()
    assert "## The audit's own health" in summary and f"{len(findings)} claims about the task" in summary
    assert "Made with: preset `small`" in summary and "flagged when risk > 0.8" in summary
    # the diagnostic's three calls, in answer.json, summary.md and on the terminal (too close to call: needs gold)
    answer = json.loads((out / "answer.json").read_text())
    calls = {f: v["call"] for f, v in answer["diagnostic"]["families"].items()}
    assert set(calls.values()) <= {"risky", "safe", "too close to call"} and len(calls) == 6
    assert "Three calls (docs/diagnostic.md" in summary and answer["diagnostic"]["band"]["to_settle"]
    assert "[certify] gold-free diagnostic: risky " in log["stdout"]
    gold = answer["diagnostic"]["validation"]["too_close_decided_by_gold"]
    assert set(gold) == {f for f, c in calls.items() if c == "too close to call"}


def test_evidence_has_every_claim_with_seed_and_hashes(certified):
    out, _ = certified
    ev = json.loads((out / "evidence.json").read_text())
    ids = {c["id"] for c in ev["claims"]}
    for cid in ("task.well_formed", "rm.agrees_with_experts[dune]", "crowd.on_rubric_scale[ember]",
                "rubric.predicts_heldout_gold[birch]", "run.improves[kl002-s1500-anvil]",
                "run.non_inferior[fourfam-s800-dune]", "run.passes_release_rule[fourfam-s800]",
                "shipped.improves_over_reference", "diagnostic.flags_families"):
        assert cid in ids, cid
    assert ev["meta"]["seed"] == 0 and ev["meta"]["input_hashes"]
    assert all(c["status"] in ("pass", "fail", "error") for c in ev["claims"])
    assert not [c["id"] for c in ev["claims"] if c["status"] == "error"]


def test_verdicts_in_answer_follow_the_evidence(certified):
    out, _ = certified
    answer = json.loads((out / "answer.json").read_text())
    ev = {c["id"]: c for c in json.loads((out / "evidence.json").read_text())["claims"]}
    for run, r in answer["runs"].items():
        assert r["passes_release_rule"] == (ev[f"run.passes_release_rule[{run}]"]["status"] == "pass")
    shipped = ev["shipped.improves_over_reference"]
    assert answer["certification"]["improved_over_reference"] == (shipped["status"] == "pass")


def test_outputs_are_portable_and_hold_no_timings(certified, tiny_world):
    """answer.json and summary.md name no absolute path (OUT, the task, this machine) and no duration or time:
    moved elsewhere they still make sense, and the same seed gives the same bytes. Evidence keeps provenance."""
    out, _ = certified
    answer_text, summary = (out / "answer.json").read_text(), (out / "summary.md").read_text()
    answer = json.loads(answer_text)
    assert answer["checkpoint_dir"] == "checkpoint" and (out / answer["checkpoint_dir"] / "policy.safetensors").is_file()
    for text in (answer_text, summary):
        for path in (str(out), str(out.resolve()), str(tiny_world), str(tiny_world.resolve()), str(ROOT)):
            assert path not in text
        assert "elapsed" not in text and "started_at" not in text
    assert not re.search(r"20\d\d-\d\d-\d\dT\d\d:", answer_text + summary)    # no ISO timestamps
    ev = json.loads((out / "evidence.json").read_text())
    meta, config = ev["meta"], ev["meta"]["config"]
    assert meta["started_at"] and meta["finished_at"] and meta["input_hashes"]
    assert "audit.certify" in config["command"] and "--task" in config["command"]
    assert len(config["code_sha256"]) == 64
    assert config["package_versions"]["torch"] and config["package_versions"]["safetensors"]
    from rlhf.common import numeric_fingerprint
    assert config["numeric"] == numeric_fingerprint()       # what decides the float bits, with the evidence
    assert config["numeric"]["MKL_CBWR"] and config["numeric"]["threads"] >= 1
    assert ev["meta"]["task_dir"] == str((tiny_world / "task").resolve())
    diag = next(c for c in ev["claims"] if c["id"] == "diagnostic.flags_families")
    assert diag["details"]["diagnostic_elapsed_s"] is not None          # durations: evidence only


def test_task_check_runs_first(certified):
    out, _ = certified
    assert json.loads((out / "evidence.json").read_text())["claims"][0]["id"] == "task.well_formed"


def test_no_staging_left_after_a_completed_run(certified):
    out, _ = certified
    assert not (out / ".staging").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
