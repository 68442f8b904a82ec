"""python -m world.experiments.rounds_coverage grid|tables --out DIR: the samples door's rounds design (label in rounds
until decided, audit.core.sequential) measured against its fixed design (docs/intervals.md, "Labelling in rounds").

grid    the coverage grid of interval_coverage replayed with a look after every round: label kind x true mean x
        pool rows per cell (100, 10,000; the cell's rows beyond the cap of 200) x proxy correlation, `--reps`
        replicates of six cells with that mean, labels drawn in rounds of 10 up to 200 a cell. Per quantity (cell,
        balanced, delta, balanced_delta, as interval_coverage): the share of sequences that cover the truth at every
        look (the worst stopping rule there is), the coverage of the final interval when the labelling stops at the
        first round that settles "above truth - 0.05?" (or at 200), with the proxy and gold only; and median widths
        at 25/50/100/200 labels against the door's fixed-n interval at the same n.
tables  release-rule tables: a reference and four candidate runs x six families, true changes drawn near and far
        from the rule's thresholds (docs/intervals.md says how), labelled in rounds of 10 up to 200 a cell where a
        label can still change a decision (audit.samples.decisions) and stopped when every decision is settled,
        against the fixed design at 25, 50 and 100 labels a cell on the same rows: labels spent, decisions made and
        settled, unsafe passes, coverage of the final intervals.

Seeded and rerunnable (every figure from --seed); resumable (one line a grid point / table in DIR/*.jsonl).
"""
from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

from audit.core import bounded, sequential as seq
from audit.samples.estimates import combine
from rlhf.cli import Parser, positive_int, seed_arg
from rlhf.errors import InputError, run_cli
from world.experiments.interval_coverage import CONFIDENCE, KINDS, MEANS, RHOS, parse_shard, threshold
from world.experiments.rounds_tables import CAP, LOOKS, POOLS, cell_data, run_table, summarise_tables, table_spec, \
    tables_markdown

CHUNK = 250
WIDTH_AT = (25, 50, 100, 200)
QUANTITIES = ("cell", "balanced", "delta", "balanced_delta")


# ------------------------------------------------------------------------------------------------ the grid
def grid_points() -> list[dict]:
    return [{"kind": k, "mean": m, "pool": p, "rho": r} for k, m, p, r in itertools.product(KINDS, MEANS, POOLS, RHOS)]


def _stop_look(s: seq.Sum, tau) -> np.ndarray:
    """Per replicate, the index into LOOKS of the first look at which "above tau?" is settled (the last if never)."""
    above, below = s.rejected(tau, LOOKS)
    settled = above | below
    return np.where(settled.any(1), settled.argmax(1), len(LOOKS) - 1)


def run_point(p: dict, index: int, reps: int, seed: int, width_reps: int, draws: int) -> dict:
    rng = np.random.default_rng([seed, 48, index])
    kind, mu, pool, rho = p["kind"], p["mean"], p["pool"], p["rho"]
    truth = {"cell": mu, "balanced": mu, "delta": 0.0, "balanced_delta": 0.0}
    combos = {"balanced": [(1 / 6, c) for c in range(6)], "delta": [(1.0, 0), (-1.0, 1)],
              "balanced_delta": [(1 / 3, 0), (1 / 3, 1), (1 / 3, 2), (-1 / 3, 3), (-1 / 3, 4), (-1 / 3, 5)]}
    tally = {v: {q: {"uniform": 0, "stopped": 0, "n": 0, "labels_at_stop": 0} for q in QUANTITIES}
             for v in ("proxy", "gold")}
    widths = {v: {q: {n: [] for n in WIDTH_AT} for q in QUANTITIES} for v in ("proxy", "gold", "door")}
    lams = {}
    done = 0
    for start in range(0, reps, CHUNK):
        r = min(CHUNK, reps - start)
        data = [cell_data(kind, mu, rho, r, pool, rng) for _ in range(6)]
        tracks = [seq.track(y[:, :CAP], f[:, :CAP], f[:, CAP:], 0.0, 1.0, CAP) for y, f in data]
        sums = {q: [] for q in QUANTITIES}
        for c in range(6):
            sums["cell"].append([(1.0, c)])
        for q, terms in combos.items():
            sums[q].append(terms)
        for q, term_sets in sums.items():
            for terms in term_sets:
                for v in ("proxy", "gold"):
                    s = seq.prepare([(w, tracks[c]) for w, c in terms], gold_only=(v == "gold"))
                    if v == "proxy" and s.lam.shape[1]:
                        lams.setdefault(q, []).append(s.lam)
                    below_t, above_t = s.rejected(truth[q], LOOKS)
                    miss = below_t | above_t                 # the truth shown outside the interval at that look
                    stop = _stop_look(s, truth[q] - 0.05)
                    t = tally[v][q]
                    t["uniform"] += int((~miss.any(1)).sum())
                    t["stopped"] += int((~miss[np.arange(r), stop]).sum())
                    t["labels_at_stop"] += int((np.array(LOOKS)[stop]).sum())
                    t["n"] += r
                    if done < width_reps:
                        k = min(width_reps - done, r)
                        sub = [(w, _head(tracks[c], k)) for w, c in terms]
                        b = seq.prepare(sub, gold_only=(v == "gold")).bounds(WIDTH_AT)
                        for j, n in enumerate(WIDTH_AT):
                            widths[v][q][n].append(b["ci95"][1][:, j] - b["ci95"][0][:, j])
        if done < width_reps:          # the door's fixed-n interval on the same first n labels, the rest unlabelled
            k = min(width_reps - done, r)
            for n in WIDTH_AT:
                cells = [bounded.ppi_cells(y[:k, :n], f[:k, :n], f[:k, n:], 0.0, 1.0, seed=seed,
                                           key=("rounds", index, start, c, n), draws=draws)
                         for c, (y, f) in enumerate(data)]
                for c in range(6):
                    ci = cells[c].interval(CONFIDENCE)["ci95"]
                    widths["door"]["cell"][n].append(ci[1] - ci[0])
                for q, terms in combos.items():
                    ci = combine([(w, cells[c].parts) for w, c in terms], CONFIDENCE)["ci95"]
                    widths["door"][q][n].append(ci[1] - ci[0])
        done += r
    out = {**p, "index": index, "reps": reps, "seed": seed, "quantities": {},
           "lam_mean_by_block": {q: [float(v) for v in np.concatenate(x).mean(0)] for q, x in lams.items()}}
    for q in QUANTITIES:
        out["quantities"][q] = {
            v: {"n": tally[v][q]["n"], "uniform": tally[v][q]["uniform"] / tally[v][q]["n"],
                "stopped": tally[v][q]["stopped"] / tally[v][q]["n"],
                "mean_labels_at_stop": tally[v][q]["labels_at_stop"] / tally[v][q]["n"]} for v in ("proxy", "gold")}
        out["quantities"][q]["median_width"] = {
            v: {str(n): float(np.median(np.concatenate(widths[v][q][n]))) for n in WIDTH_AT}
            for v in ("proxy", "gold", "door")}
    return out


def _head(t: seq.Track, k: int) -> seq.Track:
    """The first k replicates of a Track."""
    cut = lambda bl: None if bl is None else seq.Block(bl.start, bl.end, bl.h_lo[:k], bl.h_hi[:k], bl.h_block[:k],   # noqa: E731
                                                         bl.h_before[:k], bl.h_pool[:k], bl.pool_var[:k])
    return seq.Track(t.y[:k], t.lo, t.hi, [cut(bl) for bl in t.blocks], t.n_pool, t.cap)


def summarise_grid(rows: list[dict]) -> dict:
    out = {"points": len(rows), "quantities": {}}
    for q in QUANTITIES:
        s = {}
        for v in ("proxy", "gold"):
            for kind in ("uniform", "stopped"):
                covs = [(r["quantities"][q][v][kind], r["quantities"][q][v]["n"], r) for r in rows]
                below = [c for c in covs if c[0] < threshold(c[1])]
                worst = min(covs, key=lambda c: c[0])
                s[f"{v}_{kind}"] = {"below_target": len(below), "min": worst[0],
                                    "min_at": {k: worst[2][k] for k in ("kind", "mean", "pool", "rho")},
                                    "mean": float(np.mean([c[0] for c in covs]))}
        for v in ("proxy", "gold"):
            s[f"width_ratio_{v}"] = {}
            for n in WIDTH_AT:
                mid = [r["quantities"][q]["median_width"][v][str(n)] / r["quantities"][q]["median_width"]["door"][str(n)]
                       for r in rows if 0.1 <= r["mean"] <= 0.9 and r["quantities"][q]["median_width"]["door"][str(n)] > 0]
                s[f"width_ratio_{v}"][str(n)] = float(np.median(mid)) if mid else None
        s["width_ratio_by_rho"] = {
            v: {f"rho {rho:g}": {str(n): float(np.median([
                r["quantities"][q]["median_width"][v][str(n)] / r["quantities"][q]["median_width"]["door"][str(n)]
                for r in rows if r["rho"] == rho and 0.1 <= r["mean"] <= 0.9
                and r["quantities"][q]["median_width"]["door"][str(n)] > 0] or [np.nan])) for n in WIDTH_AT}
                for rho in RHOS} for v in ("proxy", "gold")}
        s["proxy_over_gold_by_rho_pool"] = {
            f"rho {rho:g}, pool {pool}": float(np.median([
                r["quantities"][q]["median_width"]["proxy"]["100"] / r["quantities"][q]["median_width"]["gold"]["100"]
                for r in rows if r["rho"] == rho and r["pool"] == pool and 0.1 <= r["mean"] <= 0.9
                and r["quantities"][q]["median_width"]["gold"]["100"] > 0] or [np.nan]))
            for rho in RHOS for pool in POOLS}
        out["quantities"][q] = s
    return out


def grid_markdown(summary: dict) -> str:
    f = lambda v: "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"   # noqa: E731
    lines = [f"{summary['points']} grid points; target: coverage >= 0.95 - 2 Monte-Carlo standard errors at every "
             "point", "", "| quantity | intervals | coverage | points below target | lowest (where) | mean |",
             "|---|---|---|---|---|---|"]
    for q, s in summary["quantities"].items():
        for v in ("proxy", "gold"):
            for kind, words in (("stopped", "final interval, stopped at the first settled round"),
                                ("uniform", "at every look (any stopping rule)")):
                d = s[f"{v}_{kind}"]
                w = d["min_at"]
                lines.append(f"| {q} | {'with the proxy' if v == 'proxy' else 'gold only'} | {words} | "
                             f"{d['below_target']} | {f(d['min'])} ({w['kind']}, mean {w['mean']:g}, pool {w['pool']}, "
                             f"rho {w['rho']:g}) | {f(d['mean'])} |")
    lines += ["", "Median width over the door's fixed-n interval at the same labels (means 0.1-0.9):", "",
              "| quantity | intervals | " + " | ".join(f"n {n}" for n in WIDTH_AT) + " |",
              "|---|---|" + "---|" * len(WIDTH_AT)]
    for q, s in summary["quantities"].items():
        for v in ("proxy", "gold"):
            lines.append(f"| {q} | {'with the proxy' if v == 'proxy' else 'gold only'} | "
                         + " | ".join(f(s[f'width_ratio_{v}'][str(n)]) for n in WIDTH_AT) + " |")
    lines += ["", "The same by proxy correlation (the door uses its proxy well at 0.8 and more; rounds with the proxy):", "",
              "| quantity | rho | " + " | ".join(f"n {n}" for n in WIDTH_AT) + " |", "|---|---|" + "---|" * len(WIDTH_AT)]
    for q, s in summary["quantities"].items():
        for rho, d in s["width_ratio_by_rho"]["proxy"].items():
            lines.append(f"| {q} | {rho[4:]} | " + " | ".join(f(d[str(n)]) for n in WIDTH_AT) + " |")
    lines += ["", "Median width with the proxy over gold only at 100 labels (cells, means 0.1-0.9): "
              + ", ".join(f"{k}: {f(v)}" for k, v in summary["quantities"]["cell"]["proxy_over_gold_by_rho_pool"].items())]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ the CLI
def _resume(path: Path, key, match) -> dict:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if match(r):
                    done[key(r)] = r
    return done


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.rounds_coverage", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["grid", "tables"])
    ap.add_argument("--out", required=True, help="directory: grid.jsonl / tables.jsonl (one line a point or "
                    "table; resumable), summary.json and summary.md")
    ap.add_argument("--reps", type=positive_int, default=None,
                    help="replicates per grid point (default 2000) or per table (default 100)")
    ap.add_argument("--tables", type=positive_int, default=40, help="tables (half far, half near; default 40)")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--draws", type=positive_int, default=2000, help="Monte-Carlo draws of the door's fixed-n "
                    "intervals compared with (default 2000)")
    ap.add_argument("--width-reps", type=positive_int, default=100, help="grid: replicates whose widths are measured")
    ap.add_argument("--quick", action="store_true", help="grid: binary and continuous, means 0.01/0.5/0.99, rho 0 "
                    "and 0.8 (a first look)")
    ap.add_argument("--shard", default=None, metavar="I/K", help="run only the points/tables whose index is I mod K")
    ap.add_argument("--shuffled", action="store_true", help="grid: run the points in a seeded random order (a grid cut "
                    "short is then a random subset of it)")
    ap.add_argument("--summary-only", action="store_true", help="summarise what DIR holds; run nothing")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    shard = parse_shard(a.shard)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    suffix = "" if shard is None else f".{shard[0]}"
    if a.what == "grid":
        reps = a.reps or 2000
        points = grid_points()
        index = {tuple(p.values()): i for i, p in enumerate(points)}
        if a.quick:
            points = [p for p in points if p["kind"] in ("binary", "continuous") and p["mean"] in (0.01, 0.5, 0.99)
                      and p["rho"] in (0.0, 0.8)]
        done = {}
        for f in sorted(out.glob("grid*.jsonl")):
            done.update(_resume(f, lambda r: (r["kind"], r["mean"], r["pool"], r["rho"]),
                                lambda r: (r["reps"], r["seed"]) == (reps, a.seed)))
        todo = [] if a.summary_only else [p for p in points if tuple(p.values()) not in done and
                                          (shard is None or index[tuple(p.values())] % shard[1] == shard[0])]
        if a.shuffled:
            todo = [todo[i] for i in np.random.default_rng([a.seed, 48]).permutation(len(todo))]
        with open(out / f"grid{suffix}.jsonl", "a") as fh:
            for k, p in enumerate(todo, 1):
                r = run_point(p, index[tuple(p.values())], reps, a.seed, min(a.width_reps, reps), a.draws)
                fh.write(json.dumps(r) + "\n")
                fh.flush()
                done[tuple(p.values())] = r
                q = r["quantities"]["cell"]["proxy"]
                print(f"[rounds_coverage] {k}/{len(todo)} {p}: cell coverage stopped {q['stopped']:.3f}, every look "
                      f"{q['uniform']:.3f}; {time.time() - t0:.0f}s", flush=True)
        rows = [done[tuple(p.values())] for p in points if tuple(p.values()) in done]
        summary, md = summarise_grid(rows), None
        md = grid_markdown(summary)
    else:
        reps = a.reps or 100
        specs = [table_spec(a.seed, i) for i in range(a.tables)]
        done = {}
        for f in sorted(out.glob("tables*.jsonl")):
            done.update(_resume(f, lambda r: r["spec"]["index"], lambda r: (r["reps"], r["seed"]) == (reps, a.seed)))
        todo = [] if a.summary_only else [s for s in specs if s["index"] not in done and
                                          (shard is None or s["index"] % shard[1] == shard[0])]
        with open(out / f"tables{suffix}.jsonl", "a") as fh:
            for k, spec in enumerate(todo, 1):
                r = run_table(spec, reps, a.seed, a.draws)
                fh.write(json.dumps(r) + "\n")
                fh.flush()
                done[spec["index"]] = r
                lab = np.mean([row["decisions"]["labels"] for row in r["rows"]]) / 30
                print(f"[rounds_coverage] table {k}/{len(todo)} ({spec['class']}, {spec['label_kind']}, pool "
                      f"{spec['pool']}, {[v['kind'] for v in spec['runs'].values()]}): {lab:.1f} labels a cell; "
                      f"{time.time() - t0:.0f}s", flush=True)
        rows = [done[s["index"]] for s in specs if s["index"] in done]
        summary = summarise_tables(rows)
        md = tables_markdown(summary)
    (out / f"summary.{a.what}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / f"summary.{a.what}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.rounds_coverage"))
