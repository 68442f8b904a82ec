"""python -m world.samples_table --rows N --out DIR [--seed S]: a seeded synthetic samples table at log scale, for
the samples door's scale bench (world/experiments/samples_scale.py) and its tests. No model, no world: every
run x family cell has a true quality, every row a latent quality around it, a binary expert label drawn from the
latent quality (the gold rows: a simple random subset of each cell), and a proxy reward that is the latent
quality plus noise, rescaled per family (what a reward model's logits look like). Completions are short
whitespace-separated token strings whose token mix follows the latent quality, so the gamed-token stress has
something to reward.

    DIR/samples.parquet (or .jsonl/.csv by --format; --shards K writes DIR/samples/part-00000.parquet ...)
    DIR/gold.parquet          sample_id, gold
    DIR/truth.json            the cells' true qualities (the table's design, not read by the audit)

Written in chunks of --chunk rows, so 10M rows take a few hundred MB of memory, not the table's size.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rlhf.atomic import atomic_dir
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg

VOCAB = [f"w{i:02d}" for i in range(24)]


@dataclass
class TableConfig:
    rows: int = 100_000
    runs: int = 10
    families: int = 10
    gold_per_cell: int = 60
    tokens: int = 12              # tokens per completion
    seed: int = 0
    format: str = "parquet"       # parquet | jsonl | csv
    shards: int = 0               # 0: one file; K: about K files DIR/samples/part-*.{format} (one a chunk at least)
    chunk: int = 500_000          # rows generated and written at a time


def cell_truth(cfg: TableConfig) -> np.ndarray:
    """(runs, families) true qualities: the reference (run 0) mid-range, other runs spread above and below,
    a few cells near 0 and 1 (where intervals are tested hardest)."""
    rng = np.random.default_rng([cfg.seed, 1])
    base = rng.uniform(0.3, 0.7, cfg.families)
    shift = np.concatenate([[0.0], rng.uniform(-0.25, 0.3, cfg.runs - 1)])
    q = np.clip(base[None, :] + shift[:, None] + rng.normal(0, 0.05, (cfg.runs, cfg.families)), 0.01, 0.99)
    return q


def _chunks(cfg: TableConfig):
    """(first row, run index, family index, latent quality, gold label, proxy, token ids) per chunk; the cell of
    row i is i // cell_rows, so every cell has cell_rows rows (the last cell takes the remainder)."""
    n_cells = cfg.runs * cfg.families
    cell_rows = cfg.rows // n_cells
    q = cell_truth(cfg).ravel()
    fam_scale = np.random.default_rng([cfg.seed, 2]).uniform(0.8, 1.25, cfg.families)   # one common scale, jittered
    for start in range(0, cfg.rows, cfg.chunk):
        stop = min(cfg.rows, start + cfg.chunk)
        rng = np.random.default_rng([cfg.seed, 3, start])
        i = np.arange(start, stop)
        cell = np.minimum(i // cell_rows, n_cells - 1)
        run, fam = cell // cfg.families, cell % cfg.families
        k = 8.0                                   # latent quality ~ Beta with mean q, concentration k
        latent = rng.beta(q[cell] * k, (1 - q[cell]) * k)
        gold = (rng.random(len(i)) < latent).astype(np.float64)
        proxy = fam_scale[fam] * (latent + rng.normal(0, 0.15, len(i)))
        # token mix: better completions use more of the first half of the vocabulary
        good = rng.random((len(i), cfg.tokens)) < latent[:, None]
        tok = np.where(good, rng.integers(0, 12, (len(i), cfg.tokens)), rng.integers(12, 24, (len(i), cfg.tokens)))
        yield start, run, fam, gold, proxy, tok


def gold_rows(cfg: TableConfig) -> np.ndarray:
    """Row numbers of the gold subset: a simple random subset of gold_per_cell rows in every cell."""
    n_cells = cfg.runs * cfg.families
    cell_rows = cfg.rows // n_cells
    rng = np.random.default_rng([cfg.seed, 4])
    out = []
    for c in range(n_cells):
        lo, hi = c * cell_rows, (cfg.rows if c == n_cells - 1 else (c + 1) * cell_rows)
        out.append(lo + rng.choice(hi - lo, min(cfg.gold_per_cell, hi - lo), replace=False))
    return np.sort(np.concatenate(out))


def generate(cfg: TableConfig, out: Path) -> dict:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    if cfg.rows < cfg.runs * cfg.families * 2:
        raise ValueError(f"--rows {cfg.rows}: expected at least 2 rows per cell ({cfg.runs} x {cfg.families})")
    vocab = np.array(VOCAB, dtype=object)
    gsel = gold_rows(cfg)
    gold_ids, gold_vals = [], []
    with atomic_dir(out) as tmp:
        tmp = Path(tmp)
        ext = {"parquet": "parquet", "jsonl": "jsonl", "csv": "csv"}[cfg.format]
        if cfg.shards:
            (tmp / "samples").mkdir()
        writer, part = None, 0
        for start, run, fam, gold, proxy, tok in _chunks(cfg):
            n = len(run)
            ids = np.char.add("s", np.arange(start, start + n).astype(str)).astype(object)
            comp = [" ".join(r) for r in vocab[tok]]
            tab = pa.table({"sample_id": pa.array(ids, pa.string()),
                            "run": pa.array(np.where(run == 0, "reference", np.char.add("run", run.astype(str))),
                                            pa.string()),
                            "family": pa.array(np.char.add("fam", fam.astype(str)), pa.string()),
                            "prompt_id": pa.array(np.char.add("p", (np.arange(start, start + n) % 997).astype(str)),
                                                  pa.string()),
                            "completion": pa.array(comp, pa.string()),
                            "proxy_reward": pa.array(proxy, pa.float64())})
            g = gsel[(gsel >= start) & (gsel < start + n)] - start
            gold_ids.append(ids[g]), gold_vals.append(gold[g])
            if cfg.shards:
                # each chunk as K / (number of chunks) consecutive part files, at least one: about K shards,
                # the rows in order across them (a logger rolling its file over)
                n_chunks = -(-cfg.rows // cfg.chunk)
                for piece in _split(tab, max(1, cfg.shards // n_chunks)):
                    _write(piece, tmp / "samples" / f"part-{part:05d}.{ext}", cfg.format, pq, pacsv)
                    part += 1
                continue
            path = tmp / f"samples.{ext}"
            if cfg.format == "parquet":
                writer = writer or pq.ParquetWriter(path, tab.schema)
                writer.write_table(tab)
            else:
                _write(tab, path, cfg.format, pq, pacsv, append=start > 0)
        if writer is not None:
            writer.close()
        gtab = pa.table({"sample_id": pa.array(np.concatenate(gold_ids), pa.string()),
                         "gold": pa.array(np.concatenate(gold_vals), pa.float64())})
        pq.write_table(gtab, tmp / "gold.parquet")
        q = cell_truth(cfg)
        truth = {"config": asdict(cfg), "reference": "reference",
                 "cells": {("reference" if r == 0 else f"run{r}"): {f"fam{f}": float(q[r, f])
                                                                    for f in range(cfg.families)}
                           for r in range(cfg.runs)}}
        (tmp / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def _split(tab, k):
    step = -(-tab.num_rows // k)
    return [tab.slice(i, step) for i in range(0, tab.num_rows, step)]


def _write(tab, path, fmt, pq, pacsv, append=False):
    if fmt == "parquet":
        pq.write_table(tab, path)
    elif fmt == "csv":
        with open(path, "ab" if append else "wb") as fh:
            pacsv.write_csv(tab, fh, pacsv.WriteOptions(include_header=not append))
    else:
        cols = tab.to_pydict()
        names = list(cols)
        with open(path, "a" if append else "w") as fh:
            for i in range(tab.num_rows):
                fh.write(json.dumps({k: cols[k][i] for k in names}) + "\n")


def samples_path(out: Path, cfg: TableConfig) -> Path:
    return out / "samples" if cfg.shards else out / f"samples.{cfg.format}"


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.samples_table", description=first_paragraph(__doc__))
    ap.add_argument("--rows", type=positive_int, default=TableConfig.rows)
    ap.add_argument("--runs", type=positive_int, default=TableConfig.runs)
    ap.add_argument("--families", type=positive_int, default=TableConfig.families)
    ap.add_argument("--gold-per-cell", type=positive_int, default=TableConfig.gold_per_cell)
    ap.add_argument("--format", choices=["parquet", "jsonl", "csv"], default="parquet")
    ap.add_argument("--shards", type=int, default=0, help="write about K shards DIR/samples/part-*.FORMAT, at least one per 500,000-row chunk (0: one file)")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cfg = TableConfig(rows=a.rows, runs=a.runs, families=a.families, gold_per_cell=a.gold_per_cell,
                      format=a.format, shards=a.shards, seed=a.seed)
    print(json.dumps(asdict(cfg)), flush=True)
    generate(cfg, Path(a.out))
    print(f"wrote {samples_path(Path(a.out), cfg)} and {Path(a.out) / 'gold.parquet'}", flush=True)
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
