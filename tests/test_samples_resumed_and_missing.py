"""What a real training run's log brings to the samples door (issue 47), without trl: rows of an interrupted attempt
marked superseded by the writer when the run resumes from an earlier checkpoint (kept in the file, ignored by the
audit and by draw-gold, so the audit equals an uninterrupted run's), and rows whose proxy is missing (a reward
function failed or did not apply: null), counted, reported, and certified from the gold rows alone -- an interval
that stays valid when the proxy is missing on the best (or worst) rows, where dropping those rows would not."""
import json
import warnings

import numpy as np
import pytest

from audit.integrations.writer import SamplesWriter
from audit.samples.certify import main as samples_main
from tests.samples_synth import FAMS, make_table, refused as _refused, write_jsonl


def _rows_of(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# ------------------------------------------------------------------------------------------------ the writer
def test_the_writer_supersedes_the_steps_a_resumed_run_trains_again(tmp_path):
    path = tmp_path / "samples.jsonl"
    w = SamplesWriter(path, rank=0)
    for step in (0, 2, 4):
        w.log_many([w.row(f"step-{step}", "f1", f"p{i}", f"c{step}{i}", 0.1 * i, step=step) for i in range(3)])
    w.log("no-step", "f1", "p0", "c", 0.5)                       # rows without a step are never superseded
    with open(path, "a") as fh:
        fh.write('{"sample_id": "step-4/p9", "ru')                 # a kill mid-write: the cut line is kept as it is
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = SamplesWriter(path, rank=0)
        follower = SamplesWriter(path, rank=1)                     # another process: the same account, no writes
    before = path.read_text()
    assert follower.supersede_after(2) == ["step-4"] and path.read_text() == before
    assert resumed.supersede_after(2, reason="resumed from checkpoint-2") == ["step-4"]
    lines = path.read_text().split("\n")
    assert lines[-1] == '{"sample_id": "step-4/p9", "ru'           # untouched, still without its line end
    rows = [json.loads(x) for x in lines[:-1]]
    assert [r["sample_id"] for r in rows] == [f"step-{s}/p{i}" for s in (0, 2, 4) for i in range(3)] + ["no-step/p0"]
    assert [bool(r.get("superseded")) for r in rows] == [False] * 6 + [True] * 3 + [False]
    assert all(r["superseded_reason"] == "resumed from checkpoint-2" for r in rows[6:9])
    assert [r["completion"] for r in rows[6:9]] == ["c40", "c41", "c42"]          # kept as they were
    for wr in (resumed, follower):
        assert wr.runs == ["step-0", "step-2", "no-step"] and not wr.has_run("step-4")
    # the resumed run logs step 4 again: new ids (a label given to a superseded row stays with what was labelled)
    ids = resumed.log_many([resumed.row("step-4", "f1", f"p{i}", f"new{i}", 0.2, step=4) for i in range(3)])
    assert ids == [f"step-4/p{i}/2" for i in range(3)]
    assert follower.log_many([follower.row("step-4", "f1", f"p{i}", f"new{i}", 0.2, step=4) for i in range(3)]) == ids
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = SamplesWriter(path, rank=0)                        # a later restart reads the marks back
    assert again.runs == ["step-0", "step-2", "no-step", "step-4"] and again.supersede_after(4) == []
    assert again.supersede_after(3) == ["step-4"]                  # superseded rows are not marked twice
    assert sum(bool(r.get("superseded")) for r in _rows_of_lines(path)) == 6


def _rows_of_lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip().endswith("}")]


def test_the_writer_logs_a_missing_proxy_as_null(tmp_path):
    w = SamplesWriter(tmp_path / "s.jsonl", rank=0)
    w.log("r", "f", "p0", "c", None)
    w.log("r", "f", "p1", "c", float("nan"))
    w.log("r", "f", "p2", "c", 0.25)
    assert [r["proxy_reward"] for r in _rows_of(tmp_path / "s.jsonl")] == [None, None, 0.25]
    for bad in (float("inf"), True, "high"):
        with pytest.raises(ValueError, match="expected a finite number or None"):
            w.log("r", "f", "p3", "c", bad)


# ------------------------------------------------------------------------------------ superseded rows, the door
def _audit(tmp_path, samples, name, *extra):
    gold = tmp_path / f"{name}.to_label.jsonl"
    assert samples_main(["draw-gold", "--samples", str(samples), "--per-cell", "25", "--out", str(gold),
                         "--seed", "1"]) == 0
    return gold


def _label(gold, truth):
    rows = [{**r, "gold": truth[r["completion"]]} for r in _rows_of(gold)]
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _run_audit(tmp_path, samples, gold, name, *extra):
    out = tmp_path / name
    assert samples_main(["--samples", str(samples), "--gold", str(gold), "--out", str(out), "--seed", "0",
                         "--no-figures", "--stress-examples", "4", *extra]) == 0
    return json.loads((out / "answer.json").read_text()), (out / "summary.md").read_text()


def _synthetic(n=60):
    """A table whose completions name their true quality (the experts read it back), and a resumed copy: the
    attempt that was interrupted logged run 'good' too, then the resumed run logged it again."""
    rows, _, _ = make_table(n=n, n_gold=0)
    rng = np.random.default_rng(5)
    truth = {}
    for k, r in enumerate(rows):
        r["completion"] = f"c{k}"
        truth[r["completion"]] = float(np.clip(r["proxy_reward"] + rng.normal(0, 0.1), 0, 1))
        r["step"] = {"reference": 0, "good": 2, "bad": 4}[r["run"]]
    stale = [{**r, "sample_id": r["sample_id"] + "/attempt-1", "completion": f"stale{k}", "proxy_reward": 5.0,
              "superseded": True, "superseded_reason": "training resumed from step 1"}
             for k, r in enumerate(rows) if r["run"] == "good"]
    for k, r in enumerate(stale):
        truth[r["completion"]] = 0.0
    first_good = next(i for i, r in enumerate(rows) if r["run"] == "good")
    resumed = rows[:first_good] + stale + rows[first_good:]
    return rows, resumed, truth


@pytest.mark.slow
def test_the_door_and_draw_gold_ignore_superseded_rows(tmp_path):
    rows, resumed, truth = _synthetic()
    plain = write_jsonl(tmp_path / "plain.jsonl", rows)
    both = write_jsonl(tmp_path / "resumed.jsonl", resumed)
    g1, g2 = _audit(tmp_path, plain, "plain"), _audit(tmp_path, both, "resumed")
    drawn1, drawn2 = _label(g1, truth), _label(g2, truth)
    assert drawn1 == drawn2                      # the same rows drawn: superseded rows are not in any cell
    a1, s1 = _run_audit(tmp_path, plain, g1, "out-plain")
    a2, s2 = _run_audit(tmp_path, both, g2, "out-resumed")
    assert a2["inputs"]["superseded_rows"] == len(resumed) - len(rows) and a1["inputs"]["superseded_rows"] == 0
    assert a1.pop("inputs")["fingerprint"] != a2.pop("inputs")["fingerprint"]   # the file differs, and says so
    assert a1 == a2                              # everything the audit concludes is the uninterrupted table's
    assert f"{len(resumed) - len(rows)} rows are marked superseded" in s2 and "superseded" not in s1
    # a label on a superseded row is refused, naming it
    stale = next(r for r in resumed if r.get("superseded"))
    bad = write_jsonl(tmp_path / "bad_gold.jsonl", [{"sample_id": stale["sample_id"], "gold": 0.5}]
                      + [{"sample_id": r["sample_id"], "gold": r["gold"]} for r in drawn2])
    out = tmp_path / "refused"
    assert samples_main(["--samples", str(both), "--gold", str(bad), "--out", str(out)]) == 2 and not out.exists()


def test_a_label_on_a_superseded_row_is_named(tmp_path, capsys):
    rows, resumed, truth = _synthetic(n=30)
    both = write_jsonl(tmp_path / "resumed.jsonl", resumed)
    stale = next(r for r in resumed if r.get("superseded"))
    gold = [{"sample_id": r["sample_id"], "gold": 0.5} for r in rows if int(r["sample_id"].split("/")[2]) < 10]
    g = write_jsonl(tmp_path / "g.jsonl", gold + [{"sample_id": stale["sample_id"], "gold": 0.5}])
    lines = _refused(tmp_path, capsys, both, g)
    assert any(f"g.jsonl:{len(gold) + 1}: column 'sample_id': '{stale['sample_id']}' labels a superseded row "
               f"({both}:" in x for x in lines), lines
    # the marker must be true or false
    odd = [{**r, "superseded": "maybe"} if k == 3 else r for k, r in enumerate(resumed)]
    lines = _refused(tmp_path, capsys, write_jsonl(tmp_path / "odd.jsonl", odd), g)
    assert any("odd.jsonl:4: column 'superseded': expected true or false, got 'maybe'" in x for x in lines), lines


def test_superseded_rows_read_the_same_in_every_format(tmp_path):
    """The columnar reader (JSONL, CSV) and the row reader (Parquet with superseded rows) leave out the same rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit.samples.table import load
    rows, resumed, _ = _synthetic(n=30)
    gold = [{"sample_id": r["sample_id"], "gold": 0.5} for r in rows if int(r["sample_id"].split("/")[2]) < 10]
    g = write_jsonl(tmp_path / "g.jsonl", gold)
    cols = list(resumed[0]) + ["superseded", "superseded_reason"]
    flat = [{c: r.get(c) for c in cols} for r in resumed]
    for r in flat:
        r["superseded"] = bool(r["superseded"])
    paths = {"jsonl": write_jsonl(tmp_path / "s.jsonl", resumed)}
    import csv
    with open(tmp_path / "s.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows({**r, "superseded": "true" if r["superseded"] else ""} for r in flat)
    paths["csv"] = tmp_path / "s.csv"
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "s.parquet")
    paths["parquet"] = tmp_path / "s.parquet"
    plain = load(write_jsonl(tmp_path / "plain.jsonl", rows), g)
    for fmt, path in paths.items():
        t = load(path, g)
        assert t.n_superseded == len(resumed) - len(rows), fmt
        assert t.sample_id.to_pylist() == plain.sample_id.to_pylist(), fmt
        assert np.array_equal(t.proxy, plain.proxy) and t.runs == plain.runs, fmt


# --------------------------------------------------------------------------------------- missing proxies, the door
def _with_missing(rows, where, share, seed=0):
    """rows with the proxy set to None on `share` of the rows of the cells in `where` -- the rows with the highest
    proxy (a reward function that fails on long, good answers, say: missing NOT at random)."""
    out = [dict(r) for r in rows]
    for run, fam in where:
        cell = [r for r in out if r["run"] == run and r["family"] == fam]
        for r in sorted(cell, key=lambda r: -r["proxy_reward"])[: int(share * len(cell))]:
            r["proxy_reward"] = None
    return out


@pytest.mark.slow
def test_missing_proxies_are_counted_and_their_cells_certified_from_gold(tmp_path):
    rows, gold, _ = make_table(n=200, n_gold=40, seed=3)
    g = write_jsonl(tmp_path / "g.jsonl", gold)
    hit = [("good", "f1"), ("reference", "f2")]
    a0, _ = _run_audit(tmp_path, write_jsonl(tmp_path / "s0.jsonl", rows), g, "out0")
    s1 = write_jsonl(tmp_path / "s1.jsonl", _with_missing(rows, hit, 0.3))
    a1, summary = _run_audit(tmp_path, s1, g, "out1")
    mp = a1["missing_proxy"]
    assert mp["rows"] == 2 * 60 and mp["of_rows"] == len(rows)
    assert mp["cells"] == {"good": {"f1": {"missing": 60, "of": 200}}, "reference": {"f2": {"missing": 60, "of": 200}}}
    assert "certified from its gold rows alone" in mp["handling"]
    assert "**120 of 1800 rows have no proxy**" in summary and "good f1 60 of 200" in summary
    assert a0["missing_proxy"] == {"rows": 0, "of_rows": len(rows), "cells": {}, "handling": None}
    for run, fam in hit:
        p = a1["runs"][run]["per_family"][fam]
        assert p["lam"] == 0 and p["ci95"] == p["ci95_gold_only"]          # the gold rows alone
        assert p["ci95_gold_only"] == a0["runs"][run]["per_family"][fam]["ci95_gold_only"]
    # the cells with every proxy keep theirs, and the run still passes on its gold and proxies
    for run in ("good", "bad"):
        for f in FAMS:
            if (run, f) not in hit:
                assert a1["runs"][run]["per_family"][f]["ci95"] == a0["runs"][run]["per_family"][f]["ci95"]
    assert a1["certification"]["run"] == a0["certification"]["run"] == "good"
    assert a1["reward_model"]["f1"]["n"] == a0["reward_model"]["f1"]["n"] - sum(
        1 for r in _rows_of(s1) if r["proxy_reward"] is None and r["family"] == "f1"
        and r["sample_id"] in {x["sample_id"] for x in gold})


def test_a_missing_proxy_cell_covers_where_dropping_the_rows_would_not(tmp_path):
    """The proxy is missing on the best half of a cell's rows. Its interval (gold rows alone) covers the cell's
    mean; the rows that have a proxy -- what an audit assuming they were missing at random would estimate --
    average far below it, outside the interval."""
    from audit.samples.estimates import SamplesAudit, SamplesConfig
    from audit.samples.table import load
    rows, gold, _ = make_table(n=400, n_gold=60, seed=7, proxy_noise=0.02)
    truth = {x["sample_id"]: x["gold"] for x in gold}
    s = write_jsonl(tmp_path / "s.jsonl", _with_missing(rows, [("good", "f3")], 0.5))
    t = load(s, write_jsonl(tmp_path / "g.jsonl", gold))
    a = SamplesAudit(t, "reference", SamplesConfig(seed=0, stress_examples=0))
    cell = a.run("good")["per_family"]["f3"]
    lab = [x for x in gold if x["sample_id"].startswith("good/f3/")]
    mean_all = np.mean([x["gold"] for x in lab])                          # the gold rows: a random subset of all
    kept = [truth[r["sample_id"]] for r in _rows_of(s) if r["sample_id"] in truth and r["proxy_reward"] is not None
            and r["sample_id"].startswith("good/f3/")]
    lo, hi = cell["ci95"]
    assert cell["lam"] == 0 and lo <= mean_all <= hi
    assert np.mean(kept) < lo - 0.02                                      # missing at random would miss it


def test_the_design_test_sees_gold_rows_drawn_only_where_the_proxy_exists(tmp_path, capsys):
    """Labelling only rows that have a proxy is a selection (their quality is not the cell's): the random-subset
    test counts a missing proxy as a value below every other, so the gold rows' missing share must match."""
    rows, _, _ = make_table(n=200, n_gold=0, seed=2)
    rows = _with_missing(rows, [("bad", "f2")], 0.4)
    rng = np.random.default_rng(0)
    gold = []
    for run in ("reference", "good", "bad"):
        for f in FAMS:
            cell = [r for r in rows if r["run"] == run and r["family"] == f and r["proxy_reward"] is not None]
            gold += [{"sample_id": cell[i]["sample_id"], "gold": 0.5} for i in rng.choice(len(cell), 40, replace=False)]
    lines = _refused(tmp_path, capsys, write_jsonl(tmp_path / "s.jsonl", rows), write_jsonl(tmp_path / "g.jsonl", gold))
    assert len(lines) == 1 and "run 'bad' family 'f2': the 40 gold rows' proxy_reward is distributed unlike" in lines[0]


def test_missing_proxies_read_the_same_in_every_format(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit.samples.table import load
    rows, gold, _ = make_table(n=40, n_gold=10)
    rows = _with_missing(rows, [("good", "f1")], 0.25)
    g = write_jsonl(tmp_path / "g.jsonl", gold)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    with open(tmp_path / "s.csv", "w") as fh:
        fh.write(",".join(rows[0]) + "\n")
        fh.writelines(",".join("" if v is None else str(v) for v in r.values()) + "\n" for r in rows)
    ref = load(write_jsonl(tmp_path / "s.jsonl", rows), g).proxy
    assert np.isnan(ref).sum() == 10
    for f in ("s.parquet", "s.csv"):
        assert np.array_equal(load(tmp_path / f, g).proxy, ref, equal_nan=True), f
    # a stored NaN or infinity is still no proxy value: refused by name (null is how a row says it has none)
    rows[3] = {**rows[3], "proxy_reward": "inf"}
    with pytest.raises(ValueError, match="expected a finite number \\(or null: no proxy for this row\\)"):
        load(write_jsonl(tmp_path / "bad.jsonl", rows), g)


def test_ray_blocks_refuse_what_only_this_machine_reads():
    """On Ray the blocks with superseded rows or missing proxies are refused with the reason (run without --ray)."""
    import pyarrow as pa

    from audit.samples import columns
    from audit.samples.ray_cells import KEYS, _block
    names = {k: k for k in KEYS}
    base = {"sample_id": ["a", "b"], "run": ["r", "r"], "family": ["f", "f"], "prompt_id": ["p", "q"],
            "completion": ["x", "y"], "proxy_reward": [0.1, 0.2]}
    gold = pa.array(["a"])
    assert _block(pa.table(base), names, gold)["is_gold"].tolist() == [True, False]
    with pytest.raises(columns.Unusual, match="superseded rows"):
        _block(pa.table({**base, "superseded": [False, True]}), names, gold)
    with pytest.raises(columns.Unusual, match="without a proxy_reward"):
        _block(pa.table({**base, "proxy_reward": [0.1, None]}), names, gold)


# ------------------------------------------------------------------------------------------ generation records
def test_each_runs_generation_settings_are_reported(tmp_path, capsys):
    """The generation column (JSON text, as the TRL callback writes it): each run's distinct records, whether every
    run was sampled alike, the runs without one -- the same from the columnar reader (JSONL, Parquet) and the row
    reader (a JSON object instead of text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit.samples.estimates import SamplesAudit
    from audit.samples.table import load
    rows, gold, _ = make_table(n=30, n_gold=10)
    hot = json.dumps({"temperature": 1.0, "max_new_tokens": 6}, sort_keys=True)
    cold = json.dumps({"temperature": 0.7, "max_new_tokens": 6}, sort_keys=True)
    for r in rows:
        r["generation"] = {"reference": hot, "good": hot, "bad": cold}[r["run"]]
    g = write_jsonl(tmp_path / "g.jsonl", gold)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    objects = [{**r, "generation": json.loads(r["generation"])} for r in rows]     # not text: read row by row
    facts = [SamplesAudit(load(path, g), "reference").table_facts()["generation"]
             for path in (write_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "s.parquet",
                          write_jsonl(tmp_path / "o.jsonl", objects))]
    assert facts[0] == facts[1] == facts[2]
    assert facts[0] == {"by_run": {"reference": [json.loads(hot)], "good": [json.loads(hot)], "bad": [json.loads(cold)]},
                        "runs_without": [], "same_for_every_run": False}
    same = [{**r, "generation": hot} if r["run"] != "bad" else {k: v for k, v in r.items() if k != "generation"}
            for r in rows]
    f = SamplesAudit(load(write_jsonl(tmp_path / "m.jsonl", same), g), "reference").table_facts()["generation"]
    assert f["runs_without"] == ["bad"] and f["same_for_every_run"] is False and f["by_run"]["bad"] == []
    plain = SamplesAudit(load(write_jsonl(tmp_path / "p.jsonl", [{k: v for k, v in r.items() if k != "generation"}
                                                                 for r in rows]), g), "reference")
    assert plain.table_facts()["generation"] == {"by_run": {}, "runs_without": [], "same_for_every_run": None}
