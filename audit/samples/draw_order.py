"""What draw-gold and the rounds design share: the record's kind and place, each cell's seeded random order (the
order every draw takes a cell's rows in), and the file the experts fill in."""
from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import numpy as np

RECORD_KIND = "audit.samples draw-gold"


def record_path(gold_path) -> Path:
    """Where draw-gold puts the record of a draw written to `gold_path`: TO_LABEL.draw.json beside TO_LABEL.csv."""
    p = Path(gold_path)
    return p.with_name(p.stem + ".draw.json")


def cell_seed(seed: int, run: str, family: str) -> list[int]:
    """The seed of one cell's order: --seed and a hash of the cell's name (stable across Python processes)."""
    h = hashlib.sha256(f"{run}\x00{family}".encode()).digest()
    return [seed, int.from_bytes(h[:8], "big")]


def rows_text(rows: list[dict], fmt: str) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    return buf.getvalue()


def positions(table, seed: int) -> np.ndarray:
    """Every row's 1-based position in its cell's seeded random order (the order draw-gold draws in)."""
    pos = np.zeros(len(table.proxy), np.int64)
    for (run, fam), rows in table.cells.items():
        if len(rows):
            order = np.random.default_rng(cell_seed(seed, run, fam)).permutation(len(rows))
            pos[rows[order]] = np.arange(1, len(rows) + 1)
    return pos


def rows_between(table, pos: np.ndarray, before: dict, after: dict) -> np.ndarray:
    """Row indices at positions before[c] < p <= after[c] of every cell c, in cell order then position order."""
    out = []
    for c, rows in table.cells.items():
        lo, hi = before.get(c, 0), after.get(c, 0)
        if hi > lo:
            sel = rows[(pos[rows] > lo) & (pos[rows] <= hi)]
            out.append(sel[np.argsort(pos[sel])])
    return np.concatenate(out) if out else np.zeros(0, np.int64)
