"""The samples door's fast reader: a samples or gold table read column by column with pyarrow, only the columns the
audit needs, checked with vectorised kernels. A file, or a directory of shards (Parquet, JSONL or CSV part files as
Spark, Ray or a trainer's logger write them; read in file-name order).

It never explains a problem: anything it does not accept as plainly valid (a malformed line, a null, a float id, a
non-finite number, a duplicate id, an unknown gold id...) raises Unusual, and the row-by-row reader
(audit.samples.rows) reads the same file again to name the file, line and column. So a valid table costs one
columnar pass, and an invalid one gets the same messages as before.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
# what --samples and --gold take, in the commands' --help
FORMATS_HELP = ("JSONL (.jsonl/.ndjson), CSV (.csv) or Parquet (.parquet/.pq), or a directory of part files of "
                "one format (Spark, Ray or a logger's shards)")


class Unusual(Exception):
    """The fast reader gives up: the row-by-row reader decides (and names any problem)."""


def shard_files(path: Path) -> tuple[list[Path], str | None, str | None]:
    """(files, format, problem): a file itself, or a directory's part files of one known format in name order
    (hidden files and _SUCCESS-style markers skipped, subdirectories read recursively as Spark's partitions)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS
                       and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
        fmts = {FORMATS[p.suffix.lower()] for p in files}
        if not files:
            return [], None, f"{path}: a directory with no .parquet, .jsonl or .csv files"
        if len(fmts) > 1:
            return [], None, f"{path}: shards of more than one format ({', '.join(sorted(fmts))}): expected one"
        return files, fmts.pop(), None
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        return [], None, f"{path}: unknown format '{path.suffix}': expected .jsonl, .csv or .parquet (or a directory of them)"
    if not path.is_file():
        return [], None, f"{path}: file not found"
    return [path], fmt, None


def table_sha256(path) -> str:
    """sha256 of a table: a file's bytes, or for a directory of shards the sha256 of its part files' relative
    paths and sha256s, in the order the reader reads them (a shard added, removed or changed changes it)."""
    import hashlib

    from audit.core.evidence import sha256_file
    path = Path(path)
    if not path.is_dir():
        return sha256_file(path)
    files, _, _ = shard_files(path)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(path).as_posix()}\t{sha256_file(f)}\n".encode())
    return h.hexdigest()


def read(files: list[Path], fmt: str, columns: list[str], optional: list[str] = (), categorical: list[str] = ()):
    """A pyarrow Table of `columns` (every one required) and those of `optional` present in every file; raises
    Unusual when a file does not read cleanly as a table or a required column is missing. Parquet columns named in
    `categorical` are read dictionary-encoded (a run name per row costs an int32, not a string)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq
    parts = []
    for f in files:
        try:
            if fmt == "parquet":
                schema = pq.read_schema(f)
                cols = [c for c in list(columns) + list(optional) if c in schema.names]
                strings = [c for c in categorical if c in cols and (pa.types.is_string(schema.field(c).type)
                                                                     or pa.types.is_large_string(schema.field(c).type))]
                t = pq.read_table(f, columns=cols, read_dictionary=strings)
            elif fmt == "jsonl":
                t = pajson.read_json(f)
            else:
                with open(f, "rb") as fh:
                    header = fh.readline().decode("utf-8", "replace").rstrip("\r\n").split(",")
                want = [c for c in list(columns) + list(optional) if c in header]
                t = pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(
                    include_columns=want, column_types={c: pa.string() for c in want}, strings_can_be_null=False))
        except Exception as e:  # noqa: BLE001 - anything unreadable is the row reader's to name
            raise Unusual(f"{f}: {type(e).__name__}") from e
        missing = [c for c in columns if c not in t.column_names]
        if missing:
            raise Unusual(f"{f}: missing {missing}")
        parts.append(t.select([c for c in list(columns) + list(optional) if c in t.column_names]))
    present = [c for c in optional if all(c in p.column_names for p in parts)]
    parts = [p.select(list(columns) + present) for p in parts]
    try:
        return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    except Exception as e:  # noqa: BLE001
        raise Unusual(f"shards do not share a schema: {e}") from e


def _plain(col):
    """One array (chunks combined), dictionary-encoded columns decoded."""
    import pyarrow as pa
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


def ids(col):
    """A column of opaque ids as trimmed, non-empty strings (integers as their decimal text)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = _plain(col)
    if pa.types.is_integer(col.type) or pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.string())
    elif not pa.types.is_string(col.type):
        raise Unusual(f"id column of type {col.type}")
    if col.null_count:
        raise Unusual("null id")
    col = pc.utf8_trim_whitespace(col)
    if pc.any(pc.equal(pc.utf8_length(col), 0)).as_py():
        raise Unusual("empty id")
    return col


def numbers(col, allow_null: bool = False) -> np.ndarray:
    """A numeric column as float64, every value finite (nulls as NaN where allowed)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = _plain(col)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.utf8_trim_whitespace(col)
        if allow_null:
            col = pc.if_else(pc.equal(col, ""), pa.scalar(None, col.type), col)
        try:
            col = pc.cast(col, pa.float64())
        except Exception as e:  # noqa: BLE001
            raise Unusual("not numbers") from e
    elif pa.types.is_null(col.type) and allow_null:
        return np.full(len(col), np.nan)
    elif not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise Unusual(f"numeric column of type {col.type}")
    if col.null_count and not allow_null:
        raise Unusual("null number")
    x = col.cast(pa.float64()).to_numpy(zero_copy_only=False)          # a null becomes NaN
    if not np.isfinite(x[col.is_valid().to_numpy(zero_copy_only=False)]).all():     # a stored NaN or inf
        raise Unusual("non-finite number")
    return x


TRUE, FALSE = ("true", "1"), ("", "false", "0")


def flags(col) -> np.ndarray:
    """A true/false column (the `superseded` marker) as a bool array: true, 1 or "true" set; false, 0, "false",
    "" or null not; anything else Unusual."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = _plain(col)
    if pa.types.is_null(col.type):
        return np.zeros(len(col), bool)
    if pa.types.is_boolean(col.type):
        return pc.fill_null(col, False).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(col.type):
        col = pc.fill_null(col, 0)
        if not pc.all(pc.is_in(col, value_set=pa.array([0, 1], col.type))).as_py():
            raise Unusual("flag not 0 or 1")
        return pc.equal(col, 1).to_numpy(zero_copy_only=False)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.utf8_lower(pc.utf8_trim_whitespace(pc.fill_null(col, "")))
        if not pc.all(pc.is_in(col, value_set=pa.array(TRUE + FALSE, col.type))).as_py():
            raise Unusual("flag not true or false")
        return pc.is_in(col, value_set=pa.array(TRUE, col.type)).to_numpy(zero_copy_only=False)
    raise Unusual(f"flag column of type {col.type}")


def texts(col, nullable: bool = False):
    """Completions: strings, or lists of token strings joined by spaces. nullable: a null (or an all-null
    column) is "" (an optional free-text column such as prompt)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = _plain(col)
    if nullable and pa.types.is_null(col.type):
        return pa.array([""] * len(col), pa.string())
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        if not (pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)):
            raise Unusual("list of non-strings")
        col = pc.binary_join(col, " ")
    if pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.string())
    if nullable and pa.types.is_string(col.type) and col.null_count:
        col = pc.fill_null(col, "")
    if not pa.types.is_string(col.type) or col.null_count:
        raise Unusual("completion not a string")
    return col


def categorical(col, order: str = "first") -> tuple[np.ndarray, list[str]]:
    """An id column as (int32 code per row, names): names in order of first appearance ("first") or sorted
    ("sorted"). One hash pass (or none, for a column Parquet stored dictionary-encoded)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(col, pa.ChunkedArray):
        col = col.unify_dictionaries() if pa.types.is_dictionary(col.type) else col
        col = col.combine_chunks()
    if not pa.types.is_dictionary(col.type):
        col = ids(col).dictionary_encode()
    elif col.null_count:
        raise Unusual("null id")
    values = ids(col.dictionary).to_pylist()         # trimmed: two raw values may name one id
    indices = col.indices.cast(pa.int32())
    seen = pc.unique(indices).to_numpy(zero_copy_only=False)        # dictionary entries in order of first use
    names = list(dict.fromkeys(values[i] for i in seen))
    if order == "sorted":
        names = sorted(names)
    at = {n: k for k, n in enumerate(names)}
    remap = np.array([at.get(v, -1) for v in values], dtype=np.int32)
    return remap[indices.to_numpy(zero_copy_only=False)], names


def distinct(col) -> bool:
    """No value twice (a sort, cheaper than hashing 10M strings)."""
    import pyarrow.compute as pc
    if len(col) < 2:
        return True
    srt = col.take(pc.sort_indices(col))
    return not pc.any(pc.equal(srt.slice(1), srt.slice(0, len(srt) - 1))).as_py()


def positions(keys, values) -> np.ndarray:
    """Position in `values` (distinct) of every key of `keys` (distinct, usually few); Unusual when one is not
    there. The hash table is built on the keys, not on the (long) values."""
    import pyarrow.compute as pc
    found = pc.is_in(values, value_set=keys)
    pos = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    if len(pos) != len(keys):
        raise Unusual("key not found")
    order = pc.index_in(values.filter(found), value_set=keys).to_numpy(zero_copy_only=False)
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = pos
    return out


class Texts:
    """The completion column, kept where it is: in memory (JSONL, CSV, the row reader), or in Parquet files read
    in batches only for the rows a claim asks for (the corruption stress's subsample), so a 10M-row log's text
    never sits in memory whole."""

    def __init__(self, array=None, files=None, column=None, n=None, nullable: bool = False):
        self.array, self.files, self.column, self.nullable = array, files, column, nullable
        self.n = len(array) if array is not None else n

    def __len__(self):
        return self.n

    def take(self, rows) -> list[str]:
        import pyarrow as pa
        rows = np.asarray(rows, dtype=np.int64)
        if self.array is not None:
            return self.array.take(pa.array(rows)).to_pylist()
        import pyarrow.parquet as pq
        order = np.argsort(rows, kind="stable")
        srt, out, start = rows[order], [None] * len(rows), 0
        got = []
        for f in self.files:
            pf = pq.ParquetFile(f)
            if self.column not in pf.schema_arrow.names:            # an optional column this file lacks
                n = pf.metadata.num_rows
                lo, hi = np.searchsorted(srt, [start, start + n])
                got += [""] * int(hi - lo)
                start += n
                continue
            for batch in pf.iter_batches(columns=[self.column], batch_size=1 << 16):
                n = batch.num_rows
                lo, hi = np.searchsorted(srt, [start, start + n])
                if hi > lo:
                    got += texts(batch.column(0), self.nullable).take(pa.array(srt[lo:hi] - start)).to_pylist()
                start += n
        for k, i in enumerate(order):
            out[i] = got[k]
        return out

    def subset(self, rows) -> "Texts":
        import pyarrow as pa
        return Texts(pa.array(self.take(rows), pa.string()))


def lazy_parquet_texts(files: list[Path], column: str) -> bool:
    """Whether the completion column can stay in the Parquet files: True when every file stores it as strings
    with no nulls (from the footers' statistics where they have them, else read batch by batch); False when a file
    stores lists of tokens or cannot be read (it is read whole); Unusual at a null."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    for f in files:
        try:
            pf = pq.ParquetFile(f)
        except Exception:  # noqa: BLE001 - an unreadable file is the row reader's to name
            return False
        schema = pf.schema_arrow
        if column not in schema.names:
            return False
        typ = schema.field(column).type
        typ = typ.value_type if pa.types.is_dictionary(typ) else typ
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            return False
        i, md = schema.get_field_index(column), pf.metadata
        stats = [md.row_group(g).column(i).statistics for g in range(md.num_row_groups)]
        if all(st is not None and st.has_null_count for st in stats):
            nulls = any(st.null_count for st in stats)
        else:
            nulls = any(b.column(0).null_count for b in pf.iter_batches(columns=[column], batch_size=1 << 16))
        if nulls:
            raise Unusual("null completion")
    return True
