"""Confidence intervals for the mean of a bounded quantity that hold at small samples and near the ends of the
range, and for sums of such means over independent samples. Generic: numbers in, numbers out.

Why not the normal (or t) interval: with 25 labels a cell and a true mean near 0 or 1 it under-covers badly, and
when every label is equal it has zero width ("[1.000, 1.000]" around a true 0.995). A bounded quantity allows an
interval that uses the range instead: a population can hide a small share of values at the far end of it that a
small sample never shows, and only an interval that allows for that covers at every sample size.

Method: Gaffke (2005) and Learned-Miller & Thomas (2019, "A new confidence interval for the mean of a bounded
random variable"). For n independent draws x_1..x_n of a quantity in [lo, hi], the upper bound of the mean is
the (1 - a/2) quantile of

    T_hi = D_0 * hi + sum_i D_i x_i,      (D_0, ..., D_n) ~ Dirichlet(1, ..., 1)

-- a Bayesian bootstrap with one extra observation at the top of the range -- and the lower bound the a/2
quantile of T_lo (the extra observation at lo). For a quantity taking two values this is exactly the binomial
(Clopper-Pearson) interval (25 labels all 1: lower bound 0.025^(1/25) = 0.863); for other distributions its
coverage is conjectured (no counterexample in the authors' or later simulations) and measured here on a grid
(world/experiments/interval_coverage.py, docs/intervals.md). It is never of zero width, and in the middle of the range it is
about as wide as Student's t.

Sums. A balanced mean over families, a difference between two runs, and the two terms of a prediction-powered
estimate are weighted sums of means of independent samples. Their statistic is the weighted sum of the samples'
Dirichlet means plus ONE pseudo-observation for the whole sum, placed in each draw at the sample where it pulls the
sum furthest towards the pessimistic end (a term with a negative weight is pulled towards the top of its range for
a lower bound). With one sample this is Gaffke's statistic. One pseudo-observation, not one per sample, follows the
worst case it stands for: a share of values hidden in small samples moves a sum most when it sits in the single
sample where it weighs most (the same reasoning as Fay & Feuer's 1997 gamma interval for weighted sums of Poisson
counts, which adds one count at the largest weight); a pseudo-observation in every sample would widen a balanced
mean over six families by a sixfold tail allowance (measured: docs/intervals.md). Uncertainties of the samples'
means combine like variances, in quadrature.

Prediction-powered cells (`ppi_cells`): the proxy is first turned into a prediction h in the label range (the
least-squares line of the gold labels on the proxy, clipped to the range), then
theta = mean(lam * h over the unlabelled rows) + mean(y - lam * h over the gold rows), each term a bounded sample
of its own. A valid interval must allow for a hidden share of rows whose label is far from its prediction, and
that allowance grows with lam (the rectifier y - lam * h spans a wider range than y), so lam is chosen to minimise
the interval's width, from 0 (gold only) to 1 -- not PPI++'s variance-optimal weight, which ignores the range.

Monte Carlo: `draws` (default 10,000) Dirichlet draws per sample; the boundary weight D_0 ~ Beta(1, n) on a
stratified grid of its quantiles (exact for all-equal samples up to 1/draws), the other weights exponential; for a
sample of more than MAX_EXACT values (the unlabelled rows) the Dirichlet mean of the values is drawn from the
normal with its exact mean and variance. A bound is an order statistic of the draws, on the conservative side
of the quantile.
Each sample's draws come from its own seeded stream (`stream`): a bound does not depend on what else is computed.

Batches: every function takes a leading batch axis (rows = independent replicates sharing one stream's Dirichlet
weights); the coverage harness runs thousands of replicates through exactly this code.
"""
from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

DRAWS = 10000
DRAW_DTYPE = np.float32  # the Monte-Carlo draws: their noise (1e-3) dwarfs float32 rounding (1e-7); half the memory
MAX_EXACT = 512          # samples above this many values: the Dirichlet mean's normal shape (see draw)
SELECT_DRAWS = 500      # draws on which lam is chosen
LAMBDAS = np.linspace(0.0, 1.0, 11)
METHOD = "Gaffke / Learned-Miller-Thomas bounded-mean interval"
METHOD_LONG = ("Gaffke / Learned-Miller-Thomas bound for the mean of a bounded quantity (a Dirichlet-weighted mean "
               "with one pseudo-observation at the pessimistic end of the label range; exactly Clopper-Pearson for "
               "two-valued labels); balanced means and deltas through the same statistic over the independent "
               "cells, with one pseudo-observation for the whole sum where it pulls furthest")


def check_range(lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"range: expected finite lo < hi, got [{lo!r}, {hi!r}]")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def stream(seed: int, *key) -> np.random.Generator:
    """The generator of one sample's draws, from the audit's seed and a key naming the sample (run, family, part):
    the same whatever else is drawn, and in whatever order."""
    h = hashlib.sha256(repr(key).encode()).digest()
    return np.random.default_rng([int(seed), *np.frombuffer(h[:16], dtype=np.uint32).tolist()])


@dataclass
class Sample:
    """Monte-Carlo draws of the Gaffke statistic of an iid sample of a quantity in [lo, hi], kept in two pieces:
    `rest`, the Dirichlet(1, ..., 1) mean of the values (shape (batch..., draws)), and `d0`, the pseudo-
    observation's weight D_0 ~ Beta(1, n) (shape (draws,)): T = rest - d0 * (rest - end). `fixed` marks a part
    known only to lie in [lo, hi] (a worst case: it enters every bound at its pessimistic end)."""
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    rest: np.ndarray
    d0: np.ndarray
    fixed: bool = False

    @property
    def low(self) -> np.ndarray:
        """T with the pseudo-observation at the lower end (the statistic of a lower bound)."""
        return self.rest - self.d0 * (self.rest - self.lo[..., None].astype(DRAW_DTYPE))

    @property
    def high(self) -> np.ndarray:
        return self.rest + self.d0 * (self.hi[..., None].astype(DRAW_DTYPE) - self.rest)

    def scaled(self, c) -> "Sample":
        """The sample of c * x for c >= 0 (per batch row)."""
        c = np.asarray(c, float)
        if np.any(c < 0):
            raise ValueError("scaled: c must be >= 0 (give the term a negative weight instead)")
        return Sample(self.mean * c, self.lo * c, self.hi * c, self.rest * c[..., None].astype(DRAW_DTYPE), self.d0,
                      self.fixed)


def _beta1n(rng: np.random.Generator, n: int, draws: int) -> np.ndarray:
    """D_0 ~ Beta(1, n) on a stratified grid of its quantiles, in random order."""
    u = (rng.permutation(draws) + 0.5) / draws
    return (-np.expm1(np.log1p(-u) / n)).astype(DRAW_DTYPE)          # 1 - (1 - u)^(1/n)


def draw(values, lo, hi, rng: np.random.Generator, draws: int = DRAWS) -> Sample:
    """The Gaffke statistic's draws for `values` (shape (batch..., n), every value in [lo, hi])."""
    x = np.asarray(values)                     # no sorting needed: the Dirichlet weights are exchangeable
    x = x if np.issubdtype(x.dtype, np.floating) else x.astype(float)
    lo = np.broadcast_to(np.asarray(lo, float), x.shape[:-1]).copy()
    hi = np.broadcast_to(np.asarray(hi, float), x.shape[:-1]).copy()
    n = x.shape[-1]
    if n == 0:
        raise ValueError("draw: empty sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("draw: values contain NaN or infinite entries")
    if not np.all(lo <= hi):
        raise ValueError("draw: range with lo > hi")
    tol = 1e-9 * np.maximum(hi - lo, 1.0)
    x_min, x_max = x.min(-1), x.max(-1)
    if np.any(x_min < lo - tol) or np.any(x_max > hi + tol):
        raise ValueError(f"draw: values reach [{x_min.min():.6g}, {x_max.max():.6g}], outside the stated "
                         f"range [{lo.min():g}, {hi.max():g}]")
    if n <= MAX_EXACT:
        x = np.clip(x, lo[..., None], hi[..., None])
        g = rng.standard_exponential((draws, n), dtype=DRAW_DTYPE)
        rest = (x.astype(DRAW_DTYPE) @ g.T) / g.sum(1)
        mean = x.mean(-1)
    else:
        # the Dirichlet(1, ..., 1) mean of many values: its exact mean and variance (the population variance over
        # n + 1), normal in shape -- its skewness is that of x over sqrt(n), negligible here and beside the gold
        # term it is added to
        return _normal_sample(x.mean(-1, dtype=float), x.std(-1, dtype=float), n, lo, hi, rng, draws)
    return Sample(mean, lo, hi, rest, _beta1n(rng, n, draws))


def _normal_sample(mean, std, n: int, lo, hi, rng: np.random.Generator, draws: int) -> Sample:
    """The Gaffke statistic's draws for more than MAX_EXACT values, from their mean and (population) std alone."""
    mean = np.clip(mean, lo, hi)
    sd = std / np.sqrt(n + 1)
    rest = (mean[..., None] + sd[..., None] * rng.standard_normal(draws)).astype(DRAW_DTYPE)
    return Sample(mean, lo, hi, rest, _beta1n(rng, n, draws))


@dataclass
class UnlabelledSummary:
    """A cell's unlabelled rows given by their prediction's statistics instead of their proxies (more than MAX_EXACT
    rows; audit.samples.cells): the prediction line they were computed for, and the count, mean, population std,
    minimum and maximum of h = clip(intercept + slope * proxy, lo, hi) over them."""
    intercept: float
    slope: float
    n: int
    mean: float
    std: float
    min: float
    max: float


def fixed(lo, hi, shape=(), draws: int = DRAWS) -> Sample:
    """A part known only to lie in [lo, hi] (worst case both ways), reported at its midpoint."""
    lo, hi = np.broadcast_to(np.asarray(lo, float), shape).copy(), np.broadcast_to(np.asarray(hi, float), shape).copy()
    mid = (lo + hi) / 2
    return Sample(mid, lo, hi, np.repeat(mid[..., None], draws, -1).astype(DRAW_DTYPE), np.zeros(draws, DRAW_DTYPE),
                  fixed=True)


def _rank(n_draws: int, confidence: float) -> int:
    """0-based index of the order statistic that bounds at level (1 - confidence)/2: the k-th smallest of B draws
    sits at quantile level k / (B + 1) on average, so k = floor((1 - confidence)/2 * (B + 1)), never above it."""
    return max(int(np.floor((1.0 - confidence) / 2 * (n_draws + 1))) - 1, 0)


def lower_bound(t: np.ndarray, confidence: float) -> np.ndarray:
    """The (1 - confidence)/2 quantile of draws t (last axis), as an order statistic at or below it."""
    k = _rank(t.shape[-1], confidence)
    return np.partition(t, k, axis=-1)[..., k]


def upper_bound(t: np.ndarray, confidence: float) -> np.ndarray:
    """The (1 + confidence)/2 quantile of draws t (last axis), as an order statistic at or above it."""
    k = t.shape[-1] - 1 - _rank(t.shape[-1], confidence)
    return np.partition(t, k, axis=-1)[..., k]


def statistics(terms) -> tuple:
    """(T_low, T_high): the draws of sum_k w_k * mean_k's statistic for a lower and an upper bound. Every sample
    contributes its Dirichlet mean; one pseudo-observation is added for the whole sum, in each draw at the sample
    where it pulls the sum furthest towards the pessimistic end (w_k D_0k times the distance of that sample's mean
    to the end of its range that lowers -- or raises -- the sum). Worst-case parts enter at their ends."""
    base, pull_lo, pull_hi, fix_lo, fix_hi = 0.0, 0.0, 0.0, 0.0, 0.0
    for w, s in terms:
        if s.fixed:
            fix_lo, fix_hi = fix_lo + w * (s.lo if w > 0 else s.hi), fix_hi + w * (s.hi if w > 0 else s.lo)
            continue
        base = base + w * s.rest
        if not np.any(s.hi > s.lo):
            continue                      # a constant part (e.g. lam = 0 times anything): it pulls nothing
        lo_end, hi_end = s.lo[..., None].astype(DRAW_DTYPE), s.hi[..., None].astype(DRAW_DTYPE)
        down, up = (s.rest - lo_end, hi_end - s.rest) if w > 0 else (hi_end - s.rest, s.rest - lo_end)
        wd = abs(w) * s.d0
        pull_lo = np.maximum(pull_lo, np.multiply(down, wd, out=down))
        pull_hi = np.maximum(pull_hi, np.multiply(up, wd, out=up))
    fix_lo = np.asarray(fix_lo, dtype=DRAW_DTYPE)[..., None]
    fix_hi = np.asarray(fix_hi, dtype=DRAW_DTYPE)[..., None]
    return base - pull_lo + fix_lo, base + pull_hi + fix_hi


def interval(terms, confidence: float = 0.95) -> dict:
    """The interval of sum_k w_k * mean_k over independent samples, terms = [(w_k, Sample_k), ...]:
    {"estimate", "ci95": [lo, hi]} (arrays of the batch shape when the samples are batched)."""
    _check_confidence(confidence)
    terms = [(float(w), s) for w, s in terms if w != 0]
    if not terms:
        raise ValueError("interval: no terms")
    est = sum(w * s.mean for w, s in terms)
    low, high = statistics(terms)
    lo_b, hi_b = lower_bound(low, confidence).astype(float), upper_bound(high, confidence).astype(float)
    # what the sum can be at all, summed in extended precision: six weights of 1/6 times 1 must give 1.0
    ld = np.longdouble
    r_lo = np.sum([ld(w) * (s.lo if w > 0 else s.hi) for w, s in terms], axis=0)
    r_hi = np.sum([ld(w) * (s.hi if w > 0 else s.lo) for w, s in terms], axis=0)
    r_lo, r_hi = r_lo.astype(float), r_hi.astype(float)
    # the draws put each bound on its side of the estimate; Monte-Carlo error must not carry it across
    lo_b, hi_b = np.minimum(lo_b, est), np.maximum(hi_b, est)
    # rounding in the draws' sums (float32) must not exclude a range end the interval reaches: round outwards by a
    # margin far below any reported digit, within what the sum can be
    eps = 1e-6 * np.maximum(np.abs(r_hi - r_lo), 1.0)
    lo_b, hi_b = np.maximum(lo_b - eps, r_lo), np.minimum(hi_b + eps, r_hi)
    if np.ndim(est) == 0:
        return {"estimate": float(est), "ci95": [float(lo_b), float(hi_b)], "confidence": confidence}
    return {"estimate": est, "ci95": [lo_b, hi_b], "confidence": confidence}


def mean_interval(values, lo: float, hi: float, *, confidence: float = 0.95, seed: int = 0, key=("mean",),
                  draws: int = DRAWS) -> dict:
    """The interval of one sample's mean."""
    check_range(lo, hi)
    s = draw(values, lo, hi, stream(seed, *key), draws)
    return {**interval([(1.0, s)], confidence), "n": int(np.shape(values)[-1]), "range": [lo, hi],
            "method": METHOD}


# ------------------------------------------------------------------------------------ prediction-powered cells
@dataclass
class Cell:
    """A run x family cell (or a batch of replicates of one): the estimate, lam, and the parts that balanced
    means and deltas combine. parts: the rectifier y - lam h over the gold rows and lam * h over the unlabelled
    rows (the gold labels alone when no row is unlabelled); gold_only: the gold labels alone (lam = 0)."""
    estimate: np.ndarray
    lam: np.ndarray
    parts: list
    gold_only: list
    intercept: np.ndarray      # the prediction line: h(v) = clip(intercept + slope * v, lo, hi)
    slope: np.ndarray

    _cache: dict = field(default_factory=dict, repr=False)

    def interval(self, confidence: float = 0.95) -> dict:
        if confidence not in self._cache:
            self._cache[confidence] = interval(self.parts, confidence)
        return self._cache[confidence]

    def gold_only_interval(self, confidence: float = 0.95) -> dict:
        return interval(self.gold_only, confidence)


def prediction_line(y, f):
    """(intercept, slope) per batch row: the least-squares line of the gold labels y on the proxy f (slope 0 where
    f is constant); the prediction is h(v) = clip(intercept + slope * v, lo, hi)."""
    fm, ym = f.mean(-1, keepdims=True), y.mean(-1, keepdims=True)
    vf = ((f - fm) ** 2).mean(-1)
    cov = ((f - fm) * (y - ym)).mean(-1)
    slope = np.where(vf > 0, cov / np.where(vf > 0, vf, 1.0), 0.0)
    return ym[..., 0] - slope * fm[..., 0], slope


# A cell's gold-row weights are a function of (seed, key, n, draws) alone, and the corruption stress re-decides
# the same cells dozens of times with only the proxy changed (audit.samples.stress): the exponentials are most of a
# cell's cost (~4 ms of 5 at 60 gold rows and 10,000 draws), so they are kept, least recently used first out,
# within WEIGHT_CACHE_BYTES. The same arrays in the same operations: a cached cell is bit for bit an uncached one.
WEIGHT_CACHE_BYTES = 256 * 2**20
_weights: "OrderedDict[tuple, tuple]" = OrderedDict()
_weights_bytes = 0


def _gold_weights(seed: int, key: tuple, n: int, draws: int) -> tuple:
    """(grp, sizes, g, s, d0): the Dirichlet weights of n gold rows from their stream, as _paired_draws uses them
    (grp and sizes None up to MAX_EXACT rows, else each row's random group and the group sizes), read-only."""
    global _weights_bytes
    memo = (int(seed), repr(tuple(key)), int(n), int(draws))
    if memo in _weights:
        _weights.move_to_end(memo)
        return _weights[memo]
    rng = stream(seed, *key)
    grp = sizes = None
    if n <= MAX_EXACT:
        g = rng.standard_exponential((draws, n), dtype=DRAW_DTYPE)
    else:
        grp = rng.permutation(n) % MAX_EXACT
        sizes = np.bincount(grp, minlength=MAX_EXACT).astype(float)
        g = rng.standard_gamma(sizes, size=(draws, MAX_EXACT)).astype(DRAW_DTYPE)
    out = (grp, sizes, g, g.sum(1), _beta1n(rng, n, draws))
    for a in out:
        if a is not None:
            a.flags.writeable = False
    size = sum(a.nbytes for a in out if a is not None)
    if size <= WEIGHT_CACHE_BYTES:
        _weights[memo] = out
        _weights_bytes += size
        while _weights_bytes > WEIGHT_CACHE_BYTES:
            _weights_bytes -= sum(a.nbytes for a in _weights.popitem(last=False)[1] if a is not None)
    return out


def _paired_draws(x, z, seed: int, key: tuple, draws: int):
    """(D_0, Dirichlet mean of x, the same weights' mean of z) for two columns of the same rows (batch..., n), the
    weights from the stream of (seed, key). More than MAX_EXACT rows are put in random groups (a group mean
    carries a Gamma(size) weight)."""
    n = x.shape[-1]
    grp, sizes, g, s, d0 = _gold_weights(seed, key, n, draws)
    if grp is None:
        xg, zg = x.astype(DRAW_DTYPE), z.astype(DRAW_DTYPE)
    else:
        onehot = (grp[:, None] == np.arange(MAX_EXACT)[None, :]) / sizes
        xg, zg = (x @ onehot).astype(DRAW_DTYPE), (z @ onehot).astype(DRAW_DTYPE)
    return d0, (xg @ g.T) / s, (zg @ g.T) / s


def ppi_cells(y, f, f_u, lo: float, hi: float, *, confidence: float = 0.95, seed: int = 0, key=(),
              draws: int = DRAWS) -> Cell:
    """A cell's mean label from its gold labels y (proxy f on the same rows) and the proxy f_u on its unlabelled
    rows, every label in [lo, hi]; arrays (batch..., n) and (batch..., N). lam = 0 is the gold-only estimate.
    One set of Dirichlet weights on the gold rows serves every lam (the rectifier's statistic is T_y - lam T_h),
    so the chosen lam's interval is never wider than the gold-only one, which is its lam = 0 case."""
    check_range(lo, hi)
    y, f = (np.atleast_1d(np.asarray(v, float)) for v in (y, f))
    summary = f_u if isinstance(f_u, UnlabelledSummary) else None
    if summary is not None:
        if y.ndim != 1 or summary.n <= MAX_EXACT:
            raise ValueError("ppi_cells: an UnlabelledSummary stands for more than MAX_EXACT rows of one cell")
        f_u = np.zeros(0)                   # the unlabelled values are not used: the summary stands for them
    f_u = np.atleast_1d(np.asarray(f_u))          # float32 unlabelled proxies stay float32 (the harness's millions)
    f_u = f_u if np.issubdtype(f_u.dtype, np.floating) else f_u.astype(float)
    if y.shape != f.shape:
        raise ValueError(f"ppi_cells: labels of shape {y.shape} but proxy values of shape {f.shape} on them")
    if y.shape[-1] < 1:
        raise ValueError("ppi_cells: no gold rows")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(f)) and np.all(np.isfinite(f_u))):
        raise ValueError("ppi_cells: labels or proxy values contain NaN or infinite entries")
    tol = 1e-9 * (hi - lo)
    if y.min() < lo - tol or y.max() > hi + tol:
        raise ValueError(f"ppi_cells: labels reach [{y.min():.6g}, {y.max():.6g}], outside the stated range "
                         f"[{lo:g}, {hi:g}]")
    y = np.clip(y, lo, hi)
    batch = y.shape[:-1]
    if f_u.shape[-1] == 0 and summary is None:          # every row labelled: nothing for the proxy to add
        gold = draw(y, lo, hi, stream(seed, *key, "gold"), draws)
        zero = np.zeros(batch)
        return Cell(gold.mean, zero, [(1.0, gold)], [(1.0, gold)], gold.mean, zero)
    a, b = prediction_line(y, f)
    line = lambda v: np.clip(a[..., None] + b[..., None] * v, lo, hi)
    h = line(f)
    if summary is None:
        h_u = line(f_u)
        u_min, u_max = h_u.min(-1), h_u.max(-1)
    else:
        if (float(a), float(b)) != (summary.intercept, summary.slope):
            raise ValueError("ppi_cells: the UnlabelledSummary was computed for another prediction line "
                             f"({summary.intercept!r}, {summary.slope!r}; the gold rows give {float(a)!r}, {float(b)!r})")
        u_min, u_max = np.float64(summary.min), np.float64(summary.max)
    h_lo = np.minimum(h.min(-1), u_min)[..., None]
    h_hi = np.maximum(h.max(-1), u_max)[..., None]

    d0, ry, rh = _paired_draws(y, h, seed, (*key, "gold"), draws)
    if summary is None:
        unl = draw(h_u, h_lo[..., 0], h_hi[..., 0], stream(seed, *key, "unlabelled"), draws)
    else:   # as draw() does for more than MAX_EXACT values, from their statistics
        unl = _normal_sample(np.float64(summary.mean), np.float64(summary.std), summary.n, np.array(h_lo[..., 0], float),
                             np.array(h_hi[..., 0], float), stream(seed, *key, "unlabelled"), draws)

    def rectifier(lam, k=None):
        """The statistic of y - lam h over the gold rows (its first k draws): it lies in [lo - lam h_hi,
        hi - lam h_lo]."""
        lam = np.asarray(lam, float)
        lam32 = lam[..., None].astype(DRAW_DTYPE)
        return Sample((y - lam[..., None] * h).mean(-1), lo - lam * h_hi[..., 0], hi - lam * h_lo[..., 0],
                      ry[..., :k] - lam32 * rh[..., :k], d0[:k])

    def unlabelled(lam, k=None):
        return Sample(lam * unl.mean, lam * unl.lo, lam * unl.hi, lam[..., None].astype(DRAW_DTYPE) * unl.rest[..., :k],
                      unl.d0[:k])

    # lam: the narrowest interval on the first SELECT_DRAWS draws (the width is smooth in lam; a few draws price it).
    # For one lam the two parts' statistic (see `statistics`) is, per draw,
    #   T_lo = ry + lam (ru - rh) - max(d0 (ry - lo - lam (rh - h_hi)), lam d0u (ru - h_lo))
    #   T_hi = ry + lam (ru - rh) + max(d0 (hi - ry - lam (h_lo - rh)), lam d0u (h_hi - ru))
    k = min(SELECT_DRAWS, draws)
    d, y_, h_, u_, du = d0[:k], ry[..., :k], rh[..., :k], unl.rest[..., :k], unl.d0[:k]
    hl, hh = h_lo.astype(DRAW_DTYPE), h_hi.astype(DRAW_DTYPE)
    slope = u_ - h_
    pl_a, pl_b = d * (y_ - lo), d * (h_ - hh)            # rectifier pull, lower side: pl_a - lam * pl_b
    ph_a, ph_b = d * (hi - y_), d * (hl - h_)            # upper side: ph_a - lam * ph_b
    ul, uh = du * (u_ - hl), du * (hh - u_)              # unlabelled pull per unit of lam
    best_w, lam = np.full(batch, np.inf), np.zeros(batch)
    for lm in LAMBDAS:
        base = y_ + lm * slope
        t_lo = base - np.maximum(pl_a - lm * pl_b, lm * ul)
        t_hi = base + np.maximum(ph_a - lm * ph_b, lm * uh)
        w = upper_bound(t_hi, confidence) - lower_bound(t_lo, confidence)
        better = w < best_w - 1e-12
        best_w, lam = np.where(better, w, best_w), np.where(better, lm, lam)
    # on all the draws, the chosen lam must beat lam = 0 (its gold-only case), or lam is 0: never wider than gold only
    gold = [(1.0, rectifier(np.zeros(batch)))]
    chosen = [(1.0, rectifier(lam)), (1.0, unlabelled(lam))]
    ci_gold, ci_chosen = interval(gold, confidence), interval(chosen, confidence)
    keep = (ci_chosen["ci95"][1] - ci_chosen["ci95"][0]) <= (ci_gold["ci95"][1] - ci_gold["ci95"][0])
    if not np.all(keep):              # the rows where lam lost on all the draws fall back to lam = 0
        lam = np.where(keep, lam, 0.0)
        chosen = [(1.0, rectifier(lam)), (1.0, unlabelled(lam))]
    cell = Cell(chosen[0][1].mean + chosen[1][1].mean, lam, chosen, gold, a, b)
    if np.all(keep):
        cell._cache[confidence] = ci_chosen
    return cell
