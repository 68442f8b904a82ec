"""audit.core.bounded: finite-sample intervals for bounded means (Gaffke / Learned-Miller-Thomas), their sums, and the
prediction-powered cell. Checked against scipy's exact binomial interval, against a direct Dirichlet simulation,
and by coverage on small simulations."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from audit.core import bounded


def test_two_valued_labels_give_the_exact_binomial_interval():
    """For 0/1 labels the statistic is Beta(s + 1, n - s) (upper) and Beta(s, n - s + 1) (lower): Clopper-Pearson,
    as scipy.stats.binomtest computes it, up to the Monte-Carlo error of 10,000 draws."""
    for n in (10, 25, 60):
        for s in sorted({0, 1, 3, n // 2, n - 2, n - 1, n}):
            y = np.r_[np.ones(s), np.zeros(n - s)]
            lo, hi = bounded.mean_interval(y, 0.0, 1.0, seed=s)["ci95"]
            cp = stats.binomtest(s, n).proportion_ci(0.95, method="exact")
            assert abs(lo - cp.low) < 0.012 and abs(hi - cp.high) < 0.012, (n, s, lo, hi, cp)


def test_all_equal_labels_get_the_exact_bound_never_zero_width():
    lo, hi = bounded.mean_interval(np.ones(25), 0.0, 1.0)["ci95"]
    assert hi == 1.0 and abs(lo - 0.025 ** (1 / 25)) < 2e-3          # 0.863: 25 ones cannot rule out 0.87
    lo, hi = bounded.mean_interval(np.zeros(10), 0.0, 1.0)["ci95"]
    assert lo == 0.0 and abs(hi - (1 - 0.025 ** (1 / 10))) < 2e-3     # 0.308
    lo, hi = bounded.mean_interval(np.full(40, 0.7), 0.0, 1.0)["ci95"]
    assert lo < 0.7 < hi


def test_matches_a_direct_dirichlet_simulation():
    """The implementation (stratified boundary weight, exponential weights) against the definition: quantiles of
    sum_i D_i x_i + D_0 * end with D ~ Dirichlet(1, ..., 1) of n + 1 components."""
    rng = np.random.default_rng(3)
    x = rng.beta(0.5, 2.0, 30)
    d = rng.dirichlet(np.ones(31), 200_000)
    lo_ref = np.quantile(d[:, :30] @ x, 0.025)               # the appended point at 0 adds nothing
    hi_ref = np.quantile(d[:, :30] @ x + d[:, 30], 0.975)
    lo, hi = bounded.mean_interval(x, 0.0, 1.0, seed=1)["ci95"]
    assert abs(lo - lo_ref) < 0.006 and abs(hi - hi_ref) < 0.006, (lo, lo_ref, hi, hi_ref)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_never_zero_width_and_contains_the_mean(values, seed):
    out = bounded.mean_interval(np.array(values), 0.0, 1.0, seed=seed, draws=2000)
    lo, hi = out["ci95"]
    assert 0.0 <= lo <= out["estimate"] <= hi <= 1.0
    assert hi - lo > 0


def test_seeded_by_key_not_by_order():
    y = np.linspace(0, 1, 20)
    a = bounded.mean_interval(y, 0, 1, seed=5, key=("r", "f"))
    assert a == bounded.mean_interval(y, 0, 1, seed=5, key=("r", "f"))
    assert a["ci95"] != bounded.mean_interval(y, 0, 1, seed=6, key=("r", "f"))["ci95"]
    assert a["ci95"] != bounded.mean_interval(y, 0, 1, seed=5, key=("r", "g"))["ci95"]


def test_values_outside_the_range_refused():
    with pytest.raises(ValueError, match="outside the stated range"):
        bounded.mean_interval(np.array([0.2, 1.3]), 0.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        bounded.mean_interval(np.array([0.2, np.nan]), 0.0, 1.0)
    with pytest.raises(ValueError, match="lo < hi"):
        bounded.mean_interval(np.array([0.2]), 1.0, 0.0)


def test_sums_of_independent_samples():
    """A difference of two samples: its interval contains the difference of means, lies within the difference of
    the ranges, and is narrower than the two intervals' worst case added up (uncertainties combine)."""
    rng = np.random.default_rng(0)
    a = bounded.draw(rng.random(50), 0, 1, bounded.stream(0, "a"))
    b = bounded.draw(rng.random(50) * 0.5, 0, 1, bounded.stream(0, "b"))
    d = bounded.interval([(1.0, a), (-1.0, b)])
    ia, ib = bounded.interval([(1.0, a)])["ci95"], bounded.interval([(1.0, b)])["ci95"]
    assert d["ci95"][0] <= float(a.mean - b.mean) <= d["ci95"][1]
    assert -1.0 <= d["ci95"][0] and d["ci95"][1] <= 1.0
    assert d["ci95"][1] - d["ci95"][0] < (ia[1] - ia[0]) + (ib[1] - ib[0])
    # a fixed (worst-case) part adds its range
    w = bounded.interval([(0.5, a), (0.5, bounded.fixed(0.0, 1.0))])
    assert w["ci95"][1] - w["ci95"][0] > 0.5


def test_ppi_cell_lam_zero_is_gold_only_and_never_wider():
    rng = np.random.default_rng(1)
    q = rng.random(2100)
    y_all = np.clip(q + rng.normal(0, 0.05, 2100), 0, 1)
    good = 5 * q + rng.normal(0, 0.05, 2100) - 2          # a near-perfect proxy on another scale
    c = bounded.ppi_cells(y_all[:100], good[:100], good[100:], 0, 1, seed=0, key=("good",))
    gi, pi = c.gold_only_interval()["ci95"], c.interval()["ci95"]
    assert c.lam > 0 and pi[1] - pi[0] < 0.8 * (gi[1] - gi[0])
    noise = rng.normal(size=2100)                          # a proxy that knows nothing
    c0 = bounded.ppi_cells(y_all[:100], noise[:100], noise[100:], 0, 1, seed=0, key=("noise",))
    g0, p0 = c0.gold_only_interval()["ci95"], c0.interval()["ci95"]
    assert p0[1] - p0[0] <= g0[1] - g0[0] + 1e-12
    flat = np.ones(2100)                                   # a constant proxy: the gold-only interval exactly
    cf = bounded.ppi_cells(y_all[:100], flat[:100], flat[100:], 0, 1, seed=0, key=("flat",))
    assert np.allclose(cf.interval()["ci95"], cf.gold_only_interval()["ci95"])
    # every row labelled: nothing for the proxy to add
    ca = bounded.ppi_cells(y_all[:100], good[:100], good[:0], 0, 1, seed=0)
    assert float(ca.lam) == 0.0


@pytest.mark.parametrize("n", [40, 700])          # up to MAX_EXACT rows, and grouped above it
def test_kept_gold_weights_give_the_same_bits(monkeypatch, n):
    """The gold rows' Dirichlet weights are kept between calls (the stress re-decides each cell many times): a cell
    computed from kept weights is bit for bit the cell computed afresh, the cache stays within its byte budget, and
    what it hands out cannot be written to."""
    rng = np.random.default_rng(2)
    y, f, fu = rng.random(n), rng.random(n), rng.random(3000)

    def cell():
        c = bounded.ppi_cells(y, f, fu, 0, 1, seed=3, key=("r", "f"), draws=2000)
        return c.interval()["ci95"], float(c.lam), [s.rest.tobytes() + s.d0.tobytes() for _, s in c.parts]

    from collections import OrderedDict
    monkeypatch.setattr(bounded, "_weights", OrderedDict())     # an empty cache, the process's own restored after
    monkeypatch.setattr(bounded, "_weights_bytes", 0)
    fresh = cell()
    assert len(bounded._weights) == 1
    assert cell() == fresh                                   # from the kept weights
    kept = next(iter(bounded._weights.values()))
    assert not kept[2].flags.writeable
    size = sum(a.nbytes for a in kept if a is not None)
    monkeypatch.setattr(bounded, "WEIGHT_CACHE_BYTES", 2 * size)   # room for two cells: the oldest goes first
    for key in ("a", "b", "c"):
        bounded.ppi_cells(y, f, fu, 0, 1, seed=3, key=(key,), draws=2000)
    assert [k[1] for k in bounded._weights] == [repr(("b", "gold")), repr(("c", "gold"))]
    assert bounded._weights_bytes == 2 * size
    assert cell() == fresh                                   # recomputed after eviction: the same bits


@pytest.mark.parametrize("kind,mu,n", [("binary", 0.02, 25), ("binary", 0.5, 25), ("binary", 0.995, 10),
                                       ("continuous", 0.97, 25)])
def test_coverage_where_normal_intervals_fail(kind, mu, n):
    """1,000 replicates through the batched code the coverage harness uses: at least 0.95 minus two Monte-Carlo
    standard errors (docs/intervals.md has the full grid)."""
    from world.experiments.interval_coverage import labels, proxy
    rng = np.random.default_rng(7)
    reps, N = 1000, 200
    y_all = labels(kind, mu, (reps, n + N), rng)
    f_all = proxy(y_all, kind, mu, 0.8, rng)
    c = bounded.ppi_cells(y_all[:, :n], f_all[:, :n], f_all[:, n:], 0, 1, seed=3, draws=4000)
    lo, hi = c.interval()["ci95"]
    cover = np.mean((lo <= mu) & (mu <= hi))
    assert cover >= 0.95 - 2 * math.sqrt(0.95 * 0.05 / reps), cover
    assert np.all(hi - lo > 0)


def test_harness_today_matches_audit_ppi():
    """The harness's vectorised 'today' interval is audit.core.ppi's PPI++ (tested against ppi-python) with the t factor."""
    from audit.core.ppi import classical_mean, ppi_mean
    from world.experiments.interval_coverage import today_cell
    rng = np.random.default_rng(2)
    y, f, fu = rng.random((3, 25)), rng.random((3, 25)), rng.random((3, 300))
    (est, se), (g_est, g_se) = today_cell(y, f, fu)
    k = stats.t.ppf(0.975, 24) / stats.norm.ppf(0.975)
    for i in range(3):
        p = ppi_mean(y[i], f[i], fu[i])
        assert math.isclose(est[i], p["estimate"], rel_tol=1e-9) and math.isclose(se[i], k * p["se"], rel_tol=1e-9)
        g = classical_mean(y[i])
        assert math.isclose(g_est[i], g["estimate"], rel_tol=1e-9) and math.isclose(g_se[i], k * g["se"], rel_tol=1e-9)
