"""python -m world.experiments.interval_methods [--reps 150] [--seed 0] [--points main|wide] [--out FILE.md]: the
finite-sample methods issue 31 names, weighed against the samples door's interval on the coverage grid's cells
(docs/intervals.md, "Other methods, measured"), and the lower bound on what validity itself costs.

Per point (label kind, true mean, gold rows n, unlabelled rows N, proxy correlation rho; the grid's own data,
world.experiments.interval_coverage.labels/proxy), the median width over `--reps` cells of:

  today       PPI++ with Student's t (the normal interval the door replaced; not valid)
  door        the door's interval (audit.core.bounded.ppi_cells)
  betting     Waudby-Smith & Ramdas's hedged-capital interval (JRSS-B 2024, Theorem 3 with the predictable plug-in
              bets tuned to n, c = 3/4), gold only and on the rectifier y - lam h with the door's own lam (alpha
              0.045 for the rectifier, 0.005 for the unlabelled rows' mean, a Hoeffding bound); the narrower of the two
  bernstein   Maurer & Pontil's empirical-Bernstein interval (2009, Theorem 4), gold only
  clipped     the door with its prediction clipped to the gold rows' own proxy quantiles a and 1 - a
              (a = 0.1, 0.2, 0.3), each as a ratio to the door

and, for binary labels, `forced_median_width`: a lower bound on the median width of ANY interval that covers 95% for
every distribution, proved below. Widths are reported, not coverage: the interval_coverage harness measures the
door's; betting and Bernstein are valid by proof. About 10 s (main, 32 points) or 50 s (wide, 216) on 2 cores.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from audit.core import bounded
from rlhf.atomic import atomic_write_text
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from rlhf.errors import InputError, run_cli
from world.experiments.interval_coverage import CONFIDENCE, KINDS, labels, proxy, today_cell, today_interval

ALPHA = 1 - CONFIDENCE
MEAN_GRID = np.linspace(0.0, 1.0, 801)      # candidate means for inverting the betting test (step 1/800)
CLIPS = (0.1, 0.2, 0.3)


# ------------------------------------------------------------------------------------------------ betting
def hedged_capital(x, alpha: float = ALPHA, c: float = 0.75, grid=MEAN_GRID) -> np.ndarray:
    """The hedged capital K_n(m) = max(K+_n(m), K-_n(m)) / 2 of x (rows, n) in [0, 1] at every candidate mean m of
    grid: K+-_n(m) = prod_i (1 +- lam+-_i(m) (x_i - m)), lam_i = sqrt(2 log(2/alpha) / (n s2_{i-1})) truncated at
    c/m (c/(1-m)), with the running mean mu_i = (1/2 + sum x) / (i + 1) and variance s2_i = (1/4 + sum (x -
    mu_{i-1})^2) / (i + 1) of Waudby-Smith & Ramdas. Under mean m it is a nonnegative martingale from 1."""
    x = np.atleast_2d(np.asarray(x, float))
    rows, n = x.shape
    t = np.arange(1, n + 1)
    mu = (0.5 + np.cumsum(x, 1)) / (t + 1)
    mu_prev = np.concatenate([np.full((rows, 1), 0.5), mu[:, :-1]], 1)
    s2 = (0.25 + np.cumsum((x - mu_prev) ** 2, 1)) / (t + 1)
    s2_prev = np.concatenate([np.full((rows, 1), 0.25), s2[:, :-1]], 1)
    lam = np.sqrt(2 * math.log(2 / alpha) / (n * s2_prev))[:, :, None]
    d = x[:, :, None] - grid[None, None, :]
    up = np.log1p(np.minimum(lam, c / np.maximum(grid, 1e-12)) * d).sum(1)
    down = np.log1p(-np.minimum(lam, c / np.maximum(1 - grid, 1e-12)) * d).sum(1)
    return 0.5 * np.maximum(np.exp(up), np.exp(down))


def betting_interval(x, lo: float = 0.0, hi: float = 1.0, alpha: float = ALPHA) -> tuple:
    """(lower, upper) per row: the candidate means at which the hedged capital stays below 1/alpha (Markov at n:
    valid for every distribution on [lo, hi]), on the grid's resolution, rounded outwards."""
    x = (np.atleast_2d(np.asarray(x, float)) - lo) / (hi - lo)
    keep = hedged_capital(x, alpha) < 1 / alpha
    first = keep.argmax(1)
    last = keep.shape[1] - 1 - keep[:, ::-1].argmax(1)
    step = MEAN_GRID[1] - MEAN_GRID[0]
    low = np.clip(MEAN_GRID[first] - step, 0, 1)
    high = np.clip(MEAN_GRID[last] + step, 0, 1)
    return lo + low * (hi - lo), lo + high * (hi - lo)


def betting_ppi(y, h, h_u, lam, lo: float = 0.0, hi: float = 1.0) -> tuple:
    """theta = mean(lam h over all rows) + mean(y - lam h over gold rows): a betting interval for the rectifier on its
    range [lo - lam h_hi, hi - lam h_lo] at alpha 0.045, Hoeffding for the unlabelled mean at 0.005 (union bound)."""
    h_lo = np.minimum(h.min(1), h_u.min(1))
    h_hi = np.maximum(h.max(1), h_u.max(1))
    a, b = lo - lam * h_hi, hi - lam * h_lo
    rl, ru = betting_interval(((y - lam[:, None] * h) - a[:, None]) / (b - a)[:, None], 0.0, 1.0, 0.045)
    N = h_u.shape[1]
    slack = (h_hi - h_lo) * math.sqrt(math.log(2 / 0.005) / (2 * N))
    m = h_u.mean(1)
    return a + rl * (b - a) + lam * (m - slack), a + ru * (b - a) + lam * (m + slack)


def bernstein_interval(x, lo: float = 0.0, hi: float = 1.0, alpha: float = ALPHA) -> tuple:
    """Maurer & Pontil (2009), Theorem 4, two-sided (alpha/2 a side): mean +- sqrt(2 V log(4/alpha) / n) + 7 R
    log(4/alpha) / (3 (n - 1)), V the unbiased sample variance, R = hi - lo."""
    x = np.atleast_2d(np.asarray(x, float))
    n = x.shape[1]
    v = x.var(1, ddof=1)
    half = np.sqrt(2 * v * math.log(4 / alpha) / n) + 7 * (hi - lo) * math.log(4 / alpha) / (3 * (n - 1))
    m = x.mean(1)
    return np.maximum(m - half, lo), np.minimum(m + half, hi)


# ------------------------------------------------------------------------------------ what validity forces
def _miss_bound(p, q: float, n: int, alpha: float) -> np.ndarray:
    """An upper bound on P(U < theta + p) for a valid upper bound U (at every share p of an array), binary labels:
    move a random share p of the population, drawn from the pool of rows labelled 0 (share q), to label 1. Proxies
    are untouched, so on the event that no gold row lies in the moved share the data are distributed alike before
    and after; that event has probability (1 - p/q)^K given the K gold rows in the pool, and validity after the move
    gives E[1{U < theta + p} (1 - p/q)^K] <= alpha. Hence P(U < theta + p) <= alpha / (1 - p/q)^k + P(K > k) for
    every k (1 where p >= q: the pool cannot give that share)."""
    p = np.atleast_1d(np.asarray(p, float))
    k = np.arange(n + 1)
    tail = stats.binom(n, q).sf(k)                      # P(K > k): one computation for every p
    keep = np.clip(1 - p / q, 0.0, None)[:, None] ** k
    with np.errstate(divide="ignore"):
        bound = np.where(keep > 0, alpha / keep, np.inf) + tail
    return np.where(p < q, np.minimum(1.0, bound.min(1)), 1.0)


def forced_median_width(mean: float, n: int, alpha: float = ALPHA, steps: int = 200) -> float:
    """A lower bound on the median width of any interval covering 1 - alpha for every distribution on [0, 1] (and
    any proxy), at binary labels with this mean and n gold rows: P(U - L >= a + b) >= 1 - miss_up(a) - miss_lo(b),
    so the median width is at least the largest a + b with miss_up(a) + miss_lo(b) <= 1/2."""
    grid = np.linspace(0.05 / n, 6.0 / n, steps)
    up, down = _miss_bound(grid, 1 - mean, n, alpha), _miss_bound(grid, mean, n, alpha)
    ok = up[:, None] + down[None, :] <= 0.5
    return float(np.where(ok, grid[:, None] + grid[None, :], 0.0).max())


# ----------------------------------------------------------------------------------------------- the table
POINTS = {
    "main": [(k, m, n, 10_000, r) for k in ("continuous", "binary") for m in (0.5, 0.1) for n in (50, 100)
             for r in (0.0, 0.4, 0.8, 0.95)],
    "wide": [(k, m, n, big_n, r) for k in ("continuous", "three", "binary") for m in (0.5, 0.3, 0.1)
             for n in (25, 50, 100) for big_n in (100, 10_000) for r in (0.0, 0.4, 0.8, 0.95)],
}


def measure(kind: str, mean: float, n: int, big_n: int, rho: float, reps: int, seed: int, draws: int) -> dict:
    rng = np.random.default_rng([seed, n, big_n, int(round(mean * 1000)), int(round(rho * 100)), KINDS.index(kind)])
    y_all = labels(kind, mean, (reps, n + big_n), rng)
    f_all = proxy(y_all, kind, mean, rho, rng)
    y, f, f_u = y_all[:, :n].astype(float), f_all[:, :n].astype(float), f_all[:, n:].astype(float)
    width = lambda lohi: float(np.median(lohi[1] - lohi[0]))
    (te, ts), _ = today_cell(y, f, f_u)
    door = bounded.ppi_cells(y, f, f_u, 0.0, 1.0, seed=seed, key=("methods",), draws=draws)
    out = {"kind": kind, "mean": mean, "n": n, "N": big_n, "rho": rho, "reps": reps,
           "today": width(today_interval([(1.0, (te, ts))])), "door": width(door.interval(CONFIDENCE)["ci95"]),
           "door_lam": float(np.median(door.lam))}
    a, b = door.intercept[:, None], door.slope[:, None]            # the door's own prediction line
    h, h_u = (np.clip(a + b * v, 0, 1) for v in (f, f_u))
    out["betting"] = min(width(betting_interval(y)), width(betting_ppi(y, h, h_u, door.lam)))
    out["bernstein"] = width(bernstein_interval(y))
    for q in CLIPS:
        ql, qh = np.quantile(f, q, axis=1)[:, None], np.quantile(f, 1 - q, axis=1)[:, None]
        c = bounded.ppi_cells(y, np.clip(f, ql, qh), np.clip(f_u, ql, qh), 0.0, 1.0, seed=seed, key=("methods",),
                              draws=draws)
        out[f"clipped_{q}"] = width(c.interval(CONFIDENCE)["ci95"])
    if kind == "binary":
        out["forced"] = forced_median_width(mean, n)
    return out


def markdown(rows: list[dict]) -> str:
    head = ("| kind | mean | n | N | rho | today | door (lam) | betting / door | Bernstein / door | clipped a=0.1 / "
            "0.2 / 0.3, / door | forced (binary) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = ""
    for r in rows:
        d = r["door"]
        clip = " / ".join(f"{r[f'clipped_{q}'] / d:.3f}" for q in CLIPS)
        forced = f"{r['forced']:.3f}" if "forced" in r else "-"
        body += (f"| {r['kind']} | {r['mean']:g} | {r['n']} | {r['N']} | {r['rho']:g} | {r['today']:.3f} | "
                 f"{d:.3f} ({r['door_lam']:.2f}) | {r['betting'] / d:.2f} | {r['bernstein'] / d:.2f} | {clip} | "
                 f"{forced} |\n")
    return head + body


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.interval_methods", description=first_paragraph(__doc__))
    ap.add_argument("--reps", type=positive_int, default=150, help="cells per point (default 150)")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--draws", type=positive_int, default=4000, help="Monte-Carlo draws of the door's bounds")
    ap.add_argument("--points", choices=sorted(POINTS), default="main", help="main: 32 points at N 10,000; wide: "
                    "216 points (three kinds, means 0.1/0.3/0.5, n 25/50/100, N 100/10,000)")
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    a = ap.parse_args(argv)
    if a.out and (Path(a.out).is_dir() or not Path(a.out).resolve().parent.is_dir()):
        raise InputError(f"--out {a.out}: expected a file path in an existing directory")
    rows = []
    for i, p in enumerate(POINTS[a.points], 1):
        rows.append(measure(*p, reps=a.reps, seed=a.seed, draws=a.draws))
        r = rows[-1]
        print(f"[interval_methods] {i}/{len(POINTS[a.points])} {p}: door {r['door']:.3f}, betting "
              f"{r['betting'] / r['door']:.2f}x, clipped {min(r[f'clipped_{q}'] for q in CLIPS) / r['door']:.3f}x",
              flush=True)
    table = markdown(rows)
    print(table)
    if a.out:
        atomic_write_text(a.out, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.interval_methods"))
