"""audit.core.evidence (recorder, JSON-safety, input hashes) and the checks/evidence_plugin.py pytest plugin."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from audit.core.evidence import (EvidenceRecorder, hash_inputs, load_evidence, make_claim_id, split_claim_id,
                            to_jsonable)

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parent.parent


def test_to_jsonable_plain_types_and_nan():
    x = {"a": np.float32(0.5), "b": np.int64(3), "c": np.array([1.0, np.nan, np.inf]), 4: (1, 2),
         "d": float("nan"), "e": np.bool_(True), "f": Path("x/y"), "g": [{"h": np.float64(-np.inf)}]}
    y = to_jsonable(x)
    assert y == {"a": 0.5, "b": 3, "c": [1.0, None, None], "4": [1, 2], "d": None, "e": True, "f": "x/y",
                 "g": [{"h": None}]}
    assert type(y["b"]) is int and type(y["e"]) is bool
    json.dumps(y, allow_nan=False)


def test_claim_ids():
    assert make_claim_id("rm.agrees_with_experts", "dune") == "rm.agrees_with_experts[dune]"
    assert make_claim_id("shipped.improves_over_reference") == "shipped.improves_over_reference"
    assert split_claim_id("run.passes_release_rule[kl002-s1500]") == ("run.passes_release_rule", "kl002-s1500")
    assert split_claim_id("diagnostic.flags_families") == ("diagnostic.flags_families", None)


def test_recorder_merges_records_and_keeps_numbers_of_failed_claims(tmp_path):
    rec = EvidenceRecorder()
    rec.record("rm.agrees_with_experts[dune]", estimate=np.float64(0.08), ci95=(np.float32(-0.1), 0.25),
               method="bca", n_resamples=np.int64(2000), seed=0, thresholds={"min_r": 0.3},
               details={"n": 100}, inputs=["data/gold_calib.jsonl", "reward_model"])
    rec.record("rm.agrees_with_experts[dune]", details={"spearman": 0.1})
    rec.finish("rm.agrees_with_experts[dune]", "fail", "AssertionError: 0.08 < 0.3")
    rec.record_result("crowd.on_rubric_scale[dune]", {"estimate": 0.32, "ci95": [0.26, 0.38], "method": "percentile",
                                                      "n_resamples": 500, "seed": 1, "n": 200, "confidence": 0.95})
    rec.record("never.finished", estimate=1.0)
    rec.finish("plain.pass", "pass")
    with pytest.raises(ValueError):
        rec.finish("x", "passed")
    with pytest.raises(TypeError):
        rec.record("x", estimate="high")
    meta = {"task_dir": "t", "seed": 3, "input_hashes": {"data/gold_calib.jsonl": "aa", "reward_model/rm.safetensors": "bb",
                                                          "reward_model/train.jsonl": "cc", "data/other": "dd"}}
    path = tmp_path / "sub" / "evidence.json"
    doc = rec.write(path, meta)
    assert json.loads(path.read_text()) == doc == load_evidence(path)
    assert not [p for p in path.parent.iterdir() if p.name != "evidence.json"]      # no temp files left
    claims = {c["id"]: c for c in doc["claims"]}
    dune = claims["rm.agrees_with_experts[dune]"]
    assert dune["status"] == "fail" and dune["estimate"] == 0.08 and dune["ci95"] == [pytest.approx(-0.1), 0.25]
    assert dune["name"] == "rm.agrees_with_experts" and dune["param"] == "dune"
    assert dune["details"] == {"n": 100, "spearman": 0.1} and dune["n_resamples"] == 2000
    assert dune["thresholds"] == {"min_r": 0.3}
    assert dune["input_hashes"] == {"data/gold_calib.jsonl": "aa", "reward_model/rm.safetensors": "bb",
                                    "reward_model/train.jsonl": "cc"}
    crowd = claims["crowd.on_rubric_scale[dune]"]
    assert crowd["method"] == "percentile" and crowd["details"] == {"n": 200, "confidence": 0.95}
    assert claims["never.finished"]["status"] == "error"
    assert claims["plain.pass"] == {**claims["plain.pass"], "status": "pass", "estimate": None, "details": {}}
    assert set(dune) == {"id", "name", "param", "status", "estimate", "ci95", "method", "n_resamples", "seed",
                         "thresholds", "input_hashes", "details", "message"}
    assert doc["schema_version"] == 1 and doc["meta"]["seed"] == 3
    assert {"started_at", "finished_at", "config"} <= set(doc["meta"])


def test_hash_inputs(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("x\n")
    big = np.random.default_rng(0).bytes(2_500_000)                 # spans several 1 MiB chunks
    (tmp_path / "policy.safetensors").write_bytes(big)
    h = hash_inputs(tmp_path)
    assert list(h) == ["data/a.jsonl", "policy.safetensors"]
    assert h["policy.safetensors"] == hashlib.sha256(big).hexdigest()
    assert h["data/a.jsonl"] == hashlib.sha256(b"x\n").hexdigest()
    assert hash_inputs(None) == {}
    with pytest.raises(FileNotFoundError):
        hash_inputs(tmp_path / "missing")


def test_load_evidence_rejects_malformed(tmp_path):
    p = tmp_path / "e.json"
    for text in ("{", json.dumps({"schema_version": 2, "claims": []}),
                 json.dumps({"schema_version": 1, "meta": {}, "claims": [{"id": "a", "status": "passed"}]})):
        p.write_text(text)
        with pytest.raises(ValueError):
            load_evidence(p)


CHECKS = '''
import numpy as np
import pytest


@pytest.mark.claim("rm.agrees_with_experts")
@pytest.mark.parametrize("family", ["dune", "anvil"])
def test_rm_agrees_with_experts(family, evidence, task_dir, audit_seed):
    r = 0.08 if family == "dune" else 0.5
    evidence.record(estimate=np.float64(r), ci95=np.array([r - 0.1, r + 0.1]), method="bca", seed=audit_seed,
                    thresholds={"min_r": 0.3}, inputs=["data"])
    assert r > 0.3, f"{family}: r={r}"


@pytest.mark.claim("run.passes_release_rule")
@pytest.mark.parametrize("run", [0.02], ids=["kl002-s1500"])
def test_run(run, evidence):
    evidence.record(estimate=float("nan"))
    raise RuntimeError("checkpoint unreadable")


@pytest.fixture
def broken():
    raise OSError("no gold file")


@pytest.mark.claim("crowd.on_rubric_scale")
def test_setup_error(broken):
    pass


@pytest.mark.claim("diagnostic.flags_families")
def test_skipped():
    pytest.skip("diagnostic not built yet")


def test_rm_scale_ok():
    pass


@pytest.mark.claim("shipped.improves_over_reference")
def test_fail_helper(evidence):
    evidence.record(estimate=0.6, details={"certification": {"basis": "x"}})
    pytest.fail("CI lower bound below the reference")
'''


def test_plugin_end_to_end(pytester, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    pytester.makeconftest('pytest_plugins = ["audit.checks.evidence_plugin"]')   # as checks/conftest.py loads it
    pytester.makepyfile(test_rm=CHECKS)
    task = pytester.path / "task"
    (task / "data").mkdir(parents=True)
    (task / "data" / "gold_calib.jsonl").write_text("{}\n")
    (task / "configs").mkdir()
    (task / "configs" / "default.json").write_text("{}\n")
    ev = pytester.path / "out" / "evidence.json"
    result = pytester.runpytest("--evidence", str(ev), "--task", str(task), "--seed", "7", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["evidence: 7 claims (2 pass, 2 fail, 3 error)*"])
    doc = load_evidence(ev)
    claims = {c["id"]: c for c in doc["claims"]}
    assert {cid: c["status"] for cid, c in claims.items()} == {
        "rm.agrees_with_experts[dune]": "fail",
        "rm.agrees_with_experts[anvil]": "pass",
        "run.passes_release_rule[kl002-s1500]": "error",
        "crowd.on_rubric_scale": "error",
        "diagnostic.flags_families": "error",
        "rm.scale_ok": "pass",
        "shipped.improves_over_reference": "fail",
    }
    dune = claims["rm.agrees_with_experts[dune]"]
    assert dune["estimate"] == 0.08 and dune["ci95"] == [pytest.approx(-0.02), pytest.approx(0.18)]
    assert dune["seed"] == 7 and dune["param"] == "dune" and "dune: r=0.08" in dune["message"]
    assert dune["input_hashes"] == {"data/gold_calib.jsonl": hashlib.sha256(b"{}\n").hexdigest()}
    run = claims["run.passes_release_rule[kl002-s1500]"]
    assert run["estimate"] is None and "RuntimeError: checkpoint unreadable" in run["message"]
    assert "setup error" in claims["crowd.on_rubric_scale"]["message"]
    assert "OSError: no gold file" in claims["crowd.on_rubric_scale"]["message"]
    assert claims["diagnostic.flags_families"]["message"] == "skipped: diagnostic not built yet"
    assert claims["rm.scale_ok"]["details"] == {} and claims["rm.scale_ok"]["message"] == ""
    assert "CI lower bound below the reference" in claims["shipped.improves_over_reference"]["message"]
    meta = doc["meta"]
    assert meta["seed"] == 7 and meta["task_dir"] == str(task)
    assert sorted(meta["input_hashes"]) == ["configs/default.json", "data/gold_calib.jsonl"]
    assert meta["started_at"] <= meta["finished_at"]
    assert meta["config"]["exitstatus"] == 1


def test_plugin_without_evidence_option_writes_nothing(pytester, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    pytester.makeconftest('pytest_plugins = ["audit.checks.evidence_plugin"]')
    pytester.makepyfile(test_x='''
import pytest

def test_needs_task(task_dir):
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pass --task DIR*"])
    assert not list(pytester.path.rglob("evidence.json"))
