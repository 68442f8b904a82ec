"""python -m world.experiments.interval_coverage --out DIR [--reps 2000] [--seed 0] [--quick]: do the samples door's 95%
intervals cover at the stated rate where release decisions are made -- small gold budgets, true values near 0 and
1, labels that take few values? Measured on a grid, against the normal (PPI++ with Student's t) intervals the door
used before (docs/intervals.md has the figures and the command that made them).

Grid: label kind (binary; three-valued {0, 0.5, 1}; continuous, U^a or 1 - U^a with a set by the mean) x true
mean (0, 0.001 ... 0.999, 1) x gold rows per cell n (10, 25, 50, 100) x unlabelled rows per cell N (100, 10,000)
x proxy-label correlation rho (0, 0.4, 0.8, 0.95; the proxy is rho * the standardised label + noise, on another
scale). Per grid point, `--reps` replicates of six independent cells with that mean, each run through exactly the
audit's code (audit.core.bounded.ppi_cells, replicates batched), and of the same cells through today's intervals:

  cell            every cell's interval (6 x reps intervals) against the true mean
  balanced        the mean of the six cells (a balanced quality), truth = the mean
  delta           cell 1 - cell 2 (a run vs the reference on one family), truth 0
  balanced_delta  mean of cells 1-3 - mean of cells 4-6 (a balanced gain over three families), truth 0

Coverage per grid point and quantity, the widths (median; the ratio new / today), and the number of zero-width
intervals. Target (issue 31): every grid point's coverage >= 0.95 minus two Monte-Carlo standard errors.

Resumable: every finished grid point is one line of DIR/grid.jsonl (DIR/grid.I.jsonl for --shard I/K); a re-run
skips the points already in any of them (same --reps, --seed, --draws). DIR/summary.json and DIR/summary.md are
rewritten at the end, from every point done so far. Time: about 10-30 s a grid point at the defaults on one core
(--shard to use more; the full grid is several CPU-hours).
"""
from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy import stats

from audit.core import bounded
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from rlhf.errors import InputError, run_cli

KINDS = ("binary", "three", "continuous")
MEANS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 0.999, 1.0)
GOLD = (10, 25, 50, 100)
UNLABELLED = (100, 10_000)
RHOS = (0.0, 0.4, 0.8, 0.95)
CELLS = 6
CHUNK = 250                     # replicates per batch (memory: CHUNK x draws floats per array)
QUANTITIES = ("cell", "balanced", "delta", "balanced_delta")
CONFIDENCE = 0.95


# ------------------------------------------------------------------------------------------------ the world
def labels(kind: str, mu: float, shape, rng) -> np.ndarray:
    """Labels in [0, 1] with mean exactly mu (float32: the harness's data are its largest cost, not its precision)."""
    u = rng.random(shape, dtype=np.float32)
    if kind == "binary":
        return (u < mu).astype(np.float32)
    if kind == "three":
        p_half = min(0.4, 2 * mu, 2 * (1 - mu))
        p_one = mu - 0.5 * p_half
        return np.where(u < p_one, 1.0, np.where(u < p_one + p_half, 0.5, 0.0)).astype(np.float32)
    if kind == "continuous":     # E[U^a] = 1 / (a + 1): skewed towards the near end, mirrored above 1/2
        if mu <= 0.0 or mu >= 1.0:
            return np.full(shape, mu, dtype=np.float32)
        if mu <= 0.5:
            return u ** np.float32(1.0 / mu - 1.0)
        return np.float32(1.0) - u ** np.float32(1.0 / (1.0 - mu) - 1.0)
    raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")


def label_sd(kind: str, mu: float) -> float:
    if kind == "binary":
        return math.sqrt(mu * (1 - mu))
    if kind == "three":
        p_half = min(0.4, 2 * mu, 2 * (1 - mu))
        p_one = mu - 0.5 * p_half
        return math.sqrt(max(0.0, p_one + 0.25 * p_half - mu * mu))
    if mu <= 0.0 or mu >= 1.0:
        return 0.0
    a = 1.0 / min(mu, 1 - mu) - 1.0
    return math.sqrt(1.0 / (2 * a + 1) - 1.0 / (a + 1) ** 2)


def proxy(y, kind, mu, rho, rng) -> np.ndarray:
    """rho * standardised label + noise, shifted and scaled (a proxy's scale is arbitrary)."""
    sd = label_sd(kind, mu)
    z = (y - np.float32(mu)) * np.float32(1.0 / sd) if sd > 0 else np.zeros_like(y)
    noise = rng.standard_normal(y.shape, dtype=np.float32)
    return np.float32(3.0) * (np.float32(rho) * z + np.float32(math.sqrt(1 - rho * rho)) * noise) - np.float32(1.0)


# ------------------------------------------------------------------------------------ today's interval (before)
def today_cell(y, f, fu, confidence: float = CONFIDENCE):
    """PPI++ (power-tuned lam, normal interval, audit.core.ppi) with the t_{n-1}/z factor, and the gold-only interval
    the same way: (estimate, se) pairs per replicate, se already multiplied by the factor."""
    n, N = y.shape[-1], fu.shape[-1]
    k = stats.t.ppf(0.5 + confidence / 2, n - 1) / stats.norm.ppf(0.5 + confidence / 2)
    yc, fc = y - y.mean(-1, keepdims=True), f - f.mean(-1, keepdims=True)
    cov = (yc * fc).mean(-1)
    var = np.var(np.concatenate([f, fu], -1), axis=-1, ddof=1)
    lam = np.where(var > 0, np.clip(cov / ((1 + n / N) * np.where(var > 0, var, 1)), 0, 1), 0.0)
    r = y - lam[..., None] * f
    est = lam * fu.mean(-1) + r.mean(-1)
    se = np.sqrt(lam ** 2 * fu.var(-1) / N + r.var(-1) / n)
    return (est, k * se), (y.mean(-1), k * y.std(-1) / math.sqrt(n))


def today_interval(terms, confidence: float = CONFIDENCE):
    """Normal interval of sum w * estimate, standard errors in quadrature."""
    z = stats.norm.ppf(0.5 + confidence / 2)
    est = sum(w * e for w, (e, s) in terms)
    se = np.sqrt(sum((w * s) ** 2 for w, (e, s) in terms))
    return est - z * se, est + z * se


# ------------------------------------------------------------------------------------------------ one point
def grid_points() -> list[dict]:
    return [{"kind": k, "mean": m, "n": n, "N": N, "rho": r}
            for k, m, n, N, r in itertools.product(KINDS, MEANS, GOLD, UNLABELLED, RHOS)]


def run_point(p: dict, index: int, reps: int, seed: int, draws: int, confidence: float = CONFIDENCE) -> dict:
    rng = np.random.default_rng([seed, index])
    kind, mu, n, N, rho = p["kind"], p["mean"], p["n"], p["N"], p["rho"]
    truth = {"cell": mu, "balanced": mu, "delta": 0.0, "balanced_delta": 0.0}
    cov = {m: {q: 0 for q in QUANTITIES} for m in ("new", "today")}
    widths = {m: {q: [] for q in QUANTITIES} for m in ("new", "today")}
    zero = {m: {q: 0 for q in QUANTITIES} for m in ("new", "today")}
    counts = {q: 0 for q in QUANTITIES}
    lams = []

    def tally(method, q, lo, hi):
        cov[method][q] += int(np.sum((lo <= truth[q]) & (truth[q] <= hi)))
        widths[method][q].append(hi - lo)
        zero[method][q] += int(np.sum(hi - lo <= 0))

    for start in range(0, reps, CHUNK):
        r = min(CHUNK, reps - start)
        new_parts, old_parts = [], []
        for c in range(CELLS):
            y_all = labels(kind, mu, (r, n + N), rng)
            f_all = proxy(y_all, kind, mu, rho, rng)
            y, f, fu = y_all[:, :n], f_all[:, :n], f_all[:, n:]
            cell = bounded.ppi_cells(y, f, fu, 0.0, 1.0, confidence=confidence, seed=seed,
                                     key=("coverage", index, start, c), draws=draws)
            ci = cell.interval(confidence)["ci95"]
            tally("new", "cell", *ci)
            (t_est, t_se), _ = today_cell(y, f, fu, confidence)
            tally("today", "cell", *today_interval([(1.0, (t_est, t_se))], confidence))
            counts["cell"] += r
            lams.append(cell.lam)
            new_parts.append(cell.parts)
            old_parts.append((t_est, t_se))
        combos = {"balanced": [(1 / CELLS, c) for c in range(CELLS)], "delta": [(1.0, 0), (-1.0, 1)],
                  "balanced_delta": [(1 / 3, 0), (1 / 3, 1), (1 / 3, 2), (-1 / 3, 3), (-1 / 3, 4), (-1 / 3, 5)]}
        for q, terms in combos.items():
            ci = bounded.interval([(w * pw, s) for w, c in terms for pw, s in new_parts[c]], confidence)["ci95"]
            tally("new", q, *ci)
            tally("today", q, *today_interval([(w, old_parts[c]) for w, c in terms], confidence))
            counts[q] += r
    out = {**p, "index": index, "reps": reps, "seed": seed, "draws": draws, "confidence": confidence, "lam_median": float(np.median(
        np.concatenate(lams))), "quantities": {}}
    for q in QUANTITIES:
        wn, wt = (float(np.median(np.concatenate(widths[m][q]))) for m in ("new", "today"))
        out["quantities"][q] = {"n": counts[q], "coverage": {m: cov[m][q] / counts[q] for m in cov},
                                "median_width": {"new": wn, "today": wt},
                                "width_ratio": wn / wt if wt > 0 else None,
                                "zero_width": {m: zero[m][q] for m in zero}}
    return out


# ------------------------------------------------------------------------------------------------ summary
def threshold(n: int, confidence: float = CONFIDENCE) -> float:
    """The stated confidence (0.95) minus two Monte-Carlo standard errors of a coverage measured on n intervals."""
    return confidence - 2 * math.sqrt(confidence * (1 - confidence) / n)


def summarise(rows: list[dict]) -> dict:
    out = {"points": len(rows), "quantities": {}}
    for q in QUANTITIES:
        s = {}
        for m in ("new", "today"):
            covs = [(r["quantities"][q]["coverage"][m], r["quantities"][q]["n"], r) for r in rows]
            below = [(c, r) for c, n, r in covs if c < threshold(n, r.get("confidence", CONFIDENCE))]
            worst = min(covs, key=lambda t: t[0])
            s[m] = {"below_target": len(below), "min_coverage": worst[0],
                    "min_at": {k: worst[2][k] for k in ("kind", "mean", "n", "N", "rho")},
                    "mean_coverage": float(np.mean([c for c, _, _ in covs])),
                    "zero_width": int(sum(r["quantities"][q]["zero_width"][m] for r in rows)),
                    "below_by_kind": {k: sum(1 for c, r in below if r["kind"] == k) for k in KINDS}}
        mid = [r["quantities"][q]["width_ratio"] for r in rows
               if 0.1 <= r["mean"] <= 0.9 and r["n"] >= 50 and r["quantities"][q]["width_ratio"] is not None]
        s["width_ratio_mid_range_median"] = float(np.median(mid)) if mid else None
        s["width_ratio_by"] = {}
        for n in GOLD:
            for band, test in (("mid (0.1-0.9)", lambda m: 0.1 <= m <= 0.9), ("edge (<0.1, >0.9)",
                                                                              lambda m: m < 0.1 or m > 0.9)):
                v = [r["quantities"][q]["width_ratio"] for r in rows if r["n"] == n and test(r["mean"])
                     and r["quantities"][q]["width_ratio"] is not None]
                s["width_ratio_by"][f"n={n}, {band}"] = float(np.median(v)) if v else None
        s["width_ratio_mid_range_by_rho"] = {
            str(rho): float(np.median([r["quantities"][q]["width_ratio"] for r in rows
                                       if 0.1 <= r["mean"] <= 0.9 and r["n"] >= 50 and r["rho"] == rho
                                       and r["quantities"][q]["width_ratio"] is not None] or [np.nan]))
            for rho in RHOS}
        out["quantities"][q] = s
    return out


def markdown(summary: dict, rows: list[dict]) -> str:
    f = lambda v: "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"   # noqa: E731
    lines = [f"{summary['points']} grid points, {rows[0]['reps'] if rows else 0} replicates each "
             f"(cells: x{CELLS}); target: coverage >= {rows[0].get('confidence', CONFIDENCE) if rows else CONFIDENCE:g} "
             "- 2 Monte-Carlo standard errors at every point", "",
             "| quantity | intervals | points below target | lowest coverage (where) | mean coverage | zero-width "
             "intervals | median width ratio new/today, mean 0.1-0.9 and n >= 50 |", "|---|---|---|---|---|---|---|"]
    for q, s in summary["quantities"].items():
        for m in ("new", "today"):
            w = s[m]["min_at"]
            lines.append(f"| {q} | {m} | {s[m]['below_target']} | {f(s[m]['min_coverage'])} ({w['kind']}, mean "
                         f"{w['mean']:g}, n {w['n']}, N {w['N']}, rho {w['rho']:g}) | {f(s[m]['mean_coverage'])} | "
                         f"{s[m]['zero_width']} | {f(s['width_ratio_mid_range_median']) if m == 'new' else ''} |")
    lines += ["", "Median width ratio (new / today) of the cell intervals, by gold rows and true mean:", "",
              "| n | mean 0.1-0.9 | mean < 0.1 or > 0.9 |", "|---|---|---|"]
    wr = summary["quantities"]["cell"]["width_ratio_by"]
    for n in GOLD:
        lines.append(f"| {n} | {f(wr[f'n={n}, mid (0.1-0.9)'])} | {f(wr[f'n={n}, edge (<0.1, >0.9)'])} |")
    lines += ["", "Median width ratio of the cell intervals, mean 0.1-0.9 and n >= 50, by proxy correlation: "
              + ", ".join(f"rho {k}: {f(v)}" for k, v in summary["quantities"]["cell"]["width_ratio_mid_range_by_rho"]
                          .items())]
    return "\n".join(lines) + "\n"


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """--shard I/K: (I, K), or None when not given; InputError naming the value otherwise."""
    if text is None:
        return None
    try:
        i, k = (int(v) for v in text.split("/"))
        assert k >= 1 and 0 <= i < k
    except (ValueError, AssertionError):
        raise InputError(f"--shard {text}: expected I/K with 0 <= I < K") from None
    return i, k


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.interval_coverage", description=first_paragraph(__doc__))
    ap.add_argument("--out", required=True, help="directory: grid.jsonl (one line a grid point), summary.json/.md")
    ap.add_argument("--reps", type=positive_int, default=2000, help="replicates per grid point (default 2000)")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--draws", type=positive_int, default=bounded.DRAWS,
                    help=f"Monte-Carlo draws of every bound (default {bounded.DRAWS}, the audit's)")
    ap.add_argument("--confidence", type=float, default=CONFIDENCE, help="the intervals' stated confidence (default "
                    "0.95, the door's; e.g. 1 - 0.05/K for K declared looks, docs/intervals.md)")
    ap.add_argument("--quick", action="store_true", help="a small grid (binary and continuous, n 10 and 50, N 100, "
                    "rho 0 and 0.8, five means) for a first look")
    ap.add_argument("--limit", type=positive_int, default=None, help="stop after this many new grid points")
    ap.add_argument("--shuffled", action="store_true", help="run the points in a seeded random order (a grid cut short "
                    "is then a random subset of it, not its first kinds and means)")
    ap.add_argument("--summary-only", action="store_true", help="run nothing: summarise the grid points DIR holds "
                    "(a partial grid while shards are still running)")
    ap.add_argument("--shard", default=None, metavar="I/K", help="run only the grid points whose index is I mod K "
                    "(K processes side by side; each writes DIR/grid.I.jsonl)")
    a = ap.parse_args(argv)
    if not 0.5 <= a.confidence < 1:
        raise InputError(f"--confidence {a.confidence}: expected a number in [0.5, 1)")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    points = grid_points()
    if a.quick:
        points = [p for p in points if p["kind"] in ("binary", "continuous") and p["n"] in (10, 50)
                  and p["N"] == 100 and p["rho"] in (0.0, 0.8) and p["mean"] in (0.0, 0.01, 0.5, 0.99, 1.0)]
    shard = parse_shard(a.shard)
    grid_file = out / ("grid.jsonl" if shard is None else f"grid.{shard[0]}.jsonl")
    done = {}
    for f in sorted(out.glob("grid*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if (r["reps"], r["seed"], r["draws"], r.get("confidence", CONFIDENCE)) == (a.reps, a.seed, a.draws,
                                                                                      a.confidence):
                    done[(r["kind"], r["mean"], r["n"], r["N"], r["rho"])] = r
    index = {tuple(p.values()): i for i, p in enumerate(grid_points())}
    todo = [p for p in points if tuple(p.values()) not in done
            and (shard is None or index[tuple(p.values())] % shard[1] == shard[0])]
    if a.shuffled:
        todo = [todo[i] for i in np.random.default_rng([a.seed, 31]).permutation(len(todo))]
    if a.limit:
        todo = todo[: a.limit]
    if a.summary_only:
        todo = []
    n_done = sum(tuple(p.values()) in done for p in points)
    print(f"[interval_coverage] {len(points)} grid points, {n_done} done, {len(todo)} to run "
          f"({a.reps} replicates, {a.draws} draws, seed {a.seed}, confidence {a.confidence:g})", flush=True)
    t0 = time.time()
    with open(grid_file, "a") as fh:
        for k, p in enumerate(todo, 1):
            r = run_point(p, index[tuple(p.values())], a.reps, a.seed, a.draws, a.confidence)
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            done[tuple(p.values())] = r
            el = time.time() - t0
            c = r["quantities"]["cell"]["coverage"]
            print(f"[interval_coverage] {k}/{len(todo)} {p['kind']} mean {p['mean']:g} n {p['n']} N {p['N']} rho "
                  f"{p['rho']:g}: cell coverage {c['new']:.3f} (today {c['today']:.3f}); {el:.0f}s, about "
                  f"{el / k * (len(todo) - k):.0f}s left", flush=True)
    rows = [done[tuple(p.values())] for p in points if tuple(p.values()) in done]
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(markdown(summary, rows))
    print(markdown(summary, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.interval_coverage"))
