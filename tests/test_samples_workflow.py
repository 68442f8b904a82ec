"""The samples door as a workflow (issue 34): log with SamplesWriter, draw the rows to label with
`python -m audit.samples draw-gold`, audit the filled file (--fail-if-not-certified gates CI), and make certify
SAMPLES=... . The TRL callback's own test is in tests/test_trl_example.py (marker trl)."""
import csv
import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from audit.integrations.writer import SamplesWriter
from audit.samples.certify import main as samples_main
from tests.samples_synth import FAMS, make_table, refused as _refused, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def _draw(tmp_path, samples, name, *extra):
    rc = samples_main(["draw-gold", "--samples", str(samples), "--out", str(tmp_path / name), *extra])
    assert rc == 0
    return tmp_path / name


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _table_with_a_small_cell(tmp_path):
    rows, _, _ = make_table(n=40, n_gold=10)
    small = lambda r: r["run"] == "bad" and r["family"] == "f2" and int(r["sample_id"].split("/")[2]) >= 5  # noqa: E731
    rows = [r for r in rows if not small(r)]
    return write_jsonl(tmp_path / "s.jsonl", rows), rows


def test_draw_gold_is_seeded_per_cell_and_nested(tmp_path):
    s, rows = _table_with_a_small_cell(tmp_path)
    a = _csv(_draw(tmp_path, s, "a.csv", "--per-cell", "12", "--seed", "3"))
    b = _csv(_draw(tmp_path, s, "b.csv", "--per-cell", "12", "--seed", "3"))
    assert a == b                                                   # same file, seed and N: the same rows, same order
    assert list(a[0]) == ["sample_id", "run", "family", "prompt_id", "prompt", "completion", "gold"]
    assert all(r["gold"] == "" for r in a)
    counts = {}
    for r in a:
        counts[(r["run"], r["family"])] = counts.get((r["run"], r["family"]), 0) + 1
    assert counts == {(run, f): 5 if (run, f) == ("bad", "f2") else 12
                      for run in ("reference", "good", "bad") for f in FAMS}
    by_id = {r["sample_id"]: r for r in rows}
    assert all(by_id[r["sample_id"]]["completion"] == r["completion"] and by_id[r["sample_id"]]["run"] == r["run"]
               for r in a)
    c = _csv(_draw(tmp_path, s, "c.csv", "--per-cell", "12", "--seed", "4"))
    assert {r["sample_id"] for r in c} != {r["sample_id"] for r in a}
    big = _draw(tmp_path, s, "big.jsonl", "--per-cell", "20", "--seed", "3")
    big_ids = {json.loads(x)["sample_id"] for x in big.read_text().splitlines()}
    assert {r["sample_id"] for r in a} < big_ids and len(big_ids) == 8 * 20 + 5    # a larger draw keeps the smaller
    rec = json.loads((tmp_path / "a.draw.json").read_text())
    assert rec["seed"] == 3 and rec["per_cell"] == 12 and set(rec["sample_ids"]) == {r["sample_id"] for r in a}
    import hashlib
    assert rec["samples_sha256"] == hashlib.sha256(s.read_bytes()).hexdigest()


def test_draw_gold_refuses_without_writing(tmp_path, capsys):
    s, _ = _table_with_a_small_cell(tmp_path)
    out = tmp_path / "x.csv"
    assert samples_main(["draw-gold", "--samples", str(s), "--out", str(tmp_path / "x.txt"), "--per-cell", "3"]) == 2
    assert samples_main(["draw-gold", "--samples", str(s), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: --out " + str(tmp_path / "x.txt") + ": expected a .csv or .jsonl file" in err
    assert "error: --per-cell: not given (or give --from-answer PREVIOUS/answer.json)" in err
    assert not out.exists() and not (tmp_path / "x.draw.json").exists() and not (tmp_path / "x.txt").exists()
    _draw(tmp_path, s, "x.csv", "--per-cell", "3")
    before = out.read_text()
    assert samples_main(["draw-gold", "--samples", str(s), "--out", str(out), "--per-cell", "4"]) == 2
    assert "exist (labels filled in there would be lost)" in capsys.readouterr().err and out.read_text() == before


def test_from_answer_advice(tmp_path, capsys):
    s, _ = _table_with_a_small_cell(tmp_path)
    ans = tmp_path / "answer.json"
    ans.write_text(json.dumps({"runs": {"reference": {}, "good": {}, "bad": {}}, "gold_budget": {
        "f1": {"n_gold": 30, "labels_to_halve": 95, "line": "f1: 30 gold rows now; about 95 (+65)"},
        "f2": {"n_gold": 30, "labels_to_halve": None, "line": "f2: gold alone cannot halve"}}}))
    out = _draw(tmp_path, s, "adv.csv", "--from-answer", str(ans))
    printed = capsys.readouterr().out
    assert "f1: 30 gold rows now; about 95 (+65)" in printed and "advice: --per-cell 32" in printed
    assert json.loads((tmp_path / "adv.draw.json").read_text())["per_cell"] == 32
    assert len(_csv(out)) == 8 * 32 + 5
    (tmp_path / "bad.json").write_text("{}")
    assert samples_main(["draw-gold", "--samples", str(s), "--out", str(tmp_path / "n.csv"), "--from-answer",
                         str(tmp_path / "bad.json")]) == 2
    assert "not an answer.json of python -m audit.samples" in capsys.readouterr().err


def test_the_audit_checks_the_record_of_the_draw(tmp_path, capsys):
    rows, _, _ = make_table(n=40, n_gold=10)
    s = write_jsonl(tmp_path / "s.jsonl", rows)
    g = _draw(tmp_path, s, "g.csv", "--per-cell", "10")
    filled = _csv(g)
    drawn = {r["sample_id"] for r in filled}
    outsider = next(r["sample_id"] for r in rows if r["sample_id"] not in drawn)
    for r in filled:
        r["gold"] = "0.5"
    filled[3]["sample_id"] = outsider                        # a label of a row the draw did not pick
    filled[5]["gold"] = ""                                   # a row left unlabelled
    with open(g, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(filled[0]))
        w.writeheader()
        w.writerows(filled)
    lines = _refused(tmp_path, capsys, s, g)
    assert f"error: {g}:5: column 'sample_id': {outsider!r} is not one of the 90 rows drawn by draw-gold " \
           f"({tmp_path / 'g.draw.json'}: seed 0, 10 per cell): gold rows must come from that draw" in lines, lines
    assert any(x.startswith(f"error: {g}:7: column 'gold': empty: expected the expert's label") for x in lines), lines
    # the same gold file with another samples file (a row appended): the hash names both
    s2 = write_jsonl(tmp_path / "s2.jsonl", rows + [{**rows[0], "sample_id": "extra"}])
    lines = _refused(tmp_path, capsys, s2, g)
    assert any(x.startswith(f"error: {s2}: sha256 ") and f"is not the samples file {g} was drawn from" in x
               for x in lines), lines
    # a record edited by hand; an explicit record that is missing
    rec = json.loads((tmp_path / "g.draw.json").read_text())
    (tmp_path / "g.draw.json").write_text(json.dumps({**rec, "sample_ids": rec["sample_ids"] + [outsider]}))
    lines = _refused(tmp_path, capsys, s, g)
    assert any("its sample_ids are not the draw of seed 0, 10 per cell" in x for x in lines), lines
    lines = _refused(tmp_path, capsys, s, g, "--draw-record", str(tmp_path / "nope.json"))
    assert f"error: --draw-record {tmp_path / 'nope.json'}: file not found" in lines


def test_samples_writer_appends_and_resumes(tmp_path, recwarn):
    path = tmp_path / "logs" / "samples.jsonl"
    w = SamplesWriter(path, rank=0)
    ids = [w.log("step-0", "f1", f"p{i}", "a b", 0.1 * i, step=0) for i in range(3)]
    ids += w.log_many([w.row("step-0", "f1", "p0", "again", 0.5), w.row("step-0", "f1", "p0", "and again", 0.6)])
    assert ids == ["step-0/p0", "step-0/p1", "step-0/p2", "step-0/p0/2", "step-0/p0/3"]
    w.log("step-50", "f2", "p0", "c", 1.0, step=50, prompt="the prompt")
    first = path.read_text()
    w2 = SamplesWriter(path, rank=0)                     # a restart: the file is read, never truncated
    assert w2.runs == ["step-0", "step-50"] and w2.has_run("step-50") and not w2.has_run("step-100")
    w2.log("step-0", "f1", "p0", "after restart", 0.2)
    w2.log("step-100", "f1", "p0", "d", 0.3)
    text = path.read_text()
    assert text.startswith(first)
    rows = [json.loads(x) for x in text.splitlines()]
    assert len(rows) == 8 and len({r["sample_id"] for r in rows}) == 8
    assert rows[-2]["sample_id"] == "step-0/p0/4" and rows[5]["prompt"] == "the prompt" and rows[5]["step"] == 50
    with pytest.raises(ValueError, match="already in"):
        w2.log("x", "f1", "p", "c", 1.0, sample_id="step-100/p0")
    with pytest.raises(ValueError, match="proxy_reward: expected a finite number or None"):
        w2.log("x", "f1", "p", "c", float("inf"))
    assert len(path.read_text().splitlines()) == 8      # refused rows write nothing
    # a kill mid-write left half a line: named, kept, and the next rows start on a line of their own
    with open(path, "a") as fh:
        fh.write('{"sample_id": "step-150/p0", "ru')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w3 = SamplesWriter(path, rank=0)
    assert any(f"{path}:9: an incomplete last line" in str(c.message) for c in caught)
    w3.log("step-150", "f1", "p0", "e", 0.4)
    lines = path.read_text().splitlines()
    assert lines[8] == '{"sample_id": "step-150/p0", "ru' and json.loads(lines[9])["run"] == "step-150"


def test_only_the_main_process_writes(tmp_path, monkeypatch):
    for var, value, writes in (("RANK", "1", False), ("LOCAL_RANK", "1", False), ("RANK", "0", True)):
        monkeypatch.delenv("RANK", raising=False)
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        monkeypatch.setenv(var, value)
        path = tmp_path / f"{var}{value}.jsonl"
        w = SamplesWriter(path)
        assert w.log("r", "f", "p", "c", 1.0) == "r/p" and w.has_run("r")
        assert path.exists() == writes
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK='one': expected an integer rank"):
        SamplesWriter(tmp_path / "bad.jsonl")


def _log_synthetic(path, quality, seed=0, n=150):
    """A training loop's logging through SamplesWriter; returns the true quality of every sample (the experts)."""
    rng = np.random.default_rng(seed)
    w, truth = SamplesWriter(path, rank=0), {}
    for run, q in quality.items():
        for f in FAMS:
            for i in range(n):
                y = float(np.clip(rng.normal(q[f], 0.15), 0, 1))
                sid = w.log(run, f, f"{f}-{i}", f"completion {i}", round(y + float(rng.normal(0, 0.05)), 6), step=0)
                truth[sid] = round(y, 6)
    return truth


def _three_commands(tmp_path, quality, name):
    samples = tmp_path / f"{name}.jsonl"
    truth = _log_synthetic(samples, quality)                                          # 1. log
    to_label = _draw(tmp_path, samples, f"{name}_to_label.jsonl", "--per-cell", "40")   # 2. draw-gold
    rows = [json.loads(x) for x in to_label.read_text().splitlines()]
    to_label.write_text("".join(json.dumps({**r, "gold": truth[r["sample_id"]]}) + "\n" for r in rows))
    out = tmp_path / f"{name}_audit"
    rc = samples_main(["--samples", str(samples), "--gold", str(to_label), "--out", str(out),   # 3. audit
                       "--stress-examples", "0", "--no-figures", "--fail-if-not-certified"])
    return rc, json.loads((out / "answer.json").read_text())


def test_three_commands_end_to_end_and_the_ci_gate(tmp_path, capsys):
    """SamplesWriter -> draw-gold -> audit: a run better everywhere is shipped (exit 0 with the gate); a table whose
    best run loses a family passes no run: exit 3 with --fail-if-not-certified, the report written all the same."""
    ref = {f: 0.3 for f in FAMS}
    rc, ans = _three_commands(tmp_path, {"reference": ref, "good": {f: 0.6 for f in FAMS}}, "ok")
    assert rc == 0 and ans["certification"]["run"] == "good", ans["certification"]
    rc, ans = _three_commands(tmp_path, {"reference": ref, "mixed": {"f1": 0.6, "f2": 0.6, "f3": 0.1}}, "gate")
    assert rc == 3 and ans["certification"]["run"] is None and not ans["runs"]["mixed"]["passes_release_rule"]
    assert "--fail-if-not-certified: no run passes the release rule: exit 3" in capsys.readouterr().err


def _make(tmp_path, *args):
    stamp = tmp_path / "installed"        # newer than pyproject.toml: make installs nothing
    stamp.touch()
    return subprocess.run(["make", "-s", *args, f"STAMP={stamp}", "PY=python3"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "MAKEFLAGS": ""})


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode != 0, reason="no make")
def test_make_certify_samples(tmp_path):
    r = _make(tmp_path, "certify", "SAMPLES=s.jsonl")
    assert r.returncode == 2 and r.stderr.splitlines()[0].startswith("make certify SAMPLES=s.jsonl: GOLD=FILE is "
                                                                      "missing"), r.stderr
    r = _make(tmp_path, "-n", "certify", "SAMPLES=s.jsonl", "GOLD=g.csv", "STRICT=1", "STRESS=3")
    assert r.stdout.splitlines()[-1].startswith("python3 -m audit.samples --samples s.jsonl --gold g.csv --out "
                                                "out/samples --seed 0 --fail-if-not-certified --stress-examples 3 "
                                                "|| "), r.stdout + r.stderr
    r = _make(tmp_path, "-n", "certify", "SAMPLES=s.jsonl", "GOLD=g.csv", "OUT=elsewhere")
    assert r.stdout.splitlines()[-1].startswith("python3 -m audit.samples --samples s.jsonl --gold g.csv --out "
                                                "elsewhere --seed 0 || ")


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode != 0, reason="no make")
def test_make_certify_strict_says_not_certified(tmp_path):
    """make turns the audit's 3 into its own 2 (any failing command): it says on stderr which it was."""
    import sys
    samples = tmp_path / "gate.jsonl"
    truth = _log_synthetic(samples, {"reference": {f: 0.3 for f in FAMS}, "mixed": {"f1": 0.6, "f2": 0.6, "f3": 0.1}})
    to_label = _draw(tmp_path, samples, "gate_to_label.jsonl", "--per-cell", "40")
    rows = [json.loads(x) for x in to_label.read_text().splitlines()]
    to_label.write_text("".join(json.dumps({**r, "gold": truth[r["sample_id"]]}) + "\n" for r in rows))
    stamp = tmp_path / "installed"
    stamp.touch()
    r = subprocess.run(["make", "-s", "certify", f"SAMPLES={samples}", f"GOLD={to_label}", "STRICT=1", "STRESS=0",
                        f"OUT={tmp_path / 'out'}", f"STAMP={stamp}", f"PY={sys.executable}"], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "MAKEFLAGS": ""})
    assert r.returncode == 2 and "make certify: NOT CERTIFIED (the audit exited 3" in r.stderr, r.stderr[-2000:]
    assert (tmp_path / "out" / "answer.json").exists()


@pytest.mark.skipif(__import__("importlib").util.find_spec("transformers") is not None,
                    reason="transformers is installed: the callback imports")
def test_the_trl_callback_says_how_to_install_what_it_needs():
    import sys
    r = subprocess.run([sys.executable, "-c", "import audit.integrations.trl"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "pip install rlhf-audit[trl]" in r.stderr.splitlines()[-1], r.stderr[-500:]


def test_the_writer_loads_no_torch():
    import sys
    r = subprocess.run([sys.executable, "-c", "import sys, audit.integrations.writer; print(sorted(m for m in "
                        "('torch', 'numpy', 'transformers', 'accelerate') if m in sys.modules))"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-500:]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "parquet-shards"])
def test_draw_gold_reads_columns_and_writes_what_the_row_reader_would(tmp_path, monkeypatch, fmt):
    """The columnar draw (only the drawn rows' texts read) writes the same bytes as the row-by-row one; prompts
    missing, null or token lists; a file the columnar reader would not take plainly still draws (row reader)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from audit.samples import draw as draw_mod
    rows, _, _ = make_table(n=30, n_gold=5)
    for i, r in enumerate(rows):
        r["prompt"] = None if i % 3 == 0 else f"prompt {r['prompt_id']}"
    if fmt == "jsonl":
        s = write_jsonl(tmp_path / "s.jsonl", rows)
    elif fmt == "csv":
        s = tmp_path / "s.csv"
        with open(s, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    else:
        s = tmp_path / ("s.parquet" if fmt == "parquet" else "shards")
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(rows), s, row_group_size=50)
        else:                              # one shard without the optional prompt column
            s.mkdir()
            half = len(rows) // 2
            pq.write_table(pa.Table.from_pylist(rows[:half]), s / "part-0.parquet")
            pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "prompt"} for r in rows[half:]]),
                           s / "part-1.parquet")
    fast = _draw(tmp_path, s, "fast.csv", "--per-cell", "4", "--seed", "7")
    assert draw_mod.load_samples(s) is not None                       # the columnar reader took it
    monkeypatch.setattr(draw_mod, "load_samples", lambda *a, **k: None)
    slow = _draw(tmp_path, s, "slow.csv", "--per-cell", "4", "--seed", "7")
    assert fast.read_bytes() == slow.read_bytes()
    rec = lambda p: {k: v for k, v in json.loads(p.with_name(p.stem + ".draw.json").read_text()).items()  # noqa: E731
                     if k != "to_label"}
    assert rec(fast) == rec(slow)
    assert any(r["prompt"] == "" for r in _csv(fast)) and any(r["prompt"].startswith("prompt") for r in _csv(fast))
