"""`python -m audit.samples --ray ADDRESS`: the samples table read and reduced on a Ray cluster with Ray Data, so a
100M-row log is a cluster job. What comes back is what the claims read (audit.samples.cells): every gold row, the
unlabelled rows of cells with at most KEEP_UNLABELLED of them, and of larger cells their statistics and the stress's
subsample -- the same reduced table, to the bit, as `cells.reduce` makes of the whole table on this machine.

Two passes over the dataset's blocks (Ray Data reads the file or the directory of shards, in order; each block is a
Ray task): the first validates each block with the local fast reader's checks (audit.samples.columns), counts every
cell's rows and sums its proxy exactly, and returns the gold rows (the gold table is read here: it is small and
never leaves this machine); the second, given each cell's prediction line (fitted here on its gold rows), the
stress's subsample ranks and each block's offset among a cell's unlabelled rows, returns the rows to keep, each
large cell's exact moments of the prediction, and its Kolmogorov-Smirnov counts. sample_id's uniqueness over the
whole table is checked by a shuffle of the ids over partitions (one Ray task per partition). A table the fast
reader would not take is refused with the reason; run without
--ray to have its file, line and column named.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from audit.core import exact_sums
from . import cells as kept, columns
from .rows import SAMPLE_COLUMNS, TableError, generation_by_run
from .table import Table, check

KEYS = ("sample_id", "run", "family", "prompt_id", "completion", "proxy_reward", "step", "superseded", "generation")


def _block(b, names: dict, gold_ids, unique_ids_checked: bool = False) -> dict:
    """A block's columns under the schema's names, validated as the fast reader does; is_gold per row. The second
    pass reads blocks the first has checked: it skips the sort that finds a duplicate id."""
    import pyarrow.compute as pc
    c = {k: b[names[k]] for k in KEYS if names.get(k) in b.column_names}
    # a resumed run's superseded rows and rows without a proxy are read by this machine's reader, which leaves
    # the first out and certifies the second's cells from gold alone (audit.samples.table, .estimates)
    if "superseded" in c and columns.flags(c["superseded"]).any():
        raise columns.Unusual("superseded rows (a resumed run's log) are not read on Ray")
    if c["proxy_reward"].null_count:
        raise columns.Unusual("rows without a proxy_reward (null) are not read on Ray")
    out = {"sample_id": columns.ids(c["sample_id"]), "run": columns.ids(c["run"]),
           "family": columns.ids(c["family"]), "prompt_id": columns.ids(c["prompt_id"]),
           "completion": columns.texts(c["completion"]), "proxy": columns.numbers(c["proxy_reward"]),
           "step": columns.numbers(c["step"], allow_null=True) if "step" in c else None,
           "generation": c.get("generation")}
    if not unique_ids_checked and not columns.distinct(out["sample_id"]):
        raise columns.Unusual("duplicate sample_id")
    out["is_gold"] = pc.is_in(out["sample_id"], value_set=gold_ids).to_numpy(zero_copy_only=False)
    return out


def _cells_of(v: dict):
    """(the block's cells as (run, family) names; each row's index into them; the runs in order of first
    appearance)."""
    import pyarrow.compute as pc
    r, f = pc.dictionary_encode(v["run"]), pc.dictionary_encode(v["family"])
    rn, fn = r.dictionary.to_pylist(), f.dictionary.to_pylist()
    key = r.indices.to_numpy().astype(np.int64) * len(fn) + f.indices.to_numpy()
    uniq, inv = np.unique(key, return_inverse=True)
    names = [(rn[k // len(fn)], fn[k % len(fn)]) for k in uniq]
    return names, inv, rn


def _rows(v: dict, sel: np.ndarray, block: int):
    import pyarrow as pa
    t = {k: v[k].filter(pa.array(sel)) for k in ("sample_id", "run", "family", "prompt_id", "completion")}
    t.update(proxy=v["proxy"][sel], step=None if v["step"] is None else v["step"][sel],
             pos=np.flatnonzero(sel), block=np.full(int(sel.sum()), block))
    return t


def _partition(ids, parts: int) -> np.ndarray:
    """A partition in [0, parts) per id, from its bytes (equal ids, equal partitions): the uniqueness check's
    shuffle key (pyarrow has no string hash kernel)."""
    import pyarrow as pa
    ids = pa.array(ids.to_pylist(), pa.string()) if ids.offset else ids
    off = np.frombuffer(ids.buffers()[1], np.int32)[: len(ids) + 1]
    data = np.frombuffer(ids.buffers()[2], np.uint8)[: off[-1]].astype(np.uint64)
    weights = (np.arange(len(data), dtype=np.uint64) - np.repeat(off[:-1], np.diff(off)).astype(np.uint64)) * 131 + 7
    h = np.add.reduceat(data * weights, off[:-1]) if len(ids) else np.zeros(0, np.uint64)
    return ((h + np.diff(off).astype(np.uint64)) % np.uint64(parts)).astype(np.int64)


def _first_pass(b, names: dict, gold_ids, block: int, parts: int):
    """(the block's counts, sums and gold rows; then its sample_ids split into `parts` partitions)."""
    import pyarrow as pa
    try:
        v = _block(b, names, gold_ids)
    except columns.Unusual as e:
        return ({"unusual": str(e)},) + (pa.array([], pa.string()),) * parts
    cell_names, inv, runs = _cells_of(v)
    n_all = np.bincount(inv, minlength=len(cell_names))
    n_gold = np.bincount(inv, weights=v["is_gold"], minlength=len(cell_names)).astype(int)
    s1 = exact_sums.sums(v["proxy"], inv, len(cell_names))
    key = _partition(v["sample_id"], parts)
    from .table import _generation
    gen = {} if v["generation"] is None else _generation(v["run"], v["generation"])
    return (({"n": len(v["proxy"]), "runs": runs, "has_step": v["step"] is not None, "generation": gen,
              "cells": {c: (int(n_all[k]), int(n_gold[k]), s1[k]) for k, c in enumerate(cell_names)},
              "gold": _rows(v, v["is_gold"], block)},)
            + tuple(v["sample_id"].filter(pa.array(key == p)) for p in range(parts)))


def _duplicate(*pieces):
    """A sample_id found twice among the pieces of one partition, or None."""
    import pyarrow as pa
    import pyarrow.compute as pc
    ids = pa.chunked_array(pieces, type=pa.string()).combine_chunks()
    if len(ids) < 2:
        return None
    srt = ids.take(pc.sort_indices(ids))
    same = np.flatnonzero(pc.equal(srt.slice(1), srt.slice(0, len(srt) - 1)).to_numpy(zero_copy_only=False))
    return srt[int(same[0])].as_py() if len(same) else None


def _second_pass(b, names: dict, gold_ids, block: int, plan: dict, offsets: dict) -> dict:
    v = _block(b, names, gold_ids, unique_ids_checked=True)
    cell_names, inv, _ = _cells_of(v)
    keep = np.zeros(len(v["proxy"]), bool)
    stats = {}
    for k, c in enumerate(cell_names):
        u = np.flatnonzero((inv == k) & ~v["is_gold"])
        p = plan[c]
        if p is None:                       # a small cell: every unlabelled row
            keep[u] = True
            continue
        if p.get("too_few_gold"):           # refused by the design check: counted, nothing more
            continue
        ranks = offsets.get(c, 0) + np.arange(len(u))
        keep[u[np.isin(ranks, p["ranks"])]] = True
        fu = v["proxy"][u]
        h = kept.predicted(fu, p["intercept"], p["slope"], p["lo"], p["hi"])
        srt = np.sort(fu)
        stats[c] = (exact_sums.moments(h)[0], np.searchsorted(srt, p["gold_proxy"], "left"),
                    np.searchsorted(srt, p["gold_proxy"], "right"))
    return {"rows": _rows(v, keep, block), "stats": stats}


def _read(ray, files: list[Path], fmt: str, names: dict):
    """The dataset of the samples files (in order), only the columns the audit reads."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import logging
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True      # blocks in the files' order: the table's row order
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    for h in logging.getLogger("ray.data").handlers:   # its progress lines on the console (its log file keeps them)
        if not isinstance(h, logging.FileHandler):
            h.setLevel(logging.ERROR)
    paths = [str(f) for f in files]
    if fmt == "parquet":
        ds = ray.data.read_parquet(paths)
    elif fmt == "jsonl":
        ds = ray.data.read_json(paths)
    else:
        with open(files[0], "rb") as fh:
            header = fh.readline().decode("utf-8", "replace").rstrip("\r\n").split(",")
        ds = ray.data.read_csv(paths, convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in header}, strings_can_be_null=False))
    have = ds.schema().names
    want = [names[k] for k in KEYS if names[k] in have]
    missing = [names[k] for k in SAMPLE_COLUMNS if names[k] not in have]
    if missing:
        raise TableError([f"{files[0].parent if len(files) > 1 else files[0]}: missing column(s) "
                          f"{', '.join(missing)} (read on Ray)"])
    return ds.select_columns(want)


def load_on_ray(settings: dict, design) -> Table:
    """The reduced table of settings' samples and gold files, computed on the Ray cluster settings["ray"];
    `design`: its audit.samples.table.DesignConfig."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from audit.core.ray_cluster import connect
    from .estimates import gold_range
    mapping = dict(settings.get("mapping") or {})
    names = {k: mapping.get(k, k) for k in KEYS}
    sp, gp = Path(settings["samples"]), Path(settings["gold"])
    sfiles, sfmt, bad = columns.shard_files(sp)
    gfiles, gfmt, bad2 = columns.shard_files(gp)
    if bad or bad2:
        raise TableError([bad or bad2])
    refuse = lambda where, why: TableError([f"{where}: {why} (found on Ray; run without --ray to have the file, "  # noqa: E731
                                            "line and column named)"])
    try:
        gt = columns.read(gfiles, gfmt, [names["sample_id"], mapping.get("gold", "gold")])
        gid, gv = columns.ids(gt[names["sample_id"]]), columns.numbers(gt[mapping.get("gold", "gold")])
        if not columns.distinct(gid):
            raise columns.Unusual("duplicate gold id")
    except columns.Unusual as e:
        raise refuse(gp, e) from None
    if design.gold_range is not None and ((gv < design.gold_range[0]) | (gv > design.gold_range[1])).any():
        raise refuse(gp, f"a gold label outside --gold-range {design.gold_range[0]:g} {design.gold_range[1]:g}")
    t0 = time.perf_counter()
    say = lambda what: print(f"[samples] ray: {what} ({time.perf_counter() - t0:.1f} s)", flush=True)  # noqa: E731
    try:
        ray = connect(settings["ray"])
    except RuntimeError as e:
        raise TableError([str(e)]) from None
    say(f"connected to {settings['ray']}")
    try:
        blocks = _read(ray, sfiles, sfmt, names).to_arrow_refs()
        say(f"read {sp.name} into {len(blocks)} blocks")
        gold_ref, parts = ray.put(gid), max(1, min(len(blocks), 64))
        outs = [ray.remote(_first_pass).options(num_returns=parts + 1).remote(b, names, gold_ref, i, parts)
                for i, b in enumerate(blocks)]
        outs = [o if isinstance(o, list) else [o] for o in outs]
        dups = [ray.remote(_duplicate).remote(*[o[p + 1] for o in outs]) for p in range(parts)]
        first = ray.get([o[0] for o in outs])
        for r in first:
            if "unusual" in r:
                raise refuse(sp, r["unusual"])
        dup = next((d for d in ray.get(dups) if d is not None), None)
        if dup is not None:
            raise refuse(sp, f"sample_id {dup!r} occurs more than once")
        say("first pass: blocks validated, cells counted, gold rows joined, sample_ids unique")
        runs, counts, offsets = _merged(first)
        gold_rows = _concat([r["gold"] for r in first])
        if len(gold_rows["proxy"]) != len(gid):
            raise refuse(gp, f"{len(gid) - len(gold_rows['proxy'])} gold id(s) are not sample_ids of {sp.name}")
        families = sorted({f for _, f in counts})
        gvals = gv[pc.index_in(gold_rows["sample_id"], value_set=gid).to_numpy()]   # each gold row's label
        lo, hi = gold_range(gvals, design.gold_range)["range"]
        plan = _plan([(r, f) for r in runs for f in families], counts, gold_rows, gvals, lo, hi,
                     int(settings.get("seed", 0)), design.min_gold)
        plan_ref = ray.put(plan)
        second = ray.get([ray.remote(_second_pass).remote(b, names, gold_ref, i, plan_ref, offsets[i])
                          for i, b in enumerate(blocks)])
        say(f"second pass: {sum(p is not None for p in plan.values())} of {len(plan)} cells summarised")
    finally:
        ray.shutdown()
    rows = _concat([gold_rows] + [r["rows"] for r in second])
    at = np.lexsort((rows["pos"], rows["block"]))                     # the table's own row order
    rows = {k: (None if v is None else v.take(pa.array(at)) if isinstance(v, (pa.Array, pa.ChunkedArray)) else v[at])
            for k, v in rows.items()}
    summaries = {}
    for c, p in plan.items():
        if p is None:
            continue
        if p.get("too_few_gold"):
            summaries[c] = {"n_unlabelled": counts[c][0] - counts[c][1], "n_samples": counts[c][0]}
            continue
        parts = [s["stats"][c] for s in second if c in s["stats"]]
        h = parts[0][0]
        for m, _, _ in parts[1:]:
            h = h.merge(m)
        below, at_or = sum(p_[1] for p_ in parts), sum(p_[2] for p_ in parts)
        _, pvalue = kept.ks_from_counts(p["gold_proxy"], below, at_or, h.n)
        n, ng, s1 = counts[c]
        summaries[c] = kept.summary(n - ng, exact_sums.Moments(n, s1), h, p["intercept"], p["slope"], pvalue)
    t = _table(sp, gp, rows, gid, gv, runs, families, summaries, sum(r["n"] for r in first),
               all(r["has_step"] for r in first), int(settings.get("seed", 0)))
    # each run's distinct generation records over the blocks, in their order: the row reader's own merge
    pairs = [(run, g) for r in first for run, recs in r["generation"].items() for g in recs]
    t.generation = generation_by_run([run for run, _ in pairs], [g for _, g in pairs])
    problems: list[str] = []
    check(t, settings.get("reference"), design, problems)
    if problems:
        raise TableError(problems)
    return t


def _merged(first: list[dict]):
    """(runs in order of first appearance, per cell [rows, gold rows, exact proxy sum], per block the count of each
    cell's unlabelled rows in the blocks before it) from the first pass's results, in block order."""
    runs, counts, offsets, seen = [], {}, [], {}
    for r in first:
        runs += [x for x in r["runs"] if x not in runs]
        offsets.append(dict(seen))
        for c, (n, ng, s1) in r["cells"].items():
            a = counts.setdefault(c, [0, 0, 0])
            a[0], a[1], a[2] = a[0] + n, a[1] + ng, a[2] + s1
            seen[c] = seen.get(c, 0) + n - ng
    return runs, counts, offsets


def _plan(order: list, counts: dict, gold_rows: dict, gvals, lo: float, hi: float, seed: int,
          min_gold: int) -> dict:
    """Per cell (in the table's cell order): None to keep every unlabelled row, else what the second pass needs to
    summarise it -- the prediction line fitted on its gold rows, the stress subsample's ranks, the sorted gold
    proxies (the KS counts) -- or, for a large cell with fewer than min_gold gold rows (which the design check
    refuses), too_few_gold: its counts only."""
    cell_of = list(zip(gold_rows["run"].to_pylist(), gold_rows["family"].to_pylist()))
    n_unl = [counts[c][0] - counts[c][1] if c in counts else 0 for c in order]
    plan = {}
    for c, n, rk in zip(order, n_unl, kept.subsample_ranks(n_unl, seed)):
        if n <= kept.KEEP_UNLABELLED:
            plan[c] = None
            continue
        sel = np.array([x == c for x in cell_of], bool)
        y, f = gvals[sel], gold_rows["proxy"][sel]
        if len(y) < max(2, min_gold):
            plan[c] = {"too_few_gold": True}
            continue
        a, b = kept.prediction(y, f, lo, hi)
        plan[c] = {"intercept": a, "slope": b, "lo": lo, "hi": hi, "ranks": rk, "gold_proxy": np.sort(f)}
    return plan


def _concat(parts: list[dict]) -> dict:
    import pyarrow as pa
    out = {}
    for k in parts[0]:
        vals = [p[k] for p in parts]
        if any(v is None for v in vals):
            out[k] = None
        elif isinstance(vals[0], (pa.Array, pa.ChunkedArray)):
            out[k] = pa.chunked_array(vals, type=vals[0].type).combine_chunks()
        else:
            out[k] = np.concatenate(vals)
    return out


def _table(sp, gp, rows: dict, gid, gv, runs, families, summaries, n_rows, has_step, seed) -> Table:
    import pyarrow as pa
    import pyarrow.compute as pc
    sid = rows["sample_id"]
    gold = np.full(len(sid), np.nan)
    found = pc.is_in(sid, value_set=gid).to_numpy(zero_copy_only=False)
    gold[found] = gv[pc.index_in(sid.filter(pa.array(found)), value_set=gid).to_numpy()]   # pyarrow < 15 takes no numpy mask
    run_code = np.array([runs.index(r) for r in rows["run"].to_pylist()], np.int32)
    fam_at = {f: k for k, f in enumerate(families)}
    family_code = np.array([fam_at[f] for f in rows["family"].to_pylist()], np.int32)
    prompt_code, prompts = columns.categorical(rows["prompt_id"])
    return Table(str(sp), str(gp), sid, run_code, family_code, prompt_code, columns.Texts(rows["completion"]),
                 rows["proxy"], gold, rows["step"] if has_step else None, runs, families, prompts,
                 summaries=summaries, n_rows=n_rows, kept_for_seed=seed)
