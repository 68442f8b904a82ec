"""Prediction-powered inference for a mean (PPI++, Angelopoulos, Duchi, Zrnic 2023), and the classical
gold-only interval beside it. Generic: numbers in, numbers out; nothing here knows what a sample is.

    Y      gold labels of the n labelled rows          (the rectifier's data)
    Yhat   the proxy on those same n rows              (the prediction)
    Yhat_u the proxy on the N unlabelled rows          (the bulk of the data)

    theta(lam) = mean(lam * Yhat_u) + mean(Y - lam * Yhat)
    se(lam)^2  = lam^2 var(Yhat_u) / N + var(Y - lam * Yhat) / n          (normal interval)
    lam*       = cov(Y, Yhat) / ((1 + n/N) var(Yhat, Yhat_u pooled)), clipped to [0, 1]

lam = 0 is the classical mean of the gold labels; lam = 1 is plain PPI. The power-tuned lam* makes the interval
never (asymptotically) wider than the classical one, whatever the proxy's scale or quality: a proxy that does not
predict the labels gets lam near 0. This is exactly `ppi_py.ppi_mean_ci` / `ppi_py.classical_mean_ci` (the
ppi-python package, pinned in pyproject.toml; tests/test_ppi.py checks both on the same inputs), written out
here because the audit also needs the standard error and lam, to combine cells into balanced means and deltas.
Variances are the package's (ddof 0); the interval is the normal one.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(stats.norm.ppf(0.5 + confidence / 2))


def _arr(name, v) -> np.ndarray:
    a = np.asarray(v, dtype=float).ravel()
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return a


def classical_mean(y, *, confidence: float = 0.95) -> dict:
    """Mean of the gold labels with the normal interval (ppi_py.classical_mean_ci)."""
    y = _arr("y", y)
    if len(y) < 2:
        raise ValueError(f"classical_mean: need at least 2 labels, got {len(y)}")
    m, se = float(y.mean()), float(y.std() / math.sqrt(len(y)))
    z = _z(confidence)
    return {"estimate": m, "ci95": [m - z * se, m + z * se], "se": se, "n": len(y), "confidence": confidence,
            "method": "classical: mean of the gold labels, normal interval"}


def power_tuned_lambda(y, yhat, yhat_u) -> float:
    """PPI++'s variance-minimising weight of the proxy, clipped to [0, 1] (ppi_py's _calc_lam_glm, clip=True)."""
    y, yhat, yhat_u = _arr("y", y), _arr("yhat", yhat), _arr("yhat_unlabeled", yhat_u)
    n, N = len(y), len(yhat_u)
    if N == 0:
        return 0.0
    cov = float(((y - y.mean()) * (yhat - yhat.mean())).mean())
    var = float(np.var(np.concatenate([yhat, yhat_u]), ddof=1))
    if not var > 0:          # a constant proxy predicts nothing
        return 0.0
    return float(np.clip(cov / ((1.0 + n / N) * var), 0.0, 1.0))


def ppi_mean(y, yhat, yhat_u, *, lam: float | None = None, confidence: float = 0.95) -> dict:
    """PPI++ estimate of the mean label over the population the rows were drawn from, with its normal
    interval. lam=None: power-tuned. With no unlabelled rows it is the classical mean."""
    y, yhat, yhat_u = _arr("y", y), _arr("yhat", yhat), _arr("yhat_unlabeled", yhat_u)
    if len(y) != len(yhat):
        raise ValueError(f"ppi_mean: {len(y)} labels but {len(yhat)} predictions on them")
    if len(y) < 2:
        raise ValueError(f"ppi_mean: need at least 2 labelled rows, got {len(y)}")
    n, N = len(y), len(yhat_u)
    if N == 0:
        out = classical_mean(y, confidence=confidence)
        return {**out, "lam": 0.0, "n_unlabeled": 0, "method": "PPI++ with no unlabelled rows = classical mean"}
    tuned = lam is None
    lam = power_tuned_lambda(y, yhat, yhat_u) if tuned else float(lam)
    est = float((lam * yhat_u).mean() + (y - lam * yhat).mean())
    se = float(math.sqrt((lam * yhat_u).var() / N + (y - lam * yhat).var() / n))
    z = _z(confidence)
    return {"estimate": est, "ci95": [est - z * se, est + z * se], "se": se, "lam": lam, "n": n,
            "n_unlabeled": N, "confidence": confidence,
            "method": f"PPI++ ({'power-tuned' if tuned else 'fixed'} lambda {lam:.3f}), normal interval"}


def labels_to_halve(y, yhat, yhat_u, lam: float, unlabelled_var: tuple | None = None) -> int | None:
    """Gold labels needed (in all, at the same lam and the same unlabelled rows) for the interval to be half as
    wide; None when no number of labels can do it (the proxy term alone is over a quarter of the variance).
    unlabelled_var: (N, variance of yhat over them) in place of yhat_u (a summarised cell: audit.samples.cells)."""
    y, yhat = _arr("y", y), _arr("yhat", yhat)
    if unlabelled_var is None:
        yhat_u = _arr("yhat_unlabeled", yhat_u)
        N = len(yhat_u)
        b = float((lam * yhat_u).var()) / N if N else 0.0    # the proxy term, fixed by N
    else:
        N, var_u = unlabelled_var
        b = lam * lam * float(var_u) / N
    n = len(y)
    a = float((y - lam * yhat).var())                    # per-label variance of the rectifier
    target = (a / n + b) / 4.0
    if a == 0:
        return n
    if target <= b:
        return None
    return int(math.ceil(a / (target - b)))
