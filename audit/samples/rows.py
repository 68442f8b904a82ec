"""The samples door's row-by-row reader: every row of a samples or gold table checked one by one, every problem
named -- the file, the line (or Parquet row), the column and what was expected, at most 10 per file. The fast
columnar reader (audit.samples.columns) hands any table it does not take as plainly valid to this one, so a
valid table is read once by pyarrow and an invalid one gets these messages. draw-gold reads its samples here.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from rlhf.errors import InputError

from . import columns

SAMPLE_COLUMNS = ("sample_id", "run", "family", "prompt_id", "completion", "proxy_reward")
# superseded: a row of an interrupted attempt that a resumed run trained again (audit.integrations.writer), kept in
# the file and left out of the table; generation: how the row was sampled (a JSON text the report shows per run)
OPTIONAL_COLUMNS = ("prompt", "step", "superseded", "generation")
GOLD_COLUMNS = ("sample_id", "gold")
MAX_PER_FILE = 10


class TableError(InputError):
    """Bad input: `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def read_rows(path: Path, problems: list[str]):
    """[(location, {column: value})] of a file or a directory of shards (in file-name order), or None when a file
    cannot be read at all."""
    files, fmt, bad = columns.shard_files(Path(path))
    if bad:
        problems.append(bad)
        return None
    rows = []
    for f in files:
        got = _read_file_rows(f, fmt, problems)
        if got is None:
            return None
        rows += got
    return rows


def _read_file_rows(path: Path, fmt: str, problems: list[str]):
    rows, bad = [], 0
    if fmt == "jsonl":
        with open(path, encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    bad += 1
                    if bad <= MAX_PER_FILE:
                        problems.append(f"{path}:{i}: not valid JSON ({e.msg} at column {e.colno})")
                    continue
                if not isinstance(obj, dict):
                    bad += 1
                    if bad <= MAX_PER_FILE:
                        problems.append(f"{path}:{i}: expected a JSON object per line, got {type(obj).__name__}")
                    continue
                rows.append((f"{path}:{i}", obj))
        if bad > MAX_PER_FILE:
            problems.append(f"{path}: ... and {bad - MAX_PER_FILE} more malformed lines")
        return None if bad else rows
    if fmt == "csv":
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None:
                problems.append(f"{path}: empty file: expected a header line")
                return None
            line = reader.line_num
            for rec in reader:
                if None in rec:
                    problems.append(f"{path}:{line + 1}: more fields than the header's {len(reader.fieldnames)}")
                    return None
                rows.append((f"{path}:{line + 1}", {k: v for k, v in rec.items()}))
                line = reader.line_num
        return rows
    try:
        import pyarrow.parquet as pq
        tab = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any reader failure is the file's problem, named
        problems.append(f"{path}: not a readable Parquet file ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None
    cols = tab.to_pydict()
    names = list(cols)
    return [(f"{path}: row {i}", {k: cols[k][i] for k in names}) for i in range(tab.num_rows)]


def _columns(path, rows, required, mapping, problems) -> bool:
    have = set()
    for _, r in rows[:1]:
        have = set(r)
    ok = True
    for c in required:
        src = mapping.get(c, c)
        if rows and src not in have:
            hint = f" (mapped from --column {c}={src})" if c in mapping else f" (map another name with --column {c}=NAME)"
            problems.append(f"{path}: column '{src}' missing{hint}; columns are: {', '.join(sorted(have)) or 'none'}")
            ok = False
    if not rows:
        problems.append(f"{path}: no rows")
        ok = False
    return ok


def text_id(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        return str(int(v)) if math.isfinite(v) and v == int(v) else None
    if isinstance(v, (int, str)):
        s = str(v).strip()
        return s or None
    return None


def _number(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            return None
    if isinstance(v, (int, float)):
        v = float(v)
        return v if math.isfinite(v) else None
    return None


def _proxy(v):
    """A proxy_reward: a finite number, NaN when missing (null or an empty cell: the row has no proxy), or None
    when it is neither (a stored NaN or infinity, text that is no number)."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return math.nan
    return _number(v)


def _flag(v):
    """The superseded marker: True, False, or None when it is neither."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, (int, float)):
        return True if v == 1 else False if v == 0 else None
    if isinstance(v, str):
        t = v.strip().lower()
        return True if t in columns.TRUE else False if t in columns.FALSE else None
    return None


def _completion(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(t, str) for t in v):
        return " ".join(v)
    return None


class _Problems:
    def __init__(self, path, problems):
        self.path, self.problems, self.n = path, problems, 0

    def add(self, text):
        self.n += 1
        if self.n <= MAX_PER_FILE:
            self.problems.append(text)

    def close(self):
        if self.n > MAX_PER_FILE:
            self.problems.append(f"{self.path}: ... and {self.n - MAX_PER_FILE} more problems")


def column_mapping(items) -> tuple[dict, list[str]]:
    """--column NAME=COLUMN flags (repeatable) as {NAME: COLUMN}, and the usage problems found."""
    mapping, problems = {}, []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip() or not v.strip():
            problems.append(f"--column {item}: expected NAME=COLUMN")
        else:
            mapping[k.strip()] = v.strip()
    return mapping, problems


def unknown_columns(mapping: dict) -> list[str]:
    """A problem for every name in a column mapping that is not a column of the schema."""
    return [f"--column {k}={mapping[k]}: unknown column '{k}'; expected one of "
            f"{', '.join(SAMPLE_COLUMNS + OPTIONAL_COLUMNS + ('gold',))}"
            for k in sorted(set(mapping) - set(SAMPLE_COLUMNS + OPTIONAL_COLUMNS + GOLD_COLUMNS))]


def parse_samples(sp: Path, srows, mapping: dict, problems: list[str]) -> dict:
    """The samples rows checked one by one (problems appended, at most 10 per file): the valid rows' columns as
    lists (sample_id, run, family, prompt_id, prompt, completion, proxy, step), `where` (sample_id -> location)
    and `has_step`."""
    col = lambda c: mapping.get(c, c)   # noqa: E731
    sid, run, fam, pid, comp, proxy, step, prompt, where = [], [], [], [], [], [], [], [], {}
    generation, superseded = [], {}
    has_step = col("step") in srows[0][1]
    pr = _Problems(sp, problems)
    for loc, r in srows:
        ok = True
        vals = {}
        gone = _flag(r.get(col("superseded")))
        if gone is None:
            pr.add(f"{loc}: column '{col('superseded')}': expected true or false, got {r.get(col('superseded'))!r}")
            continue
        if gone:        # out of the table: only its id is checked (ids stay unique over the whole file)
            s_id = text_id(r.get(col("sample_id")))
            if s_id is None:
                pr.add(f"{loc}: column '{col('sample_id')}': expected a non-empty string or integer id, "
                       f"got {r.get(col('sample_id'))!r}")
            elif s_id in where:
                pr.add(f"{loc}: column '{col('sample_id')}': duplicate id {s_id!r} (first at {where[s_id]})")
            else:
                where[s_id] = loc
                superseded[s_id] = loc
            continue
        for c in ("sample_id", "run", "family", "prompt_id"):
            vals[c] = text_id(r.get(col(c)))
            if vals[c] is None:
                pr.add(f"{loc}: column '{col(c)}': expected a non-empty string or integer id, got {r.get(col(c))!r}")
                ok = False
        vals["completion"] = _completion(r.get(col("completion")))
        if vals["completion"] is None:
            pr.add(f"{loc}: column '{col('completion')}': expected a string (or a list of token strings), "
                   f"got {type(r.get(col('completion'))).__name__}")
            ok = False
        vals["proxy"] = _proxy(r.get(col("proxy_reward")))
        if vals["proxy"] is None:
            pr.add(f"{loc}: column '{col('proxy_reward')}': expected a finite number (or null: no proxy for this row), "
                   f"got {r.get(col('proxy_reward'))!r}")
            ok = False
        st = None
        if has_step and r.get(col("step")) not in (None, ""):
            st = _number(r.get(col("step")))
            if st is None:
                pr.add(f"{loc}: column '{col('step')}': expected a number, got {r.get(col('step'))!r}")
                ok = False
        if ok and vals["sample_id"] in where:
            pr.add(f"{loc}: column '{col('sample_id')}': duplicate id {vals['sample_id']!r} "
                   f"(first at {where[vals['sample_id']]})")
            ok = False
        if not ok:
            continue
        where[vals["sample_id"]] = loc
        sid.append(vals["sample_id"]), run.append(vals["run"]), fam.append(vals["family"])
        pid.append(vals["prompt_id"]), comp.append(vals["completion"]), proxy.append(vals["proxy"])
        step.append(np.nan if st is None else st)
        prompt.append(_prompt(r.get(col("prompt"))))
        g = r.get(col("generation"))
        generation.append(None if g is None or g == "" else g if isinstance(g, str) else
                          json.dumps(g, sort_keys=True, separators=(",", ":")))
    pr.close()
    return {"sample_id": sid, "run": run, "family": fam, "prompt_id": pid, "prompt": prompt, "completion": comp,
            "proxy": proxy, "step": step, "where": where, "has_step": has_step, "superseded": superseded,
            "generation": generation}


def _prompt(v) -> str:
    return "" if v is None else v if isinstance(v, str) else _completion(v) or str(v)


def read_samples(samples_path, mapping: dict | None = None) -> dict:
    """The samples table alone, validated row by row as load() does (parse_samples' dict); raises TableError."""
    mapping, sp, problems = dict(mapping or {}), Path(samples_path), []
    srows = read_rows(sp, problems)
    if srows is None or not _columns(sp, srows, SAMPLE_COLUMNS, mapping, problems):
        raise TableError(problems)
    sm = parse_samples(sp, srows, mapping, problems)
    if problems:
        raise TableError(problems)
    return sm


def load_rows(sp: Path, gp: Path, mapping: dict, gold_range, problems: list[str]) -> tuple:
    """The row-by-row reader of both files: every problem named (TableError), else the columns the fast path
    gives (sample_id, run, family, prompt_id as Arrow strings; completions as Texts; proxy, gold, step arrays)."""
    import pyarrow as pa
    srows = read_rows(sp, problems)
    grows = read_rows(gp, problems)
    if srows is None or grows is None:
        raise TableError(problems)
    s_ok = _columns(sp, srows, SAMPLE_COLUMNS, mapping, problems)
    g_ok = _columns(gp, grows, GOLD_COLUMNS, mapping, problems)
    if not (s_ok and g_ok) or problems:
        raise TableError(problems)
    col = lambda c: mapping.get(c, c)   # noqa: E731
    sm = parse_samples(sp, srows, mapping, problems)
    sid, run, fam, pid, comp, proxy, step, where = (sm[k] for k in ("sample_id", "run", "family", "prompt_id",
                                                                     "completion", "proxy", "step", "where"))
    has_step = sm["has_step"]

    index = {s: i for i, s in enumerate(sid)}
    gold = np.full(len(sid), np.nan)
    gseen = {}
    pg = _Problems(gp, problems)
    for loc, r in grows:
        s = text_id(r.get(col("sample_id")))
        y = _number(r.get(col("gold")))
        if s is None:
            pg.add(f"{loc}: column '{col('sample_id')}': expected a non-empty string or integer id, "
                   f"got {r.get(col('sample_id'))!r}")
            continue
        if y is None:
            v = r.get(col("gold"))
            pg.add(f"{loc}: column '{col('gold')}': " + (
                "empty: expected the expert's label of this sample, a finite number (every row a draw-gold file "
                "drew needs its label: leaving some out would make the labelled rows no random subset)"
                if v is None or (isinstance(v, str) and not v.strip()) else f"expected a finite number, got {v!r}"))
            continue
        if s in gseen:
            pg.add(f"{loc}: column '{col('sample_id')}': duplicate gold label for {s!r} (first at {gseen[s]})")
            continue
        gseen[s] = loc
        if s in sm["superseded"]:
            pg.add(f"{loc}: column '{col('sample_id')}': {s!r} labels a superseded row ({sm['superseded'][s]}: a "
                   "checkpoint of an interrupted attempt that the resumed run trained again, left out of the "
                   "audit): draw the rows to label again with python -m audit.samples draw-gold")
            continue
        if s not in index:
            if s not in where:   # a samples row that had its own problem is already named
                pg.add(f"{loc}: column '{col('sample_id')}': {s!r} is not a sample_id of {sp}")
            continue
        if gold_range is not None and not (gold_range[0] <= y <= gold_range[1]):
            pg.add(f"{loc}: column '{col('gold')}': {y} outside --gold-range {gold_range[0]:g} "
                   f"{gold_range[1]:g}")
            continue
        gold[index[s]] = y
    pg.close()
    if problems:
        raise TableError(problems)
    text = lambda v: pa.array(v, pa.string())   # noqa: E731
    return (text(sid), text(run), text(fam), text(pid), columns.Texts(text(comp)), np.array(proxy, float), gold,
            np.array(step, float) if has_step else None, extras(sm))


def extras(sm: dict) -> dict:
    """What the table keeps beside its columns (audit.samples.table.Table): the superseded rows left out, and the
    generation settings of each run."""
    return {"n_superseded": len(sm["superseded"]), "generation": generation_by_run(sm["run"], sm["generation"])}


def generation_by_run(runs, generation) -> dict:
    """{run: [its distinct generation records, in order of first appearance]} (runs without any left out)."""
    out: dict = {}
    for r, g in zip(runs, generation):
        if g is not None and g not in out.setdefault(r, []):
            out[r].append(g)
    return {r: v for r, v in out.items() if v}


