"""Sums, means and variances of float64 values rounded once, at the end: the same bits whatever the order of the
values or how they were split between machines (audit.samples.ray_cells sums a cell's rows shard by shard on a Ray
cluster; the local path sums them in one array, and both must give the same answer.json bytes).

Every finite float64 is an integer multiple of 2**-1126 (frexp: x = m 2**e, |m| in [0.5, 1), e >= -1073), so a sum
of them is an integer times 2**-1126: summed exactly in Python integers (per exponent, in numpy: the 53-bit
mantissas cut in three 18-bit pieces, whose bincount sums stay exact in float64 up to 2**35 values a bin) and
rounded once by Python's correctly rounded integer division. A square is split exactly into two float64s (Dekker's
product), so sums of squares are exact too (for magnitudes between 1e-146 and 1e150: the audit squares values of
the label range), and a variance is the exact rational (n S2 - S1^2) / n^2 rounded once.
Partial results merge by integer addition: `Moments.merge`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SCALE = 1126                # sums are integers times 2**-SCALE
_EMIN, _NE = -1073, 2098    # frexp exponents of finite float64 values: -1073 .. 1024
_CHUNK = 1 << 20            # values per numpy pass (bounds the temporaries' memory)


def sums(x, keys=None, nkeys: int = 1) -> list[int]:
    """The exact sum of x per key (keys: ints in [0, nkeys), default all 0), each an integer times 2**-SCALE."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("exact sums: values contain NaN or infinite entries")
    keys = np.zeros(len(x), np.int64) if keys is None else np.asarray(keys, np.int64).ravel()
    counts = [np.zeros(nkeys * _NE) for _ in range(3)]
    for s in range(0, len(x), _CHUNK):
        m, e = np.frexp(x[s:s + _CHUNK])
        mant = (m * 2.0 ** 53).astype(np.int64)                 # exact: 53 significant bits
        bins = keys[s:s + _CHUNK] * _NE + (e.astype(np.int64) - _EMIN)
        for c, part in zip(counts, (mant >> 36, (mant >> 18) & 0x3FFFF, mant & 0x3FFFF)):
            c += np.bincount(bins, weights=part.astype(np.float64), minlength=nkeys * _NE)
    out = [0] * nkeys
    for c, shift in zip(counts, (36, 18, 0)):
        for b in np.flatnonzero(c):
            k, eb = divmod(int(b), _NE)
            out[k] += int(c[b]) << (eb + shift)               # eb = e + 1073 = (e - 53) + SCALE
    return out


def squares(x) -> tuple[np.ndarray, np.ndarray]:
    """(p, r) with x*x = p + r exactly (Dekker's product) for |x| in [1e-146, 1e150]; outside, the same elementwise
    operations give the same (rounded) bits on any machine."""
    x = np.asarray(x, dtype=np.float64)
    c = 134217729.0 * x                  # 2**27 + 1: splits x into two 26-bit halves
    hi = c - (c - x)
    lo = x - hi
    p = x * x
    return p, ((hi * hi - p) + 2.0 * hi * lo) + lo * lo


@dataclass
class Moments:
    """Count, exact sum and sum of squares (integers times 2**-SCALE), minimum and maximum of some values."""
    n: int = 0
    s1: int = 0
    s2: int = 0
    lo: float = math.inf
    hi: float = -math.inf

    def merge(self, other: "Moments") -> "Moments":
        return Moments(self.n + other.n, self.s1 + other.s1, self.s2 + other.s2, min(self.lo, other.lo),
                       max(self.hi, other.hi))

    @property
    def mean(self) -> float:
        return self.s1 / (self.n << SCALE)

    @property
    def var(self) -> float:
        """Population variance (numpy's var, ddof 0), exactly rounded."""
        # never below 0: squares under 1e-292 are not exact (see squares)
        return max(0.0, ((self.n * self.s2 << SCALE) - self.s1 * self.s1) / ((self.n * self.n) << (2 * SCALE)))

    @property
    def std(self) -> float:
        return math.sqrt(self.var)


def moments(x, keys=None, nkeys: int = 1) -> list[Moments]:
    """Moments of x per key (see sums)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    keys = np.zeros(len(x), np.int64) if keys is None else np.asarray(keys, np.int64).ravel()
    p, r = squares(x)
    s1, sp, sr = sums(x, keys, nkeys), sums(p, keys, nkeys), sums(r, keys, nkeys)
    n = np.bincount(keys, minlength=nkeys)
    lo, hi = np.full(nkeys, np.inf), np.full(nkeys, -np.inf)
    if nkeys == 1 and len(x):
        lo[0], hi[0] = x.min(), x.max()
    else:
        np.minimum.at(lo, keys, x)
        np.maximum.at(hi, keys, x)
    return [Moments(int(n[k]), s1[k], sp[k] + sr[k], float(lo[k]), float(hi[k])) for k in range(nkeys)]
