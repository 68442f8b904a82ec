"""The coverage tools of issue 31: world/experiments/interval_coverage.py (the grid) and world/experiments/task_coverage.py (the task door at
a reduced gold budget) on small settings; their full runs are measurements (docs/intervals.md), not tests."""
import json

import numpy as np

from audit.task.task_dir import load_task
from rlhf.vocab import FAMILIES
from world.experiments import interval_coverage as ic
from world.experiments.task_coverage import reduced_task


def test_grid_point_measures_both_intervals():
    """A converged cell (every label 1): today's interval has zero width, the new one covers; the summary and the
    markdown table are built from the points."""
    p = {"kind": "binary", "mean": 1.0, "n": 10, "N": 100, "rho": 0.4}
    r = ic.run_point(p, 0, reps=120, seed=0, draws=500)
    cell = r["quantities"]["cell"]
    assert cell["n"] == 120 * ic.CELLS
    assert cell["coverage"]["new"] == 1.0 and cell["zero_width"]["new"] == 0
    assert cell["zero_width"]["today"] == cell["n"]          # all labels equal: [1, 1]
    assert r["quantities"]["balanced"]["coverage"]["new"] == 1.0
    q = {"kind": "continuous", "mean": 0.3, "n": 25, "N": 100, "rho": 0.8}
    r2 = ic.run_point(q, 1, reps=120, seed=0, draws=500)
    assert 0 < r2["quantities"]["cell"]["width_ratio"] < 5
    s = ic.summarise([r, r2])
    assert s["quantities"]["cell"]["today"]["zero_width"] == cell["n"]
    assert "| cell | new |" in ic.markdown(s, [r, r2])


def test_cli_resumes_and_summarises(tmp_path, capsys):
    """The command writes one line a grid point, skips the points it has (resume), and --summary-only runs nothing."""
    args = ["--out", str(tmp_path), "--reps", "20", "--draws", "200", "--quick", "--limit", "1", "--shuffled"]
    assert ic.main(args) == 0
    first = (tmp_path / "grid.jsonl").read_text().splitlines()
    assert len(first) == 1
    assert ic.main(args) == 0                                   # the next point, not the first again
    rows = [json.loads(x) for x in (tmp_path / "grid.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0] != rows[1] and json.loads(first[0]) == rows[0]
    capsys.readouterr()
    assert ic.main(["--out", str(tmp_path), "--reps", "20", "--draws", "200", "--summary-only"]) == 0
    assert "2 done, 0 to run" in capsys.readouterr().out
    assert json.loads((tmp_path / "summary.json").read_text())["points"] == 2


def test_a_stated_confidence_other_than_95_is_measured_against_its_own_target(tmp_path, capsys):
    """--confidence (declared looks need the intervals at 1 - alpha_k): the same rows give wider intervals at 0.99
    than at 0.95, the row says which confidence it measured, the target moves with it, and a grid point measured at
    another confidence is not taken as done."""
    q = {"kind": "continuous", "mean": 0.3, "n": 25, "N": 100, "rho": 0.8}
    w = {c: ic.run_point(q, 1, reps=60, seed=0, draws=500, confidence=c) for c in (0.95, 0.99)}
    assert w[0.99]["confidence"] == 0.99
    assert (w[0.99]["quantities"]["cell"]["median_width"]["new"] > w[0.95]["quantities"]["cell"]["median_width"]["new"])
    assert (w[0.99]["quantities"]["cell"]["median_width"]["today"]
            > w[0.95]["quantities"]["cell"]["median_width"]["today"])
    assert ic.threshold(1000, 0.99) > ic.threshold(1000)
    args = ["--out", str(tmp_path), "--reps", "20", "--draws", "200", "--quick", "--limit", "1"]
    assert ic.main(args) == 0 and ic.main(args + ["--confidence", "0.99"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "grid.jsonl").read_text().splitlines()]
    assert [r["confidence"] for r in rows] == [0.95, 0.99] and rows[0]["mean"] == rows[1]["mean"]
    assert "coverage >= 0.99 -" in capsys.readouterr().out
    from rlhf.errors import run_cli
    assert run_cli(ic.main, "interval_coverage", args + ["--confidence", "1.5"]) == 2
    assert "--confidence 1.5: expected a number in [0.5, 1)" in capsys.readouterr().err


def test_labels_have_the_stated_mean():
    rng = np.random.default_rng(0)
    for kind in ic.KINDS:
        for mu in (0.0, 0.05, 0.5, 0.9, 1.0):
            y = ic.labels(kind, mu, 200_000, rng)
            assert 0.0 <= y.min() and y.max() <= 1.0
            assert abs(y.mean() - mu) < 0.005, (kind, mu, y.mean())
            assert abs(y.std() - ic.label_sd(kind, mu)) < 0.005, (kind, mu)


def test_reduced_task_keeps_a_seeded_random_subset_of_gold(tiny_world, tmp_path):
    a = reduced_task(tiny_world, tmp_path / "a", gold=10, seed=3)
    b = reduced_task(tiny_world, tmp_path / "b", gold=10, seed=3)
    c = reduced_task(tiny_world, tmp_path / "c", gold=10, seed=4)
    rows = [json.loads(x) for x in (a / "data" / "gold_calib.jsonl").read_text().splitlines()]
    assert sorted({r["family"] for r in rows}) == sorted(FAMILIES)
    assert all(sum(r["family"] == f for r in rows) == 10 for f in FAMILIES)
    assert (a / "data" / "gold_calib.jsonl").read_text() == (b / "data" / "gold_calib.jsonl").read_text()
    assert (a / "data" / "gold_calib.jsonl").read_text() != (c / "data" / "gold_calib.jsonl").read_text()
    full = (tiny_world / "task" / "data" / "gold_calib.jsonl").read_text().splitlines()
    assert set((a / "data" / "gold_calib.jsonl").read_text().splitlines()) <= set(full)
    assert not (a / "oracle").exists() and len(load_task(a).gold) == 10 * len(FAMILIES)
