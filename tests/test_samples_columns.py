"""The samples door's columnar reader (audit/samples/columns.py): the same Table as the row-by-row reader on every
format and on sharded directories, the fallback that names problems, completions read lazily from Parquet, the
corruption stress's subsample at log scale, and the seeded table generator (world/samples_table.py)."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from audit.samples import columns, rows as rows_mod, table as table_mod
from audit.samples.estimates import SamplesAudit, SamplesConfig
from audit.samples.table import TableError, load
from tests.samples_synth import make_table, write_jsonl


def _same(a, b):
    """Two Tables hold the same data (row order included)."""
    assert a.runs == b.runs and a.families == b.families and a.prompts == b.prompts
    assert a.sample_id.equals(b.sample_id)
    for k in ("run_code", "family_code", "prompt_code", "proxy"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert np.array_equal(a.gold, b.gold, equal_nan=True)
    rows = np.arange(len(a.proxy))
    assert a.texts(rows) == b.texts(rows)


def _rows_path(s, g):
    """The row-by-row reader alone, as the fallback runs it."""
    return table_mod._table(s, g, *rows_mod.load_rows(s, g, {}, None, []))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("cols")
    rows, gold, _ = make_table(n=60, n_gold=12)
    s, g = write_jsonl(d / "s.jsonl", rows), write_jsonl(d / "g.jsonl", gold)
    return d, rows, gold, s, g


def test_fast_path_equals_row_reader_on_every_format(synth, monkeypatch):
    d, rows, gold, s, g = synth
    base = _rows_path(s, g)
    tab = pa.Table.from_pylist(rows)
    pq.write_table(tab, d / "s.parquet")
    pacsv.write_csv(tab, d / "s.csv")
    pq.write_table(pa.Table.from_pylist(gold), d / "g.parquet")
    calls = []
    real = rows_mod.load_rows
    monkeypatch.setattr(rows_mod, "load_rows", lambda *a: calls.append(a[0]) or real(*a))
    for sp, gp in ((s, g), (d / "s.parquet", d / "g.parquet"), (d / "s.csv", g)):
        _same(load(sp, gp), base)
    assert calls == [], f"a valid table fell back to the row reader: {calls}"


def test_sharded_directory_is_one_table(synth, tmp_path):
    d, rows, gold, s, g = synth
    base = load(s, g)
    for fmt in ("parquet", "jsonl"):
        shards = tmp_path / f"shards_{fmt}"
        (shards / "a=1").mkdir(parents=True)
        (shards / "_SUCCESS").write_text("")
        (shards / ".part-0.crc").write_text("junk")
        thirds = np.array_split(np.arange(len(rows)), 3)
        for k, idx in enumerate(thirds):
            part = [rows[i] for i in idx]
            name = (shards / "a=1" if k == 0 else shards) / f"part-{k:05d}.{fmt}"   # read in path order
            if fmt == "parquet":
                pq.write_table(pa.Table.from_pylist(part), name)
            else:
                write_jsonl(name, part)
        _same(load(shards, g), base)
        _same(_rows_path(shards, g), base)


def test_mixed_shard_formats_refused(synth, tmp_path):
    d, rows, gold, s, g = synth
    shards = tmp_path / "mixed"
    shards.mkdir()
    write_jsonl(shards / "a.jsonl", rows[:10])
    pq.write_table(pa.Table.from_pylist(rows[10:]), shards / "b.parquet")
    with pytest.raises(TableError) as e:
        load(shards, g)
    assert "more than one format" in str(e.value)


def test_unusual_tables_fall_back_and_are_named(synth, tmp_path):
    d, rows, gold, s, g = synth
    # mixed id types: valid, but not for Arrow's JSON reader -> the row reader accepts it
    mixed = [dict(r, prompt_id=i if i % 2 else str(i)) for i, r in enumerate(rows)]
    t = load(write_jsonl(tmp_path / "mixed.jsonl", mixed), g)
    assert t.prompt_code[:4].tolist() == [t.prompts.index(str(i)) for i in range(4)]
    # a duplicate id in Parquet: the fast path gives up, the row reader names the row
    dup = [dict(r) for r in rows]
    dup[5]["sample_id"] = dup[2]["sample_id"]
    pq.write_table(pa.Table.from_pylist(dup), tmp_path / "dup.parquet")
    with pytest.raises(TableError) as e:
        load(tmp_path / "dup.parquet", g)
    assert f"dup.parquet: row 5: column 'sample_id': duplicate id {dup[2]['sample_id']!r}" in str(e.value)
    # a gold id not in the samples, a NaN proxy: named by line
    with pytest.raises(TableError) as e:
        load(s, write_jsonl(tmp_path / "g2.jsonl", gold + [{"sample_id": "nope", "gold": 0.5}]))
    assert f"g2.jsonl:{len(gold) + 1}: column 'sample_id': 'nope' is not a sample_id" in str(e.value)
    nan = [dict(r) for r in rows]
    nan[7]["proxy_reward"] = float("nan")
    pq.write_table(pa.Table.from_pylist(nan), tmp_path / "nan.parquet")
    with pytest.raises(TableError) as e:
        load(tmp_path / "nan.parquet", g)
    assert "nan.parquet: row 7: column 'proxy_reward': expected a finite number" in str(e.value)


def test_parquet_completions_read_lazily(synth):
    d, rows, gold, s, g = synth
    pq.write_table(pa.Table.from_pylist(rows), d / "lazy.parquet", row_group_size=17)
    t = load(d / "lazy.parquet", g)
    assert t.completion.array is None                  # nothing of the text in memory
    pick = np.array([150, 3, 77, 3, len(rows) - 1])
    assert t.texts(pick) == [rows[i]["completion"] for i in pick]
    sub = t.subset(np.sort(pick))
    assert sub.texts(np.arange(len(pick))) == [rows[i]["completion"] for i in np.sort(pick)]


def test_stress_subsample_beyond_the_cap(synth, monkeypatch):
    from audit.samples import cells, stress as stress_mod
    d, rows, gold, s, g = synth
    t = load(s, g)
    same, what = stress_mod.stress_table(t, 0)
    assert same is t and what["rows"] == "all"
    monkeypatch.setattr(cells, "STRESS_UNLABELLED", 20)
    sub, what = stress_mod.stress_table(t, 0)
    lab = ~np.isnan(t.gold)
    assert what["n_rows"] == lab.sum() + 20 * len(t.cells) == len(sub.proxy)
    assert np.isnan(sub.gold).sum() == 20 * len(t.cells) and (~np.isnan(sub.gold)).sum() == lab.sum()
    again, _ = stress_mod.stress_table(t, 0)
    assert again.sample_id.equals(sub.sample_id)              # seeded: the same rows every time
    audit = SamplesAudit(t, t.reference, SamplesConfig(seed=0))
    res = stress_mod.stress(audit, 3)
    assert res["table"]["rows"].startswith("seeded subsample") and res["examples"] == 3


def test_generator_is_seeded_and_readable(tmp_path):
    from world.samples_table import TableConfig, generate, samples_path
    cfg = TableConfig(rows=2_400, runs=3, families=4, gold_per_cell=20, chunk=1_000)
    truths = [generate(cfg, tmp_path / f"g{k}") for k in (0, 1)]
    assert truths[0] == truths[1]
    a, b = (load(samples_path(tmp_path / f"g{k}", cfg), tmp_path / f"g{k}" / "gold.parquet") for k in (0, 1))
    _same(a, b)
    assert a.runs[0] == "reference" and len(a.cells) == 12 and a.n_gold == 12 * 20
    sharded = TableConfig(**{**cfg.__dict__, "shards": 3})
    generate(sharded, tmp_path / "sh")
    _same(load(samples_path(tmp_path / "sh", sharded), tmp_path / "sh" / "gold.parquet"), a)
    other = generate(TableConfig(**{**cfg.__dict__, "seed": 1}), tmp_path / "g2")
    assert other["cells"] != truths[0]["cells"]
    assert json.loads((tmp_path / "g0" / "truth.json").read_text())["reference"] == "reference"


def test_draw_on_a_loaded_table_is_draw_gold_s_draw(synth):
    from audit.samples.draw import draw, draw_table
    from audit.samples.rows import read_samples
    d, rows, gold, s, g = synth
    shuffled = [rows[i] for i in np.random.default_rng(3).permutation(len(rows))]     # cells interleaved
    p = write_jsonl(d / "shuffled.jsonl", shuffled)
    sm, t = read_samples(p), load(p, g)
    for per_cell in (1, 7, 1000):
        assert draw_table(t, per_cell, 5).tolist() == draw(sm, per_cell, 5)


def test_audit_of_a_sharded_directory(synth, tmp_path, capsys):
    """End to end through the CLI: a directory of Parquet shards, its hash in the evidence."""
    from audit.samples.certify import main as samples_main
    from audit.samples.columns import table_sha256
    d, rows, gold, s, g = synth
    shards = tmp_path / "log"
    shards.mkdir()
    for k, idx in enumerate(np.array_split(np.arange(len(rows)), 4)):
        pq.write_table(pa.Table.from_pylist([rows[i] for i in idx]), shards / f"part-{k}.parquet")
    out = tmp_path / "out"
    assert samples_main(["--samples", str(shards), "--gold", str(g), "--out", str(out), "--no-figures",
                         "--stress-examples", "0"]) == 0, capsys.readouterr().err
    ev = json.loads((out / "evidence.json").read_text())
    assert ev["meta"]["input_hashes"]["log"] == table_sha256(shards)
    before = table_sha256(shards)
    pq.write_table(pa.Table.from_pylist(rows[:3]), shards / "part-9.parquet")
    assert table_sha256(shards) != before
    assert json.loads((out / "answer.json").read_text())["certification"]["run"] in (None, "good", "bad")


def test_parquet_with_integer_ids_and_token_lists_takes_the_fast_path(synth, tmp_path, monkeypatch):
    d, rows, gold, s, g = synth
    idmap = {r["sample_id"]: i for i, r in enumerate(rows)}
    ints = [dict(r, sample_id=i, prompt_id=i % 7, completion=r["completion"].split()) for i, r in enumerate(rows)]
    pq.write_table(pa.Table.from_pylist(ints), tmp_path / "s.parquet")
    pq.write_table(pa.Table.from_pylist([{"sample_id": idmap[x["sample_id"]], "gold": x["gold"]} for x in gold]),
                   tmp_path / "g.parquet")
    monkeypatch.setattr(rows_mod, "load_rows", lambda *a: pytest.fail("fell back to the row reader"))
    t = load(tmp_path / "s.parquet", tmp_path / "g.parquet")
    assert t.sample_id[3].as_py() == "3" and t.prompts[:3] == ["0", "1", "2"]
    assert t.texts([0, 5]) == [rows[0]["completion"], rows[5]["completion"]]


def test_the_saved_table_is_the_table(synth, tmp_path):
    """What the CLI hands to the claims' pytest (table.save / read_saved) is the table it validated."""
    from audit.samples.table import read_saved, save
    d, rows, gold, s, g = synth
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    for sp in (s, tmp_path / "s.parquet"):                 # completions in memory; left in the Parquet file
        t = load(sp, g)
        save(t, tmp_path / "t.arrow")
        back = read_saved(tmp_path / "t.arrow")
        _same(back, t)
        assert back.design == t.design and back.reference == t.reference and back.samples_path == t.samples_path
        assert (back.completion.array is None) == (t.completion.array is None)
