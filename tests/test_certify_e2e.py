"""End to end: `python -m audit.certify` on the tiny world (small preset), as `make certify` runs it."""
import json
import subprocess
import sys

import jsonschema
import pytest

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def certified(tiny_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("certify")
    r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(tiny_world / "task"), "--out", str(out),
                        "--preset", "small", "--seed", "0"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r


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


def test_rerun_resumes_from_cache_and_is_deterministic(certified, tiny_world):
    out, first = certified
    before = json.loads((out / "answer.json").read_text())
    r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(tiny_world / "task"), "--out", str(out),
                        "--preset", "small", "--seed", "0", "--no-figures"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    after = json.loads((out / "answer.json").read_text())
    assert after["certification"] == before["certification"] and after["runs"] == before["runs"]
    assert "rubrics:" not in r.stderr    # cached stages are not recomputed


def test_missing_task_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(tmp_path / "nope"), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "not found" in r.stderr
