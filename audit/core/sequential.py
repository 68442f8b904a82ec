"""Confidence sequences for means of bounded labels drawn in rounds: intervals that stay valid however many times
they are looked at, whatever rule stops the labelling and however the labels are spread over the cells (the samples
door's "rounds" design; docs/intervals.md, "Labelling in rounds"). Generic: numbers in, numbers out.

Why not the door's fixed-n interval: each look at a fixed-n interval spends its 5%, so "label 20 more and look
again" until it looks decided under-covers; a confidence sequence covers the truth at every sample size at once
(Ville's inequality), so a look taken at any data-dependent time is covered.

**Betting** (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by betting", JRSS-B; the
`confseq` package). For observations x_i in [a_i, b_i] with conditional mean m, the capital
K_t(m) = prod_{i <= t} (1 + beta_i (x_i - m)) with predictable bets 0 <= beta_i <= c / (m - a_i) is a nonnegative
martingale from 1, so P(exists t: K_t(m) >= 1/alpha) <= alpha. The lower bound at t is the largest m that some
K_s(m), s <= t, has pushed to 1/alpha (the running intersection); the upper bound is the same on -x. Bets: the
predictable plug-in of WSR, beta_i = sqrt(2 log(1/alpha) / (H s2_{i-1})) with the running variance s2 (one fake
observation at the maximum variance), truncated at c = 3/4 of the largest safe bet -- averaged over horizons
H = 10, 20, 40, ... up to the cap (an average of test martingales is one): bets tuned to H make the sequence nearly
as narrow as a fixed-n betting interval around n = H, and the average is within ~10% of the best horizon at every
n (measured: docs/intervals.md). Two one-sided sequences at alpha/2 each (WSR's hedged capital with theta = 1/2).

**Sums over cells, labelled unevenly** (`sequence`). A delta (run minus reference on a family) and a balanced
figure are weighted sums of independent cells' means. Every cell's labels come in a seeded random order (the
draw record's); the i-th "tuple" takes the i-th label of every cell of the sum, z_i = sum_k w_k x_{k,i}: the
tuples are independent with mean sum_k w_k mu_k, so the betting sequence above applies to them. The construction
depends on positions only (a label's position in its cell's order, never on when it was drawn), so the sequence is
valid at every tuple count simultaneously: any allocation of labels to cells and any stopping rule only chooses
where to look.

**The proxy** (`track`, `choose_lambda`): prediction-powered, as the fixed door. From position PROXY_FROM on, the
label at position i is replaced by the rectifier y_i - lam h(f_i), h = clip(a + b f) the least-squares line of the
cell's labels at positions before the block (blocks (20, 40], (40, 80], ... : predictable), clipped to the range of
its own fitted values there (the rectifier's range bounds the bets); lam, one for all cells of a sum, chosen from the
labels before the block and the pool alone for the narrowest predicted interval (0 when the proxy does not pay). The
rectifier's mean is mu - lam E[h]; E[h] comes from the cell's *pool* -- its rows beyond the cap (never labelled, so
independent of every label) -- bounded per block by Maurer & Pontil's empirical Bernstein bound (2009, Thm 4) on the
pool's tuples, at a share POOL_SHARE of alpha split over the blocks (a union bound: P(miss) <= alpha_betting + delta).
With no pool (a cell no larger than the cap) lam is 0: gold labels only.

Batches: every function takes a leading batch axis (replicates); the harness (world.experiments.rounds_coverage)
runs thousands through this code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from audit.core.bounded import prediction_line

CONFIDENCE = 0.95
TRUNCATION = 0.75          # c: a bet at most 3/4 of the largest that cannot lose everything (WSR's 1/2..1)
FIRST_HORIZON = 10         # bets tuned to 10, 20, 40, ... labels, averaged
POOL_SHARE = 0.1           # of each side's alpha, spent on bounding the proxy's pool means (the rest: the betting)
PROXY_FROM = 20            # positions up to this use the gold labels alone (a line on fewer is noise)
LAMBDAS = (0.0, 0.25, 0.5, 0.75, 1.0)
TOLERANCE = 1e-6           # bisection stops within this share of the observations' range (bounds rounded outwards)
METHOD = "betting confidence sequence (Waudby-Smith & Ramdas 2024)"
METHOD_LONG = ("betting confidence sequence for the mean of a bounded label (Waudby-Smith & Ramdas 2024: predictable "
               "plug-in bets averaged over horizons 10, 20, 40, ...; valid at every number of labels at once, so at "
               "whatever round the labelling stops); deltas and balanced figures on the tuples of the cells' i-th "
               "labels in their seeded order; the proxy as a prediction from label 21 on, its pool mean bounded by "
               "empirical Bernstein")


def horizons(cap: int) -> tuple:
    """The bets' horizons: 10, 20, 40, ... up to the first at or above the cap."""
    out = [FIRST_HORIZON]
    while out[-1] < cap:
        out.append(2 * out[-1])
    return tuple(out)


def blocks(cap: int) -> list[tuple[int, int]]:
    """The proxy's blocks of positions (s, e]: the prediction for a label at a position in (s, e] is fitted on the
    cell's labels at positions 1..s. (20, 40], (40, 80], ... up to the cap."""
    out, s = [], PROXY_FROM
    while s < cap:
        out.append((s, min(2 * s, cap)))
        s *= 2
    return out


def alphas(confidence: float = CONFIDENCE, cap: int = 200) -> dict:
    """Each side's error split: the betting sequence's alpha and each proxy block's pool bound."""
    side = (1.0 - confidence) / 2
    n_blocks = max(1, len(blocks(cap)))
    return {"side": side, "betting": side * (1 - POOL_SHARE), "pool_block": side * POOL_SHARE / n_blocks}


# ------------------------------------------------------------------------------------------- one sequence
def predictable_variance(z: np.ndarray, mid, v0) -> np.ndarray:
    """s2_{i-1} for every position i (B, n): WSR's regularised running variance (as confseq's lambda_predmix_eb),
    (v0 + sum_{s < i} (z_s - mu_s)^2) / i with mu_s = (mid + sum_{r <= s} z_r) / (s + 1): one fake observation at
    the prior mean `mid` and the prior variance `v0` (the largest the observations' ranges allow)."""
    z = np.asarray(z, float)
    B, n = z.shape
    t = np.arange(1, n + 1)
    mid = np.broadcast_to(np.asarray(mid, float), (B,))
    v0 = np.broadcast_to(np.asarray(v0, float), (B,))
    mu = (mid[:, None] + np.cumsum(z, 1)) / (t + 1)
    s2 = (v0[:, None] + np.cumsum((z - mu) ** 2, 1)) / (t + 1)
    return np.maximum(np.concatenate([v0[:, None], s2[:, :-1]], 1), 1e-12)


def _log_capital(x, a, s2p, m, alpha, hz, c=TRUNCATION):
    """log of the horizon-averaged capital for the null mean m (B,), along the positions: (B, t)."""
    L = math.log(1.0 / alpha)
    d = x - m[:, None]
    gap = m[:, None] - a
    cap = np.where(gap > 0, c / np.where(gap > 0, gap, 1.0), np.inf)
    logs = np.empty((len(hz),) + x.shape)
    for k, H in enumerate(hz):
        bet = np.minimum(np.sqrt(2.0 * L / (H * s2p)), cap)
        np.cumsum(np.log1p(bet * d), axis=1, out=logs[k])
    top = logs.max(0)
    return top + np.log(np.exp(logs - top).mean(0))


def lower_bounds(x, a, b, alpha: float, hz: tuple, looks, s2p) -> np.ndarray:
    """The lower confidence sequence (running intersection) of the mean of x at each look: (B, len(looks)).
    x, a, b: (B, n) observations and each one's range; s2p: the predictable variance (predictable_variance);
    looks: tuple counts <= n (ascending). Bisection on m (the capital is nonincreasing in m); a bound is the largest
    m shown rejected, so rounding goes outwards."""
    x = np.asarray(x, float)
    a, b = (np.broadcast_to(np.asarray(v, float), x.shape) for v in (a, b))
    B, n = x.shape
    thr = math.log(1.0 / alpha)
    out = np.empty((B, len(looks)))
    floor = a.min(1)
    prev = floor.copy()
    for j, t in enumerate(looks):
        if t < 1:
            out[:, j] = floor
            continue
        xs, as_, ss = x[:, :t], a[:, :t], s2p[:, :t]
        lo, hi = prev.copy(), np.maximum(b[:, :t].max(1), prev)
        tol = TOLERANCE * np.maximum(hi - floor, 1e-12)
        while np.any(hi - lo > tol):
            m = (lo + hi) / 2
            rej = _log_capital(xs, as_, ss, m, alpha, hz).max(1) >= thr
            lo, hi = np.where(rej, m, lo), np.where(rej, hi, m)
        out[:, j] = lo
        prev = lo
    return out


# ------------------------------------------------------------------------------------------- a cell's labels
@dataclass
class Block:
    """One proxy block (s, e] of a cell: the prediction h = clip(a + b f, h_lo, h_hi) fitted on the labels at
    positions 1..s and clipped to the range of its own fitted values there (so the rectifier's range, which bounds
    the bets, is what the data before the block allow -- predictable); h at the block's labelled positions, at the
    positions before it (to choose lam) and on the pool."""
    start: int
    end: int
    h_lo: np.ndarray          # (B,)
    h_hi: np.ndarray
    h_block: np.ndarray       # (B, m): h at the labelled positions of the block (m <= e - s)
    h_before: np.ndarray      # (B, s)
    h_pool: np.ndarray        # (B, Np)
    pool_var: np.ndarray      # (B,): the variance of h over the pool (chooses lam)


@dataclass
class Track:
    """One cell's labels in draw order (or a batch of replicates of one) and what its proxy offers: per block,
    the prediction (Block) -- none before PROXY_FROM, past the labels there are, or without a pool."""
    y: np.ndarray            # (B, n) the labels at positions 1..n
    lo: float
    hi: float
    blocks: list             # Block or None, per blocks(cap)
    n_pool: int
    cap: int

    @property
    def n(self) -> int:
        return self.y.shape[1]


def track(y, f, pool, lo: float, hi: float, cap: int, *, proxy: bool = True) -> Track:
    """A cell's Track from its labels y and proxies f at positions 1..n of its draw order (arrays (B, n)) and the
    proxies of its pool (B, Np) -- its rows after the cap, never to be labelled. proxy=False: gold labels only."""
    y = np.atleast_2d(np.asarray(y, float))
    f = np.atleast_2d(np.asarray(f, float))
    pool = np.zeros((y.shape[0], 0)) if pool is None else np.atleast_2d(np.asarray(pool, float))
    if y.shape != f.shape:
        raise ValueError(f"track: labels of shape {y.shape} but proxies of shape {f.shape}")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(f)) and np.all(np.isfinite(pool))):
        raise ValueError("track: labels or proxies contain NaN or infinite entries")
    tol = 1e-9 * (hi - lo)
    if y.size and (y.min() < lo - tol or y.max() > hi + tol):
        raise ValueError(f"track: labels reach [{y.min():.6g}, {y.max():.6g}], outside [{lo:g}, {hi:g}]")
    y = np.clip(y, lo, hi)
    n, Np = y.shape[1], pool.shape[1]
    out = []
    for s, e in blocks(cap):
        if not proxy or n <= s or Np < 2:
            out.append(None)
            continue
        ia, ib = prediction_line(y[:, :s], f[:, :s])
        fit = np.clip(ia[:, None] + ib[:, None] * f[:, :s], lo, hi)
        h_lo, h_hi = fit.min(1), fit.max(1)
        h = lambda v: np.clip(ia[:, None] + ib[:, None] * v, h_lo[:, None], h_hi[:, None])   # noqa: E731
        hp = h(pool)
        out.append(Block(s, e, h_lo, h_hi, h(f[:, s:min(e, n)]), fit, hp, hp.var(1)))
    return Track(y, float(lo), float(hi), out, Np, cap)


def choose_lambda(terms, j: int, al: dict, c: float = TRUNCATION) -> np.ndarray:
    """lam for block j of a sum (one for all its cells, per replicate): among LAMBDAS, the narrowest predicted
    interval at the block's end, from the labels before the block and the pool only (predictable). The prediction
    is the betting boundary log(1/alpha)/(e beta) + beta V/2 at the bet beta the sum's variance V asks for, cut at
    c over the distance to the sum's worst case (the truncation that a rectifier's wider range forces), plus the
    pool bound's normal-size term."""
    B = terms[0][1].y.shape[0]
    if any(t.blocks[j] is None for _, t in terms):
        return np.zeros(B)
    s, e = terms[0][1].blocks[j].start, terms[0][1].blocks[j].end
    L = math.log(1 / al["betting"])
    Lp = math.log(2 / al["pool_block"])
    n_pool = min(t.n_pool for _, t in terms)
    best, choice = np.full(B, np.inf), np.zeros(B)
    for lm in LAMBDAS:
        V, g_lo, g_hi, vp = 0.0, 0.0, 0.0, 0.0
        for w, t in terms:
            bl = t.blocks[j]
            rect = t.y[:, :s] - lm * bl.h_before
            v, mu = rect.var(1) * s / max(s - 2, 1), rect.mean(1)
            down, up = mu - (t.lo - lm * bl.h_hi), (t.hi - lm * bl.h_lo) - mu
            V = V + w * w * v
            g_lo, g_hi = g_lo + abs(w) * (down if w > 0 else up), g_hi + abs(w) * (up if w > 0 else down)
            vp = vp + w * w * lm * lm * bl.pool_var
        V = np.maximum(V, 1e-12)
        width = 0.0
        for g in (g_lo, g_hi):
            beta = np.minimum(np.sqrt(2 * L / (e * V)), c / np.maximum(g, 1e-12))
            width = width + L / (e * beta) + beta * V / 2
        width = width + 2 * math.sqrt(2 * Lp) * np.sqrt(vp / n_pool)
        better = width < best - 1e-12
        best, choice = np.where(better, width, best), np.where(better, lm, choice)
    return choice


# ------------------------------------------------------------------------------------------- weighted sums
def _pool_bounds(terms, j: int, lam: np.ndarray, delta: float):
    """(low, estimate, high) of lam sum_k w_k E[h_kj] per replicate: Maurer & Pontil's empirical Bernstein bound,
    one-sided at delta each way, on the pool tuples (the l-th pool row of every cell of the sum)."""
    N = min(t.n_pool for _, t in terms)
    s = lam[:, None] * sum(w * t.blocks[j].h_pool[:, :N] for w, t in terms)
    R = lam * sum(abs(w) * (t.blocks[j].h_hi - t.blocks[j].h_lo) for w, t in terms)
    mean, var = s.mean(1), s.var(1, ddof=1)
    L = math.log(2.0 / delta)
    eps = np.sqrt(2 * var * L / N) + 7 * R * L / (3 * (N - 1))
    return mean - eps, mean, mean + eps


@dataclass
class Sum:
    """A weighted sum of independent cells' means, ready to be bounded: the tuples' observations for the lower
    side (x_lo, shifted by the pool bound's low end) and the upper side, their ranges, the predictable variance, the
    alpha each side's betting gets, and the running estimate. Built by `prepare`."""
    x_lo: np.ndarray
    a_lo: np.ndarray
    b_lo: np.ndarray
    x_hi: np.ndarray
    a_hi: np.ndarray
    b_hi: np.ndarray
    s2p: np.ndarray
    alpha: float
    hz: tuple
    estimate_path: np.ndarray     # (B, n): the running estimate after each tuple
    lo_end: float                 # what the sum can be at all
    hi_end: float
    confidence: float
    lam: np.ndarray | None = None  # (B, blocks reached): the proxy's weight chosen per block

    @property
    def n(self) -> int:
        return self.x_lo.shape[1]

    def bounds(self, looks=None) -> dict:
        """{"estimate", "ci95": [lo, hi], "n"}: arrays (B, len(looks)) at the tuple counts `looks` (default the
        last)."""
        looks = _looks(looks, self.n)
        lo_b = lower_bounds(self.x_lo, self.a_lo, self.b_lo, self.alpha, self.hz, looks, self.s2p)
        hi_b = -lower_bounds(-self.x_hi, -self.b_hi, -self.a_hi, self.alpha, self.hz, looks, self.s2p)
        lo_b, hi_b = np.maximum(lo_b, self.lo_end), np.minimum(hi_b, self.hi_end)
        return {"estimate": self.estimate_path[:, np.array(looks) - 1], "ci95": [lo_b, np.maximum(hi_b, lo_b)],
                "n": looks, "confidence": self.confidence}

    def rejected(self, m, looks=None) -> tuple:
        """(below, above): bool (B, len(looks)) whether by each look the sequence has shown the sum above m (m is
        below its lower bound) or below m (above its upper bound). One capital path per side, no bisection: what
        the coverage harness and a decision's threshold need."""
        looks = _looks(looks, self.n)
        m = np.broadcast_to(np.asarray(m, float), (self.x_lo.shape[0],))
        thr = math.log(1.0 / self.alpha)
        at = np.array(looks) - 1
        up = np.maximum.accumulate(_log_capital(self.x_lo, self.a_lo, self.s2p, m, self.alpha, self.hz), 1)
        down = np.maximum.accumulate(_log_capital(-self.x_hi, -self.b_hi, self.s2p, -m, self.alpha, self.hz), 1)
        return (up[:, at] >= thr) & (m > self.lo_end - 1e-12)[:, None], \
            (down[:, at] >= thr) & (m < self.hi_end + 1e-12)[:, None]


def _looks(looks, n: int) -> tuple:
    looks = (n,) if looks is None else tuple(int(v) for v in looks)
    if any(v > n or v < 1 for v in looks) or list(looks) != sorted(looks):
        raise ValueError(f"looks {looks}: expected ascending tuple counts in 1..{n}")
    return looks


def prepare(terms, *, confidence: float = CONFIDENCE, gold_only: bool = False, n: int | None = None) -> Sum:
    """The Sum of sum_k w_k mu_k over independent cells, terms = [(w_k, Track_k), ...], over the first n tuples
    (default: every complete tuple, min_k n_k). gold_only: the labels alone (lam 0), at the whole alpha (no pool
    bound)."""
    terms = [(float(w), t) for w, t in terms if w != 0]
    if not terms:
        raise ValueError("prepare: no terms")
    caps = {t.cap for _, t in terms}
    if len(caps) != 1:
        raise ValueError("prepare: the cells were declared with different caps")
    cap = caps.pop()
    n = min(t.n for _, t in terms) if n is None else int(n)
    if n < 1 or n > min(t.n for _, t in terms):
        raise ValueError(f"prepare: {n} tuples asked, {min(t.n for _, t in terms)} complete")
    B = terms[0][1].y.shape[0]
    al = alphas(confidence, cap)
    end = lambda w, t, top: w * ((t.hi if top else t.lo) if w > 0 else (t.lo if top else t.hi))   # noqa: E731
    lo_end, hi_end = sum(end(w, t, False) for w, t in terms), sum(end(w, t, True) for w, t in terms)
    # the prior of the running variance: the largest variance of a sum of independent labels in their ranges
    v0 = sum(w * w * ((t.hi - t.lo) / 2) ** 2 for w, t in terms)
    mid = (lo_end + hi_end) / 2
    t_idx = np.arange(1, n + 1)
    if gold_only:
        z = sum(w * t.y[:, :n] for w, t in terms)
        full = lambda v: np.full((B, n), float(v))     # noqa: E731
        return Sum(z, full(lo_end), full(hi_end), z, full(lo_end), full(hi_end), predictable_variance(z, mid, v0),
                   al["side"], horizons(cap), np.cumsum(z, 1) / t_idx, lo_end, hi_end, confidence)
    z = sum(w * t.y[:, :n] for w, t in terms)
    a = np.full((B, n), lo_end)
    b = np.full((B, n), hi_end)
    c_lo, c_mid, c_hi = (np.zeros((B, n)) for _ in range(3))
    lams = []
    for j, (s, e) in enumerate(blocks(cap)):
        if n <= s:
            break
        lam = choose_lambda(terms, j, al)
        lams.append(lam)
        if not np.any(lam > 0):
            continue
        stop, L = min(e, n), lam[:, None]
        for w, t in terms:
            bl = t.blocks[j]
            z[:, s:stop] -= w * L * bl.h_block[:, :stop - s]
            a[:, s:stop] += -w * L * (bl.h_hi if w > 0 else bl.h_lo)[:, None]
            b[:, s:stop] += -w * L * (bl.h_lo if w > 0 else bl.h_hi)[:, None]
        low, mid_j, high = _pool_bounds(terms, j, lam, al["pool_block"])
        c_lo[:, s:stop], c_mid[:, s:stop], c_hi[:, s:stop] = low[:, None], mid_j[:, None], high[:, None]
    # the true pool mean lies above c_lo (below c_hi) but for a pool_block share of cases; on that event a capital
    # computed with c_lo is at most the one with the truth, since every bet is >= 0 (docs/intervals.md)
    return Sum(z + c_lo, a + c_lo, b + c_lo, z + c_hi, a + c_hi, b + c_hi, predictable_variance(z, mid, v0),
               al["betting"], horizons(cap), np.cumsum(z + c_mid, 1) / t_idx, lo_end, hi_end, confidence,
               np.stack(lams, 1) if lams else np.zeros((B, 0)))


def sequence(terms, looks=None, *, confidence: float = CONFIDENCE, gold_only: bool = False) -> dict:
    """The confidence sequence of sum_k w_k mu_k at the tuple counts `looks` (prepare(...).bounds(looks))."""
    return prepare(terms, confidence=confidence, gold_only=gold_only).bounds(looks)
