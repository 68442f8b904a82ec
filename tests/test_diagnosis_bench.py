"""world.diagnosis_bench: the zoo sweep on Ray, end to end at tiny settings, and its bookkeeping."""
import json
import subprocess
import sys

from world.diagnosis_bench import draw_specs, summarise
from rlhf.vocab import FAMILIES


def test_specs_start_clean_and_cover_both_kinds():
    specs = draw_specs(0, 30)
    assert specs[0] == {} and all(1 <= len(s) <= 2 for s in specs[1:])
    kinds = {c.kind for s in specs for c in s.values()}
    rows = {str(c.count_rows) != "random" for s in specs for c in s.values() if c.kind == "wrong_rubric"}
    assert kinds == {"scaled", "wrong_rubric"} and rows == {True, False}
    assert all(0.4 <= c.replaced_share <= 0.95 for s in specs for c in s.values())
    assert draw_specs(0, 30) == specs and draw_specs(1, 30) != specs


def test_summary_counts():
    rows = [{"world": "w", "batch": 0, "family": f, "clean_batch": True, "hazard": False, "risk": 0.1 * i,
             "flag": i == 5, "diagnostic_s": 10.0} for i, f in enumerate(FAMILIES)]
    rows += [{"world": "w", "batch": 1, "family": f, "clean_batch": False, "hazard": i >= 4, "risk": 0.2 * i,
              "flag": i >= 4, "diagnostic_s": 20.0} for i, f in enumerate(FAMILIES)]
    s = summarise(rows)["all"]
    assert s["pairs"] == 12 and s["hazardous"] == 2 and s["false_flags_clean"] == 1 and s["false_flags"] == 1
    assert s["flag_accuracy"] == 11 / 12 and s["s_per_rm"] == 15.0 and 0.5 < s["auroc"] <= 1.0


def test_quick_bench_on_the_tiny_world(tiny_world, tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "world.diagnosis_bench", str(tiny_world), "--quick", "--out",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert len(res["rows"]) == 2 * len(FAMILIES)
    assert all("risk" in row and isinstance(row["hazard"], bool) for row in res["rows"])
    assert res["rows"][0]["clean_batch"] and "AUROC" in r.stdout
    assert "[bench] 2/2 RMs trained" in r.stderr                      # progress on long sweeps
    bad = subprocess.run([sys.executable, "-m", "world.diagnosis_bench", str(tmp_path)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "not a built world" in bad.stderr
