"""examples/ci/audit.sh, the script a team's CI gates a release with: it keeps the audit's exit code (0 certified, 3
not certified, 2 bad input) and writes the claims' JUnit XML beside the report (issue 46)."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.samples_synth import make_table, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ci" / "audit.sh"


def gate(tmp_path, quality=None, gold_rows=None):
    rows, gold, _ = make_table(seed=5, quality=quality)
    s = write_jsonl(tmp_path / "samples.jsonl", rows)
    g = write_jsonl(tmp_path / "gold.jsonl", gold if gold_rows is None else gold_rows)
    env = {**os.environ, "SAMPLES": str(s), "GOLD": str(g), "REFERENCE": "reference", "OUT": str(tmp_path / "out"),
           "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, cwd=tmp_path)


def test_a_passing_run_exits_0_with_the_decision_and_the_claims_report(tmp_path):
    r = gate(tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "**Ship `good`: certified" in r.stdout and "audit: CERTIFIED" in r.stdout
    cases = ET.parse(tmp_path / "out.claims.xml").findall(".//testcase")
    assert cases and all(c.find("properties/property[@name='claim']") is not None for c in cases)
    # the report reads like a release decision: the decision and how sure, the audit's health, findings, method last
    summary = (tmp_path / "out" / "summary.md").read_text()
    order = ["**Ship `good`", "95% confident: its true quality is at least", "## The audit's own health",
             "## Findings", "## Method and provenance", "content fingerprint"]
    assert [summary.index(h) for h in order] == sorted(summary.index(h) for h in order)
    assert "| reference (reference) |" in summary and "| baseline |" in summary       # the reference is no verdict
    ans = __import__("json").loads((tmp_path / "out" / "answer.json").read_text())
    est = f"{ans['certification']['estimated_true_quality']:.4f}"
    assert summary.count(est) == 1 and ans["certification"]["reference_ci95"] == ans["runs"]["reference"]["ci95"]


def test_no_passing_run_exits_3(tmp_path):
    flat = {r: {f: 0.3 for f in ("f1", "f2", "f3")} for r in ("reference", "good", "bad")}
    r = gate(tmp_path, quality=flat)
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Nothing to ship: keep the reference run `reference`" in r.stdout and "NOT certified (exit 3)" in r.stdout


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    r = gate(tmp_path, gold_rows=[{"sample_id": "no-such-sample", "gold": 0.5}])
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "bad input or usage (exit 2)" in r.stdout and not (tmp_path / "out").exists()
