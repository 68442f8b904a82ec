"""python -m world.experiments.rounds_looks --looks 20,40,60,100,150,200: the other rounds design, measured on the
release-rule tables of rounds_coverage (world.experiments.rounds_tables) -- *declared looks* instead of a
confidence sequence (docs/intervals.md, "Declared looks"): what the door's default rounds design
(audit.samples.looks_audit, draw-gold --rounds) buys, measured before it was built, with the same intervals.

A cell may be labelled only up to counts in a schedule declared with the draw (the looks); a sum of cells (a family's
change, a balanced figure, a pair of runs) is read on the first m labels of each of its cells, m its cells' smallest
count, so it is seen at most once per look. At look k the door's own fixed-n interval is taken at confidence
1 - alpha_k with sum_k alpha_k = 0.05: by the union bound every quantity's intervals at all looks cover together with
probability >= 0.95 whatever the door's fixed intervals' own coverage allows, so any stopping rule and any allocation
of rounds to cells (each only chooses among the declared looks) keeps the final interval valid. One look is the fixed
design: today's intervals exactly.

Designs compared on the same rows (rounds where a label can still change a verdict, audit.samples.decisions, as the
rounds_coverage tables): `looks, equal alpha` (alpha_k = 0.05 / K); `looks, alpha by n` (alpha_k in proportion to the
look's count: later looks narrower); `peeking at 95%` -- the fixed 95% interval at every look, stopped at the first
settled: NOT valid (each look spends 5%), the floor any design built on the door's fixed intervals pays in labels;
and the fixed design at 100 a cell. Seeded; prints a markdown table (and --out FILE keeps it with the config).
"""
from __future__ import annotations

import itertools
import json
import time

import numpy as np

from audit.core import bounded
from audit.samples.decisions import Evidence
from audit.samples.looks_audit import intersect
from audit.samples.estimates import combine
from rlhf.atomic import atomic_write_text
from rlhf.cli import Parser, positive_int, seed_arg
from rlhf.errors import InputError, run_cli
from world.experiments.rounds_tables import GAIN_LOWER, MARGIN, MIN_GAIN, _decide, cell_data, exact, table_spec

FIXED_N = 100
DOOR = "looks, equal alpha, intersected (the door's)"


def designs(looks: tuple) -> dict:
    K, w = len(looks), np.asarray(looks, float)
    return {"looks, equal alpha": [0.05 / K] * K, "looks, alpha by n": list(0.05 * w / w.sum()),
            "peeking at 95% (not valid)": [0.05] * K}


def _evidence(ci: dict, i: int, threshold: float) -> Evidence:
    one = lambda v: np.array([v])                                   # noqa: E731
    return Evidence.from_interval(one(ci["estimate"][i]), one(ci["ci95"][0][i]), one(ci["ci95"][1][i]), threshold)


def run_table(spec: dict, reps: int, seed: int, looks: tuple, draws: int) -> dict:
    rng = np.random.default_rng([seed, 4849, spec["index"]])          # the rows rounds_tables draws for this table
    means = {"reference": spec["reference"], **{r: v["means"] for r, v in spec["runs"].items()}}
    data = {(r, f): cell_data(spec["label_kind"], means[r][f], spec["rho"][f], reps, spec["pool"], rng)
            for r in means for f in range(6)}
    truth, cands = exact(spec), list(spec["runs"])
    fam = {(r, f): [(1.0, (r, f)), (-1.0, ("reference", f))] for r in cands for f in range(6)}
    bal = {r: [(1 / 6, (r, f)) for f in range(6)] + [(-1 / 6, ("reference", f)) for f in range(6)] for r in cands}
    pair = {(a, b): [(1 / 6, (a, f)) for f in range(6)] + [(-1 / 6, (b, f)) for f in range(6)]
            for a, b in itertools.permutations(cands, 2)}

    def intervals(n: int, levels: list[float]) -> list[dict]:
        parts = {c: bounded.ppi_cells(y[:, :n], fx[:, :n], fx[:, n:], 0.0, 1.0, seed=seed,
                                      key=("rounds-looks", spec["index"], c, n), draws=draws) for c, (y, fx) in data.items()}
        out = []
        for conf in levels:
            ci = lambda terms: combine([(w, parts[c].parts) for w, c in terms], conf)   # noqa: E731
            out.append({"fam": {q: ci(t) for q, t in fam.items()}, "bal": {r: ci(t) for r, t in bal.items()},
                        "pair": {q: ci(t) for q, t in pair.items()}})
        return out

    plans = designs(looks)
    per_look = [intervals(n, [1 - plans[d][k] for d in plans]) for k, n in enumerate(looks)]
    fixed = intervals(FIXED_N, [0.95])[0]
    door = _intersected([per_look[k][0] for k in range(len(looks))])     # equal alpha, as the door reads it
    rows = []
    for i in range(reps):
        row = {}
        for j, d in enumerate(plans):
            row[d] = _stopped(lambda k: per_look[k][j], i, looks, cands, truth)
        row[DOOR] = _stopped(lambda k: door[k], i, looks, cands, truth)
        row["fixed 100"] = _stopped(lambda k: fixed, i, (FIXED_N,), cands, truth)
        rows.append(row)
    return {"spec": spec, "exact": {r: v["passes"] for r, v in truth.items()}, "rows": rows}


def _intersected(seq: list[dict]) -> list[dict]:
    """Each quantity's interval at look k intersected with its intervals at the looks before, as the door reads it
    (audit.samples.looks_audit.intersect)."""
    out = []
    for k, now in enumerate(seq):
        d = {}
        for part, cis in now.items():
            d[part] = {}
            for q, ci in cis.items():
                lo, hi = intersect([seq[j][part][q]["ci95"] for j in range(k + 1)])
                d[part][q] = {"estimate": np.clip(ci["estimate"], lo, hi), "ci95": [lo, hi]}
        out.append(d)
    return out


def _stopped(at, i, looks, cands, truth) -> dict:
    """Replicate i labelled look by look where a label can still change an open verdict; its state when it stops."""
    idx = {("reference", f): 0 for f in range(6)} | {(r, f): 0 for r in cands for f in range(6)}
    lock = lambda cells: min(idx[c] for c in cells)                  # noqa: E731
    while True:
        ev = {"family": {r: {f: _evidence(at(lock([(r, f), ("reference", f)]))["fam"][(r, f)], i, MARGIN)
                             for f in range(6)} for r in cands}, "balanced_ci": {}, "gain": {}}
        for r in cands:
            b = at(lock([(r, f) for f in range(6)] + [("reference", f) for f in range(6)]))["bal"][r]
            ev["balanced_ci"][r], ev["gain"][r] = _evidence(b, i, GAIN_LOWER), _evidence(b, i, MIN_GAIN)
        ev["separated"] = lambda a, b: np.array([at(lock([(a, f) for f in range(6)] + [(b, f) for f in range(6)]))
                                                 ["pair"][(a, b)]["ci95"][0][i] > 0])
        state = _decide(ev, cands)
        plan = {c for r in cands for c in state["cells"][r][0] if idx[c] < len(looks) - 1}
        if not plan:
            break
        for c in plan:
            idx[c] += 1
    covers = []
    for r in cands:
        for f in range(6):
            ci = at(lock([(r, f), ("reference", f)]))["fam"][(r, f)]
            covers.append(ci["ci95"][0][i] <= truth[r]["deltas"][f] <= ci["ci95"][1][i])
    return {"labels": int(sum(looks[k] for k in idx.values())),
            "run_labels": {r: sum(looks[idx[(r, f)]] for f in range(6)) / 6 for r in cands},
            "passes": {r: bool(state["verdicts"][r]["passes"][0]) for r in cands},
            "settled": {r: bool(state["verdicts"][r]["settled"][0]) for r in cands},
            "family_cover": float(np.mean(covers))}


def summarise(tables: list[dict]) -> str:
    names = list(tables[0]["rows"][0])
    lines = ["| design | median labels / fixed-100's (tables where it settles every verdict) | verdicts fixed-100 settles "
             "left open | settled passes that are unsafe | family-change coverage at the stop | labels a cell by run "
             "kind |", "|---|---|---|---|---|---|"]
    for d in names:
        ratios, settled_fixed, left_open, unsafe, cover, kinds = [], 0, 0, 0, [], {}
        for t in tables:
            per = []
            for row in t["rows"]:
                x, fx = row[d], row["fixed 100"]
                cover.append(x["family_cover"])
                for r in fx["settled"]:
                    settled_fixed += fx["settled"][r]
                    left_open += fx["settled"][r] and not x["settled"][r]
                    unsafe += x["settled"][r] and x["passes"][r] and not t["exact"][r]
                    kinds.setdefault(t["spec"]["runs"][r]["kind"], []).append(x["run_labels"][r])
                if all(fx["settled"].values()):
                    per.append(x["labels"] / fx["labels"])
            if per:
                ratios.append(float(np.mean(per)))
        med = f"{np.median(ratios):.3f} ({len(ratios)} tables)" if ratios else "n/a"
        lines.append(f"| {d} | {med} | {left_open} of {settled_fixed} | {unsafe} | {np.mean(cover):.3f} | "
                     + ", ".join(f"{k} {np.mean(v):.0f}" for k, v in sorted(kinds.items())) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.rounds_looks", description=__doc__.splitlines()[0])
    ap.add_argument("--looks", default="20,40,60,100,150,200", help="declared label counts a cell (ascending)")
    ap.add_argument("--reps", type=positive_int, default=50)
    ap.add_argument("--tables", type=positive_int, default=40)
    ap.add_argument("--draws", type=positive_int, default=bounded.DRAWS, help="the fixed intervals' draws")
    ap.add_argument("--out", default=None, help="write the table and the config here (markdown)")
    ap.add_argument("--seed", type=seed_arg, default=0)
    a = ap.parse_args(argv)
    try:
        looks = tuple(int(v) for v in a.looks.split(","))
    except ValueError:
        raise InputError(f"--looks: expected ascending integers separated by commas, got {a.looks!r}")
    if not looks or any(v < 1 for v in looks) or list(looks) != sorted(set(looks)):
        raise InputError(f"--looks: expected ascending positive integers, got {a.looks!r}")
    t0, tables = time.time(), []
    for j in range(a.tables):
        tables.append(run_table(table_spec(a.seed, j), a.reps, a.seed, looks, a.draws))
        print(f"[rounds_looks] table {j + 1}/{a.tables} ({time.time() - t0:.0f}s)", flush=True)
    md = summarise(tables)
    print(md)
    if a.out:
        atomic_write_text(a.out, f"config: {json.dumps(vars(a))}\n\n{md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.rounds_looks"))
