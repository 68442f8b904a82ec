"""The samples front door's input: a samples table and a gold table (JSONL, CSV or Parquet), read, validated and
checked against the sampling design that the intervals assume (docs/samples.md). Generic: a run, a family
(slice) and a completion are opaque strings here; nothing depends on this project's tokens or checkpoints.

samples: sample_id, run, family, prompt_id, completion, proxy_reward  (optional: prompt, step, superseded,
         generation)
gold:    sample_id, gold

A row marked superseded (a checkpoint of an interrupted attempt that the resumed run trained again:
audit.integrations.writer) is left out of the table: counted, its id kept unique, a gold label on it refused. A
proxy_reward that is null (or NaN) is a row without a proxy: kept, counted, and its cell certified from the gold
rows alone (audit.samples.estimates).

Design (what the intervals need): within every run x family cell, the gold rows are a simple random subset of
the cell's samples, and the cell's samples are draws from the run's policy on the family's prompts. The audit
tests what it can of that: the gold rows' proxy rewards must look like a random draw from their cell's rows
(a two-sample Kolmogorov-Smirnov test of the gold rows' proxy against the cell's unlabelled rows, Bonferroni-
corrected over the cells). A cell that fails is refused (exit 2), or, with nonrandom_gold="widen", given a
worst-case interval over the label range the user states; never a guess.

Every problem is one line naming the file, the line (or Parquet row) and the column, and what was expected.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import columns, rows
from .rows import SAMPLE_COLUMNS, TableError, unknown_columns

@dataclass
class DesignConfig:
    min_samples: int = 20          # rows per run x family cell
    min_gold: int = 10             # gold rows per run x family cell (the rectifier's sample)
    alpha: float = 0.01            # family-wise level of the random-subset test over all cells (Bonferroni)
    nonrandom_gold: str = "refuse"   # refuse | widen (worst-case interval over gold_range)
    gold_range: tuple | None = None  # [lo, hi] every gold label can take; needed by "widen"

    def level(self, n_cells: int) -> float:
        """Each cell's level of the random-subset test: alpha over the cells (Bonferroni)."""
        return self.alpha / max(1, n_cells)


@dataclass
class Table:
    """A validated samples table, column by column. Runs, families and prompts are integer codes into their
    names (a 10M-row table keeps three int32 columns, not 30M Python strings); `run`, `family` and `prompt_id`
    give the names per row where a caller wants them. sample_id stays an Arrow string array; completions are
    read where a claim needs them (audit.samples.columns.Texts)."""
    samples_path: str
    gold_path: str
    sample_id: object               # pyarrow string array
    run_code: np.ndarray            # int32 index into runs
    family_code: np.ndarray         # int32 index into families
    prompt_code: np.ndarray         # int32 index into prompts
    completion: object              # audit.samples.columns.Texts: read where a claim needs it
    proxy: np.ndarray
    gold: np.ndarray                # NaN where the row has no gold label
    step: np.ndarray | None = None
    runs: list = field(default_factory=list)        # in order of first appearance
    families: list = field(default_factory=list)    # sorted
    prompts: list = field(default_factory=list)
    design: dict = field(default_factory=dict)     # (run, family) -> random-subset test result
    reference: str | None = None
    cells: dict | None = None       # (run, family) -> ascending row indices; computed once, shared by copies
    # a reduced table (audit.samples.cells): the rows kept, and per summarised cell what the claims read of the
    # unlabelled rows that were not kept; n_rows counts every row of the whole table
    summaries: dict = field(default_factory=dict)
    n_rows: int | None = None
    kept_for_seed: int | None = None   # the seed whose stress subsample the kept rows hold
    n_superseded: int = 0              # rows of the file left out: superseded by a resumed run
    generation: dict = field(default_factory=dict)   # run -> its distinct generation records (JSON texts)

    def __post_init__(self):
        if self.n_rows is None:
            self.n_rows = len(self.proxy)
        if self.cells is None:
            # one stable sort by cell instead of a scan of the whole table per cell
            nf = max(1, len(self.families))
            key = self.run_code.astype(np.int64) * nf + self.family_code
            order = np.argsort(key, kind="stable")
            bounds = np.searchsorted(key[order], np.arange(len(self.runs) * nf + 1))
            self.cells = {(r, f): order[bounds[i * nf + j]:bounds[i * nf + j + 1]]
                          for i, r in enumerate(self.runs) for j, f in enumerate(self.families)}

    @property
    def n_gold(self) -> int:
        return int((~np.isnan(self.gold)).sum())

    @property
    def run(self) -> np.ndarray:
        return np.array(self.runs, dtype=object)[self.run_code]

    @property
    def family(self) -> np.ndarray:
        return np.array(self.families, dtype=object)[self.family_code]

    @property
    def prompt_id(self) -> np.ndarray:
        return np.array(self.prompts, dtype=object)[self.prompt_code]

    def cell(self, run: str, family: str) -> np.ndarray:
        return self.cells[(run, family)]

    def family_rows(self, family: str) -> np.ndarray:
        return np.flatnonzero(self.family_code == self.families.index(family))

    def texts(self, rows) -> list[str]:
        """The completions of `rows`, as Python strings (only where a claim reads them)."""
        return self.completion.take(rows)

    def subset(self, rows: np.ndarray) -> "Table":
        """The table restricted to `rows` (ascending): same runs, families, design; no summaries."""
        return Table(self.samples_path, self.gold_path, self.sample_id.take(rows), self.run_code[rows],
                     self.family_code[rows], self.prompt_code[rows], self.completion.subset(rows), self.proxy[rows],
                     self.gold[rows], None if self.step is None else self.step[rows], list(self.runs),
                     list(self.families), list(self.prompts), self.design, self.reference,
                     n_superseded=self.n_superseded, generation=self.generation)

    def missing_proxy(self, run: str, family: str) -> int:
        """Rows of the cell without a proxy (null in the samples file), a summarised cell's included."""
        summ = self.summaries.get((run, family))
        if summ is not None:
            return int(summ.get("n_missing_proxy", 0))
        return int(np.isnan(self.proxy[self.cell(run, family)]).sum())


def load(samples_path, gold_path, *, mapping: dict | None = None, reference: str | None = None,
         design: DesignConfig | None = None) -> Table:
    """Read and validate both files; raise TableError listing every problem (at most 10 per file). A valid table
    is read column by column (audit.samples.columns); anything that reader does not take as plainly valid is read
    again row by row, which names every problem (or accepts what only looked unusual: mixed id types, say)."""
    mapping, design = dict(mapping or {}), design or DesignConfig()
    sp, gp = Path(samples_path), Path(gold_path)
    problems: list[str] = unknown_columns(mapping)
    if design.nonrandom_gold not in ("refuse", "widen"):
        problems.append(f"--nonrandom-gold {design.nonrandom_gold}: expected refuse or widen")
    if design.nonrandom_gold == "widen" and design.gold_range is None:
        problems.append("--nonrandom-gold widen needs --gold-range LO HI: the values every gold label can take "
                        "(the worst case is taken over them)")
    t = None
    if not problems:
        try:
            t = _load_columns(sp, gp, mapping, design)
        except columns.Unusual:
            pass                    # the row reader names what the fast one would not take
    if t is None:
        t = _table(sp, gp, *rows.load_rows(sp, gp, mapping, design.gold_range, problems))
    check(t, reference, design, problems)
    if problems:
        raise TableError(problems)
    return t


def _table(sp, gp, sid, run, fam, pid, comp, proxy, gold, step, extras=None) -> Table:
    """The Table of validated columns (Arrow arrays or their Parquet dictionaries; completions as Texts; proxy,
    gold, step as float arrays); extras: n_superseded and generation (audit.samples.rows.extras)."""
    run_code, runs = columns.categorical(run)
    fam_code, fams = columns.categorical(fam, "sorted")
    pcode, prompts = columns.categorical(pid)
    return Table(str(sp), str(gp), sid, run_code, fam_code, pcode, comp, proxy, gold, step, runs, fams, prompts,
                 **(extras or {}))


def load_samples(samples_path, mapping: dict | None = None):
    """(the samples table alone as a Table, gold all NaN; its prompts as columns.Texts, "" where none), by the
    columnar reader; None when that reader would not take the file plainly (draw-gold then reads it row by row,
    which names any problem)."""
    sp, mapping = Path(samples_path), dict(mapping or {})
    files, fmt, bad = columns.shard_files(sp)
    try:
        if bad:
            raise columns.Unusual(bad)
        cols = _sample_columns(files, fmt, mapping, prompt=True)
    except columns.Unusual:
        return None
    prompt = cols.pop()
    return _table(sp, sp, *cols[:6], np.full(len(cols[0]), np.nan), cols[6], cols[7]), prompt


def _sample_columns(sfiles: list, sfmt: str, mapping: dict, prompt: bool = False) -> list:
    """[sample_id, run, family, prompt_id, completion Texts, proxy, step (or None), extras] (+ the prompt Texts)
    of the samples files' rows in force (superseded rows left out); columns.Unusual at anything but a plainly
    valid table."""
    import pyarrow as pa
    col = lambda c: mapping.get(c, c)   # noqa: E731
    # completions stay in Parquet files, read where a claim needs them (lists of tokens are joined in memory)
    lazy_text = sfmt == "parquet" and columns.lazy_parquet_texts(sfiles, col("completion"))
    need = [col(c) for c in SAMPLE_COLUMNS if not (lazy_text and c == "completion")]
    optional = ([col("step"), col("superseded"), col("generation")]
                + ([col("prompt")] if prompt and sfmt != "parquet" else []))
    st = columns.read(sfiles, sfmt, need, optional, categorical=[col(c) for c in ("run", "family", "prompt_id",
                                                                                   "generation")])
    if st.num_rows == 0:
        raise columns.Unusual("no rows")
    sid = columns.ids(st[col("sample_id")])
    if not columns.distinct(sid):          # over the whole file: a superseded row's id stays its own
        raise columns.Unusual("duplicate sample_id")
    n_superseded = 0
    if col("superseded") in st.column_names:
        gone = columns.flags(st[col("superseded")])
        n_superseded = int(gone.sum())
        if n_superseded and sfmt == "parquet":
            # the Parquet texts are read by row position in the files: the row reader takes this rare case
            raise columns.Unusual("superseded rows in Parquet")
        if n_superseded:
            keep = pa.array(~gone)
            st, sid = st.filter(keep), sid.filter(keep)
            if st.num_rows == 0:
                raise columns.Unusual("no rows in force")
    if lazy_text:
        comp = columns.Texts(files=sfiles, column=col("completion"), n=st.num_rows)
    else:
        comp = columns.Texts(columns.texts(st[col("completion")]))
    run, fam, pid = (st[col(c)] for c in ("run", "family", "prompt_id"))
    proxy = columns.numbers(st[col("proxy_reward")], allow_null=True)     # null: no proxy (NaN here)
    step = columns.numbers(st[col("step")], allow_null=True) if col("step") in st.column_names else None
    extras = {"n_superseded": n_superseded, "generation": {}}
    if col("generation") in st.column_names:
        gen = st[col("generation")]
        typ = gen.type.value_type if pa.types.is_dictionary(gen.type) else gen.type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ)):
            raise columns.Unusual("generation column not text")      # a JSON object per row: the row reader
        extras["generation"] = _generation(run, gen)
    out = [sid, run, fam, pid, comp, proxy, step, extras]
    if prompt:      # optional and free text: "" where missing or null (as the row reader gives it)
        if sfmt == "parquet":
            out.append(columns.Texts(files=sfiles, column=col("prompt"), n=st.num_rows, nullable=True))
        elif col("prompt") in st.column_names:
            out.append(columns.Texts(columns.texts(st[col("prompt")], nullable=True)))
        else:
            out.append(None)
    return out


def _generation(run, gen) -> dict:
    """{run: its distinct generation records in order of first appearance} from two columns (one pass over
    their codes, not over the rows' strings)."""
    import pyarrow as pa
    from .rows import generation_by_run
    if pa.types.is_null(gen.type):
        return {}
    rc, runs = columns.categorical(run)
    gen = pa.chunked_array([gen]) if isinstance(gen, pa.Array) else gen
    gen = gen.unify_dictionaries().combine_chunks() if pa.types.is_dictionary(gen.type) else \
        gen.combine_chunks().dictionary_encode()
    values = gen.dictionary.to_pylist()
    codes = gen.indices.to_numpy(zero_copy_only=False) if not gen.null_count else \
        np.array([-1 if v is None else v for v in gen.indices.to_pylist()])
    pairs = np.unique(np.stack([rc.astype(np.int64), codes]), axis=1, return_index=True)[1]
    firsts = sorted(pairs)
    return generation_by_run([runs[rc[i]] for i in firsts],
                             [None if codes[i] < 0 or values[codes[i]] == "" else values[codes[i]] for i in firsts])


def _load_columns(sp: Path, gp: Path, mapping: dict, design: DesignConfig) -> Table:
    """The fast path: raises columns.Unusual at anything but a plainly valid table."""
    col = lambda c: mapping.get(c, c)   # noqa: E731
    sfiles, sfmt, bad = columns.shard_files(sp)
    gfiles, gfmt, bad2 = columns.shard_files(gp)
    if bad or bad2:
        raise columns.Unusual(bad or bad2)
    sid, run, fam, pid, comp, proxy, step, extras = _sample_columns(sfiles, sfmt, mapping)
    gt = columns.read(gfiles, gfmt, [col("sample_id"), col("gold")])
    if gt.num_rows == 0:
        raise columns.Unusual("no gold rows")
    gid, gv = columns.ids(gt[col("sample_id")]), columns.numbers(gt[col("gold")])
    if not columns.distinct(gid):
        raise columns.Unusual("duplicate gold id")
    if design.gold_range is not None and ((gv < design.gold_range[0]) | (gv > design.gold_range[1])).any():
        raise columns.Unusual("gold outside the range")
    gold = np.full(len(sid), np.nan)
    gold[columns.positions(gid, sid)] = gv
    return _table(sp, gp, sid, run, fam, pid, comp, proxy, gold, step, extras)


def check(t: Table, reference, design: DesignConfig, problems: list[str]) -> None:
    """The reference (given, or a run named 'reference') and the sampling design (into t.design and problems)."""
    if reference is None and "reference" in t.runs:
        reference = "reference"
    t.reference = reference
    _check_design(t, reference, design, problems)


def _check_design(t: Table, reference, design: DesignConfig, problems: list[str]) -> None:
    """Cells complete and large enough, the reference present, the gold rows a random subset of their cell."""
    from scipy import stats
    if reference is None:
        problems.append(f"--reference: not given; the runs in {t.samples_path} are: {', '.join(t.runs)}")
    elif reference not in t.runs:
        problems.append(f"--reference {reference}: no such run in {t.samples_path}; runs are: {', '.join(t.runs)}")
    cells = [(r, f) for r in t.runs for f in t.families]
    level = design.level(len(cells))
    for r, f in cells:
        idx = t.cell(r, f)
        g = idx[~np.isnan(t.gold[idx])]
        u = idx[np.isnan(t.gold[idx])]
        summ = t.summaries.get((r, f))       # a cell summarised on Ray (audit.samples.cells): its counts, KS test
        n_all, n_u = (len(idx), len(u)) if summ is None else (summ["n_samples"], summ["n_unlabelled"])
        where = f"run '{r}' family '{f}'"
        if n_all < design.min_samples:
            problems.append(f"{t.samples_path}: {where}: {n_all} samples, expected at least {design.min_samples} "
                            "(every run needs samples of every family)")
            continue
        if len(g) < design.min_gold:
            problems.append(f"{t.gold_path}: {where}: {len(g)} gold rows, expected at least {design.min_gold} (a "
                            "random subset of every run x family cell)")
            continue
        if n_u == 0:
            t.design[(r, f)] = {"p_value": None, "level": level, "random": True, "n_gold": len(g), "n_unlabeled": 0,
                                "test": "none: every row labelled"}
            continue
        if summ is None:
            x = t.proxy[idx]
            missing = np.isnan(x)
            if missing.any():   # a missing proxy as a value below every other: the test sees its share too
                x = np.where(missing, (np.nanmin(x) if not missing.all() else 0.0) - 1.0, x)
            lab = ~np.isnan(t.gold[idx])
            p = float(stats.ks_2samp(x[lab], x[~lab]).pvalue)
        else:
            p = summ["ks_p_value"]
        ok = p >= level
        t.design[(r, f)] = {"p_value": p, "level": level, "random": ok, "n_gold": len(g), "n_unlabeled": n_u,
                            "test": "two-sample Kolmogorov-Smirnov, gold rows' proxy vs the cell's unlabelled rows"
                                    + (" (a missing proxy counted below every other)" if t.missing_proxy(r, f)
                                       else "")}
        if not ok and design.nonrandom_gold == "refuse":
            problems.append(f"{t.gold_path}: {where}: the {len(g)} gold rows' proxy_reward is distributed unlike "
                            f"the cell's other {len(u)} rows (KS p = {p:.2g} < {level:.2g}, i.e. {design.alpha:g} "
                            f"over {len(cells)} cells): the intervals need a random subset (docs/samples.md), and "
                            f"this test refuses at most {design.alpha:.0%} of tables whose gold rows are one "
                            "(--design-alpha); relabel a random subset, or pass --nonrandom-gold widen "
                            "--gold-range LO HI for worst-case intervals")


# ------------------------------------------------------------------------------------------- hand-over
def save(t: Table, path: Path) -> None:
    """The validated table (and its design test) as one Arrow IPC file, so the claims' pytest process reads in a
    memory map what the CLI already read and checked instead of parsing and testing the inputs again."""
    import pyarrow as pa
    cols = {"sample_id": t.sample_id, "run_code": t.run_code, "family_code": t.family_code,
            "prompt_code": t.prompt_code, "proxy": t.proxy, "gold": t.gold}
    if t.step is not None:
        cols["step"] = t.step
    if t.completion.array is not None:
        cols["completion"] = t.completion.array
    meta = {"samples_path": t.samples_path, "gold_path": t.gold_path, "runs": t.runs, "families": t.families,
            "reference": t.reference, "design": [[r, f, d] for (r, f), d in t.design.items()],
            "summaries": [[r, f, d] for (r, f), d in t.summaries.items()], "n_rows": t.n_rows,
            "kept_for_seed": t.kept_for_seed, "n_superseded": t.n_superseded, "generation": t.generation,
            "texts": None if t.completion.array is not None else
            {"files": [str(f) for f in t.completion.files], "column": t.completion.column}}
    tab = pa.table(cols).replace_schema_metadata({"audit.samples": json.dumps(meta)})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, tab.schema) as w:
        w.write_table(tab)
    with pa.OSFile(str(path.with_suffix(".prompts.arrow")), "wb") as sink:
        prompts = pa.table({"prompt_id": pa.array(t.prompts, pa.string())})
        with pa.ipc.new_file(sink, prompts.schema) as w:
            w.write_table(prompts)


def read_saved(path: Path) -> Table:
    """The Table save() wrote (numeric columns memory-mapped, not copied)."""
    import pyarrow as pa
    path = Path(path)
    tab = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    meta = json.loads(tab.schema.metadata[b"audit.samples"])
    prompts = pa.ipc.open_file(pa.memory_map(str(path.with_suffix(".prompts.arrow")))).read_all()
    num = lambda c: tab[c].combine_chunks().to_numpy(zero_copy_only=False)   # noqa: E731
    texts = (columns.Texts(tab["completion"].combine_chunks()) if meta["texts"] is None else
             columns.Texts(files=[Path(f) for f in meta["texts"]["files"]], column=meta["texts"]["column"],
                           n=tab.num_rows))
    t = Table(meta["samples_path"], meta["gold_path"], tab["sample_id"].combine_chunks(), num("run_code"),
              num("family_code"), num("prompt_code"), texts, num("proxy"), num("gold"),
              num("step") if "step" in tab.column_names else None, meta["runs"], meta["families"],
              prompts["prompt_id"].to_pylist(), {(r, f): d for r, f, d in meta["design"]}, meta["reference"],
              summaries={(r, f): d for r, f, d in meta["summaries"]}, n_rows=meta["n_rows"],
              kept_for_seed=meta["kept_for_seed"], n_superseded=meta.get("n_superseded", 0),
              generation=meta.get("generation") or {})
    return t
