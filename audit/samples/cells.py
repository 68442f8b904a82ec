"""What the samples door keeps of a large table: every gold row, every unlabelled row of a cell with at most
KEEP_UNLABELLED of them, and of a larger cell only its statistics (a summary) and the corruption stress's seeded
subsample. The claims need no more: a cell's interval uses its unlabelled rows only through the prediction's count,
mean, variance, minimum and maximum (audit.core.bounded draws a mean of more than 512 values from its normal shape),
the proxy's mean, and the random-subset test's counts (a two-sample Kolmogorov-Smirnov statistic is a function of
how many unlabelled rows lie below each gold row's proxy). Those are sums, so a Ray cluster computes them shard by
shard (audit.samples.ray_cells) and this machine in one pass (`reduce`), to the same bits: sums are exact and
rounded once (audit.core.exact_sums), the subsample is drawn from the cells' row counts alone, and the
Kolmogorov-Smirnov p-value is scipy's own formula on the same statistic.
"""
from __future__ import annotations

import numpy as np

from audit.core import exact_sums
from audit.core.bounded import prediction_line

KEEP_UNLABELLED = 10000    # above this many unlabelled rows a cell is summarised (scipy's exact KS limit too)
STRESS_UNLABELLED = 2000   # unlabelled rows per cell the corruption stress re-runs on (every gold row kept)


def subsample_ranks(counts: list[int], seed: int) -> list[np.ndarray | None]:
    """Per cell (in the table's cell order), the ranks (ascending, among the cell's unlabelled rows in table order)
    of the stress's seeded subsample; None where the cell has at most STRESS_UNLABELLED of them (all kept). One
    stream over the cells in order: it depends on the counts and the seed alone."""
    rng = np.random.default_rng([seed, 35])
    return [np.sort(rng.choice(n, STRESS_UNLABELLED, replace=False)) if n > STRESS_UNLABELLED else None
            for n in counts]


def prediction(y: np.ndarray, f: np.ndarray, lo: float, hi: float):
    """(intercept, slope) of the cell's prediction line, as audit.core.bounded.ppi_cells fits it on the gold rows."""
    a, b = prediction_line(np.clip(np.asarray(y, float), lo, hi), np.asarray(f, float))
    return float(a), float(b)


def predicted(f: np.ndarray, a: float, b: float, lo: float, hi: float) -> np.ndarray:
    """h = clip(a + b f, lo, hi) elementwise, as ppi_cells computes it (the same bits on any machine)."""
    return np.clip(a + b * np.asarray(f, float), lo, hi)


def ks_from_counts(gold_proxy: np.ndarray, below: np.ndarray, at_or_below: np.ndarray, n_unlabelled: int):
    """scipy.stats.ks_2samp(gold_proxy, u) (two-sided, method "auto") from counts alone: `below[i]` and
    `at_or_below[i]` are how many unlabelled values u lie below / at or below the i-th of the sorted gold values.
    Only for more than 10,000 unlabelled values (scipy's asymptotic branch). Returns (statistic, p-value).

    The statistic: F_gold - F_u can only rise at a gold value (its maximum is at one: at_or_below there) and only
    fall at an unlabelled value (its minimum is at the last unlabelled value before the next gold value: below
    there); each candidate is computed as scipy computes the value at that point, so the maximum is the same float."""
    from scipy.stats import distributions
    g = np.sort(np.asarray(gold_proxy, float))
    n1, n2 = len(g), int(n_unlabelled)
    if n2 <= 10000:
        raise ValueError("ks_from_counts: scipy's exact branch needs the values (10,000 unlabelled rows or fewer)")
    below, at_or_below = np.asarray(below), np.asarray(at_or_below)
    cdf1_at = np.searchsorted(g, g, side="right") / n1
    cdf1_before = np.searchsorted(g, g, side="left") / n1
    max_s = float(np.max(cdf1_at - at_or_below / n2))
    lows = cdf1_before - below / n2
    min_s = float(np.clip(-min(float(lows.min()), 0.0), 0, 1))
    d = min_s if min_s > max_s else max_s
    m, n = sorted([float(n1), float(n2)], reverse=True)
    en = m * n / (m + n)
    return d, float(np.clip(distributions.kstwo.sf(d, np.round(en)), 0, 1))


def summary(n_unlabelled: int, proxy: exact_sums.Moments, h: exact_sums.Moments, a: float, b: float,
            ks_p_value: float | None) -> dict:
    """A summarised cell: what the claims read of its unlabelled rows (JSON-able; floats exactly rounded)."""
    return {"n_unlabelled": int(n_unlabelled), "n_samples": int(proxy.n), "proxy_mean": proxy.mean,
            "h": {"intercept": a, "slope": b, "n": int(h.n), "mean": h.mean, "std": h.std, "min": h.lo, "max": h.hi},
            "ks_p_value": ks_p_value}


def reduce(table, seed: int, lo: float, hi: float):
    """The table the claims read (see the module docstring), from a whole table loaded on this machine; the table
    itself when no cell has more than KEEP_UNLABELLED unlabelled rows. [lo, hi]: the gold range."""
    cells = list(table.cells.items())
    unl = [idx[np.isnan(table.gold[idx])] for _, idx in cells]
    if all(len(u) <= KEEP_UNLABELLED for u in unl):
        return table
    keep, summaries = [], {}
    for ((r, f), idx), u, ranks in zip(cells, unl, subsample_ranks([len(u) for u in unl], seed)):
        gold = idx[~np.isnan(table.gold[idx])]
        keep.append(gold)
        if len(u) <= KEEP_UNLABELLED:
            keep.append(u)
            continue
        keep.append(u[ranks])
        p_value = table.design.get((r, f), {}).get("p_value")
        missing = np.isnan(table.proxy[idx])
        if missing.any():       # certified from its gold rows alone (audit.samples.estimates): no prediction
            summaries[(r, f)] = {"n_unlabelled": int(len(u)), "n_samples": int(len(idx)),
                                 "proxy_mean": proxy_moments(table.proxy[idx][~missing]).mean if not missing.all()
                                 else None, "n_missing_proxy": int(missing.sum()), "h": None, "ks_p_value": p_value}
            continue
        a, b = prediction(table.gold[gold], table.proxy[gold], lo, hi)
        proxy = proxy_moments(table.proxy[idx])
        h = exact_sums.moments(predicted(table.proxy[u], a, b, lo, hi))[0]
        summaries[(r, f)] = summary(len(u), proxy, h, a, b, p_value)
    out = table.subset(np.sort(np.concatenate(keep)))
    out.summaries, out.n_rows, out.kept_for_seed = summaries, table.n_rows, seed
    return out


def proxy_moments(x: np.ndarray) -> exact_sums.Moments:
    """Count and exact sum of a cell's proxy (any finite magnitude: no squares)."""
    return exact_sums.Moments(len(x), exact_sums.sums(x)[0])
