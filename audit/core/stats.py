"""Confidence intervals for the audit's claims (SPEC §3), as plain JSON-ready dicts.

Every function returns the same shape of result so that evidence files and the report can treat them alike:

    {"estimate": float, "ci95": [lo, hi], "method": str, "n_resamples": int, "seed": int | None,
     "n": int | [int, ...], "confidence": float}

("ci95" keeps its name even when another confidence level is asked for; "confidence" says which one.)
The "method" string says how the interval was actually obtained, including any fallback, so a reader of the
evidence can tell a real BCa interval from a degenerate-sample shortcut. No value is ever NaN or infinite,
because JSON cannot carry them: inputs for which no honest finite interval exists raise a ValueError instead.
"""
from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
from scipy import stats


def _as_1d(name: str, values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _result(estimate, lo, hi, method, n_resamples, seed, n, confidence, **extra) -> dict:
    out = {"estimate": float(estimate), "ci95": [float(lo), float(hi)], "method": method,
           "n_resamples": int(n_resamples), "seed": seed, "n": n, "confidence": float(confidence)}
    out.update(extra)
    return out


def _takes_axis(statistic) -> bool:
    try:
        return "axis" in inspect.signature(statistic).parameters
    except (TypeError, ValueError):     # builtins without a signature: let scipy call them one sample at a time
        return False


def auroc(labels, scores) -> float | None:
    """Area under the ROC curve of `scores` for the boolean `labels` (ties count half: the Mann-Whitney U over
    positives x negatives), or None when only one class is present."""
    labels, scores = np.asarray(labels, bool), np.asarray(scores, float)
    if labels.all() or not labels.any():
        return None
    return float(stats.mannwhitneyu(scores[labels], scores[~labels]).statistic / (labels.sum() * (~labels).sum()))


def bootstrap_ci(data, statistic, *, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                 method: str = "BCa", paired: bool = False, vectorized: bool | None = None,
                 return_draws: bool = False) -> dict:
    """Bootstrap CI of `statistic(*data)` via scipy.stats.bootstrap, with fallbacks that never return NaN.

    data: a tuple of 1-D arrays (a bare 1-D array is taken as a one-sample tuple). paired=True resamples the
    arrays together (same row indices), as needed for correlations or per-prompt differences.
    statistic: called as statistic(*samples) or, if it takes an `axis` keyword (or vectorized=True), as
    statistic(*samples, axis=-1) on stacked resamples -- much faster.

    Fallbacks, in order, each named in the returned "method":
      * every sample constant -> every resample is identical, so the statistic cannot vary: CI = [est, est],
        method "degenerate: constant sample" (scipy's BCa would return NaN here);
      * BCa undefined (NaN or an exception, e.g. a near-degenerate jackknife) -> percentile interval of the
        same kind of bootstrap distribution;
      * the statistic is NaN on some resamples (e.g. a correlation on a resample that happens to be constant)
        -> percentile interval of the finite resamples, with the number dropped stated in "method".
    Raises ValueError when a sample has fewer than 2 observations: a bootstrap of one value says nothing about
    its uncertainty and JSON cannot carry an infinite interval, so the caller must decide what to report.
    With return_draws=True the result also has "draws" (np.ndarray of the bootstrap distribution; not JSON).
    """
    _check_confidence(confidence)
    if isinstance(data, np.ndarray) and data.ndim == 1:
        data = (data,)
    samples = tuple(_as_1d(f"data[{i}]", d) for i, d in enumerate(data))
    if not samples:
        raise ValueError("data: expected at least one sample")
    ns = [len(s) for s in samples]
    if paired and len(set(ns)) != 1:
        raise ValueError(f"paired bootstrap needs samples of equal length, got {ns}")
    if min(ns) < 2:
        raise ValueError(f"need at least 2 observations per sample for a bootstrap CI, got n={ns}; "
                         "report such an estimate without a CI or pool more data")
    if n_resamples < 2:
        raise ValueError(f"n_resamples must be >= 2, got {n_resamples}")
    if vectorized is None:
        vectorized = _takes_axis(statistic)
    estimate = float(np.asarray(statistic(*samples, axis=-1) if vectorized else statistic(*samples)))
    if not math.isfinite(estimate):
        raise ValueError(f"statistic is not finite on the data (got {estimate})")
    n_report = ns[0] if (len(samples) == 1 or paired) else ns
    common = dict(n_resamples=n_resamples, seed=seed, n=n_report, confidence=confidence)

    if all(np.ptp(s) == 0 for s in samples):
        out = _result(estimate, estimate, estimate, "degenerate: constant sample", **common)
        if return_draws:
            out["draws"] = np.full(n_resamples, estimate)
        return out

    def run(m):
        # A fresh generator per call: the percentile retry then sees the same resamples as the BCa attempt.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            return stats.bootstrap(samples, statistic, n_resamples=n_resamples, vectorized=vectorized,
                                   paired=paired, confidence_level=confidence, method=m,
                                   rng=np.random.default_rng(seed))

    used = method
    try:
        res = run(method)
        lo, hi = res.confidence_interval.low, res.confidence_interval.high
    except (ValueError, FloatingPointError, ZeroDivisionError) as e:
        if method.lower() == "percentile":
            raise
        res, lo, hi = None, math.nan, math.nan
        used = f"percentile ({method} failed: {type(e).__name__})"
    if res is not None and not (math.isfinite(lo) and math.isfinite(hi)) and method.lower() != "percentile":
        used = f"percentile ({method} undefined)"
    if res is None:
        res = run("percentile")
    draws = np.asarray(res.bootstrap_distribution, dtype=float).ravel()
    if used != method:
        lo, hi = np.nan, np.nan                 # recompute below from the bootstrap distribution
    if not (math.isfinite(lo) and math.isfinite(hi)):
        finite = draws[np.isfinite(draws)]
        if len(finite) < max(2, len(draws) // 2):
            raise ValueError(f"statistic undefined on {len(draws) - len(finite)} of {len(draws)} resamples; "
                             "no bootstrap CI")
        alpha = 1.0 - confidence
        lo, hi = np.percentile(finite, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        if used == method:
            used = "percentile"
        if len(finite) < len(draws):
            used += f" ({len(draws) - len(finite)} of {len(draws)} resamples undefined, dropped)"
    out = _result(estimate, lo, hi, used, **common)
    if return_draws:
        out["draws"] = draws
    return out


def _pearson(x, y, axis=-1):
    """Pearson r along `axis`, NaN where either side is constant (vectorised for the bootstrap)."""
    xm = x - x.mean(axis=axis, keepdims=True)
    ym = y - y.mean(axis=axis, keepdims=True)
    den = np.sqrt((xm * xm).sum(axis=axis) * (ym * ym).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xm * ym).sum(axis=axis) / den
    return np.clip(r, -1.0, 1.0)


def _spearman(x, y, axis=-1):
    return _pearson(stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis), axis=axis)


def _correlation_ci(x, y, stat, name, *, n_resamples, seed, confidence, method):
    _check_confidence(confidence)
    x, y = _as_1d("x", x), _as_1d("y", y)
    if len(x) != len(y):
        raise ValueError(f"{name}: x and y differ in length ({len(x)} vs {len(y)})")
    if len(x) < 2:
        raise ValueError(f"{name}: need at least 2 pairs, got {len(x)}")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        # A constant side carries no information about association. NaN is not reportable, so report
        # "no correlation" with the widest possible interval -- honest, and it cannot pass any check.
        return _result(0.0, -1.0, 1.0, "degenerate: constant input", 0, seed, len(x), confidence)
    return bootstrap_ci((x, y), stat, n_resamples=n_resamples, seed=seed, confidence=confidence, method=method,
                        paired=True, vectorized=True)


def pearson_ci(x, y, *, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
               method: str = "BCa") -> dict:
    """Pearson correlation with a paired-bootstrap CI (rows resampled as (x, y) pairs)."""
    return _correlation_ci(x, y, _pearson, "pearson_ci", n_resamples=n_resamples, seed=seed,
                           confidence=confidence, method=method)


def spearman_ci(x, y, *, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                method: str = "BCa") -> dict:
    """Spearman rank correlation with a paired-bootstrap CI. The bootstrap resamples row indices (as scipy does
    for paired data: the same resamples, the same jackknife) and ranks each resample by counting how often each of
    the sample's distinct values was drawn, instead of sorting every resample: the same average ranks, bit for
    bit (tests/test_stats.py), several times faster."""
    x, y = _as_1d("x", x), _as_1d("y", y)
    if len(x) != len(y) or len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return _correlation_ci(x, y, _spearman, "spearman_ci", n_resamples=n_resamples, seed=seed,
                               confidence=confidence, method=method)
    _check_confidence(confidence)
    rank_x, rank_y = _counted_ranks(x), _counted_ranks(y)
    stat = lambda i, axis=-1: _pearson(rank_x(i), rank_y(i), axis=axis)   # noqa: E731
    return bootstrap_ci((np.arange(len(x), dtype=float),), stat, n_resamples=n_resamples, seed=seed,
                        confidence=confidence, method=method, vectorized=True)


def _counted_ranks(v: np.ndarray):
    """f(i): the average ranks (scipy.stats.rankdata's) of v[i] along the last axis, for integer-valued index
    arrays i of shape (..., m) drawn from range(len(v))."""
    u, group = np.unique(v, return_inverse=True)

    def ranks(i):
        g = group[np.asarray(i, dtype=np.int64)]
        lead = g.shape[:-1]
        rows = int(np.prod(lead)) if lead else 1
        flat = g.reshape(rows, -1)
        cnt = np.bincount((np.arange(rows)[:, None] * len(u) + flat).ravel(),
                          minlength=rows * len(u)).reshape(rows, len(u)).astype(float)
        cum = np.cumsum(cnt, axis=1)
        return np.take_along_axis(cum - (cnt - 1) / 2, flat, axis=1).reshape(g.shape)
    return ranks


def mean_ci_normal(values, *, confidence: float = 0.95) -> dict:
    """Mean +- z * standard error. Cheap; meant for large Monte-Carlo samples (thousands of policy samples),
    where the central limit theorem makes the bootstrap an expensive way to get the same answer.
    Adds "se" (the standard error) to the result. A constant sample gives a zero-width interval."""
    _check_confidence(confidence)
    v = _as_1d("values", values)
    if len(v) < 2:
        raise ValueError(f"mean_ci_normal: need at least 2 observations, got {len(v)}")
    m = float(v.mean())
    se = float(v.std(ddof=1) / math.sqrt(len(v)))
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return _result(m, m - z * se, m + z * se, "normal approximation (mean +- z*se)", 0, None, len(v), confidence,
                   se=se)


def combine_ci(draws, sampling_se: float, confidence: float = 0.95, *, estimate: float | None = None,
               symmetric: bool = False) -> dict:
    """CI for an estimate with two independent error sources: the rubric (model) uncertainty, represented by
    `draws` (the estimate recomputed under rubrics refitted on resampled gold), and Monte-Carlo sampling error
    with standard error `sampling_se` (finite policy samples / prompts).

    The exact target would be the percentile interval of draws + N(0, sampling_se^2). We compute it
    deterministically instead of by adding random noise: take the percentile interval of the draws around the
    point estimate, and widen each side's half-width in quadrature,
        hw_side = sqrt(hw_draws_side^2 + (z * sampling_se)^2).
    This is exact when the draws are normal and keeps the asymmetry of a skewed rubric distribution otherwise.
    `estimate` (the value under the rubric fitted on all gold) defaults to the median of the draws; if it lies
    outside the draws' interval, that side's rubric half-width counts as 0 rather than negative.
    symmetric=True gives both sides the larger rubric half-width. Why a caller wants it: refits on resampled
    gold mostly *lose* credit (a wrong LUT entry rarely matches what a policy produces), so the draws sit below
    the full fit, but whether the full fit itself under- or over-credits a policy depends on where its own
    errors fall, which the draws cannot tell (measured: a run's exact quality 0.0075 *above* the full fit's
    estimate, outside the asymmetric interval, on one world; 0.0012 below it on another).
    """
    _check_confidence(confidence)
    d = np.asarray(draws, dtype=float).ravel()
    d = d[np.isfinite(d)]
    if len(d) < 2:
        raise ValueError(f"combine_ci: need at least 2 finite draws, got {len(d)}")
    if not (math.isfinite(sampling_se) and sampling_se >= 0):
        raise ValueError(f"combine_ci: sampling_se must be a finite number >= 0, got {sampling_se!r}")
    center = float(np.median(d)) if estimate is None else float(estimate)
    if not math.isfinite(center):
        raise ValueError(f"combine_ci: estimate must be finite, got {estimate!r}")
    alpha = 1.0 - confidence
    q_lo, q_hi = np.percentile(d, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    hw_lo, hw_hi = max(center - q_lo, 0.0), max(q_hi - center, 0.0)
    if symmetric:
        hw_lo = hw_hi = max(hw_lo, hw_hi)
    zse = float(stats.norm.ppf(0.5 + confidence / 2)) * sampling_se
    lo, hi = center - math.hypot(hw_lo, zse), center + math.hypot(hw_hi, zse)
    method = ("rubric-bootstrap percentile" + (", larger side both ways," if symmetric else "")
              + " widened in quadrature by z*sampling_se")
    return _result(center, lo, hi, method,
                   len(d), None, len(d), confidence, sampling_se=float(sampling_se),
                   rubric_halfwidths=[float(hw_lo), float(hw_hi)])
