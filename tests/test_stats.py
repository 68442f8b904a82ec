import json
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from audit.core.stats import bootstrap_ci, combine_ci, mean_ci_normal, pearson_ci, spearman_ci

KEYS = {"estimate", "ci95", "method", "n_resamples", "seed", "n", "confidence"}


def _json_ok(res):
    json.dumps({k: v for k, v in res.items() if k != "draws"}, allow_nan=False)   # raises on NaN / inf


def test_bootstrap_ci_shape_and_determinism():
    x = np.random.default_rng(0).normal(1.0, 1.0, 50)
    a = bootstrap_ci((x,), np.mean, seed=3)
    b = bootstrap_ci((x,), np.mean, seed=3)
    assert KEYS <= set(a) and a == b
    assert a["method"] == "BCa" and a["n"] == 50 and a["n_resamples"] == 2000 and a["seed"] == 3
    assert a["estimate"] == pytest.approx(x.mean())
    assert a["ci95"][0] < a["estimate"] < a["ci95"][1]
    _json_ok(a)
    # a bare 1-D array is a one-sample tuple
    assert bootstrap_ci(x, np.mean, seed=3) == a


def test_bootstrap_ci_two_samples_and_paired():
    rng = np.random.default_rng(1)
    x, y = rng.normal(0, 1, 40), rng.normal(1, 1, 30)
    res = bootstrap_ci((x, y), lambda a, b, axis=-1: b.mean(axis) - a.mean(axis), n_resamples=500)
    assert res["n"] == [40, 30] and res["ci95"][0] < res["estimate"] < res["ci95"][1]
    with pytest.raises(ValueError, match="equal length"):
        bootstrap_ci((x, y), lambda a, b: 0.0, paired=True)


def test_bootstrap_ci_coverage_by_simulation():
    """Known truth, 300 simulated datasets: the 95% BCa CI of a mean should cover it ~95% of the time."""
    rng = np.random.default_rng(123)
    hits = 0
    for i in range(300):
        x = rng.normal(0.5, 0.2, 40)
        lo, hi = bootstrap_ci((x,), np.mean, n_resamples=500, seed=i)["ci95"]
        hits += lo <= 0.5 <= hi
    assert 0.90 <= hits / 300 <= 0.98


def test_pearson_ci_coverage_by_simulation():
    rng = np.random.default_rng(7)
    hits = 0
    for i in range(150):
        x = rng.normal(size=60)
        y = 0.5 * x + math.sqrt(0.75) * rng.normal(size=60)
        lo, hi = pearson_ci(x, y, n_resamples=500, seed=i)["ci95"]
        hits += lo <= 0.5 <= hi
    assert 0.86 <= hits / 150 <= 0.99


def test_degenerate_constant_sample():
    res = bootstrap_ci((np.full(10, 0.25),), np.mean)
    assert res["ci95"] == [0.25, 0.25] and res["estimate"] == 0.25
    assert res["method"] == "degenerate: constant sample"
    _json_ok(res)


def test_degenerate_bootstrap_distribution_falls_back_to_percentile():
    # Not constant, but the median of nine zeros and a one is 0 on nearly every resample: BCa is undefined.
    res = bootstrap_ci((np.array([0.0] * 9 + [1.0]),), np.median, n_resamples=500)
    assert res["method"].startswith("percentile")
    assert all(math.isfinite(c) for c in res["ci95"])
    _json_ok(res)


def test_too_few_or_bad_observations_raise_clearly():
    with pytest.raises(ValueError, match="at least 2 observations"):
        bootstrap_ci((np.array([1.0]),), np.mean)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci((np.array([1.0, np.nan, 2.0]),), np.mean)
    with pytest.raises(ValueError, match="1-D"):
        bootstrap_ci((np.ones((3, 3)),), np.mean)
    with pytest.raises(ValueError, match="at least 2"):
        mean_ci_normal([1.0])
    with pytest.raises(ValueError, match="length"):
        pearson_ci([1, 2, 3], [1, 2])


@pytest.mark.parametrize("fn", [pearson_ci, spearman_ci])
def test_correlation_ci(fn):
    rng = np.random.default_rng(2)
    x = rng.normal(size=80)
    y = x + 0.5 * rng.normal(size=80)
    res = fn(x, y, n_resamples=500)
    assert KEYS <= set(res) and res["n"] == 80
    assert 0.6 < res["estimate"] < 1.0 and -1 <= res["ci95"][0] < res["estimate"] < res["ci95"][1] <= 1
    _json_ok(res)


@pytest.mark.parametrize("fn", [pearson_ci, spearman_ci])
def test_correlation_constant_input_is_no_information(fn):
    res = fn(np.arange(10.0), np.full(10, 3.0))
    assert res["estimate"] == 0.0 and res["ci95"] == [-1.0, 1.0]
    assert res["method"] == "degenerate: constant input"
    _json_ok(res)


def test_correlation_tiny_sample_drops_undefined_resamples():
    # Three pairs: many resamples repeat one pair, where r is undefined; the CI still comes out finite.
    res = pearson_ci([1.0, 2.0, 3.0], [1.0, 2.0, 3.5], n_resamples=300)
    assert all(math.isfinite(c) for c in res["ci95"])
    _json_ok(res)


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=30), st.integers(0, 1000))
def test_bootstrap_ci_never_crashes_or_returns_nan(values, seed):
    res = bootstrap_ci((np.array(values),), np.mean, n_resamples=200, seed=seed)
    lo, hi = res["ci95"]
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= hi
    _json_ok(res)


def test_mean_ci_normal():
    x = np.random.default_rng(4).normal(2.0, 1.0, 1000)
    res = mean_ci_normal(x)
    se = x.std(ddof=1) / math.sqrt(len(x))
    assert res["se"] == pytest.approx(se)
    assert res["ci95"] == pytest.approx([x.mean() - 1.959964 * se, x.mean() + 1.959964 * se], rel=1e-5)
    assert mean_ci_normal(np.full(5, 1.5))["ci95"] == [1.5, 1.5]
    _json_ok(res)


def test_combine_ci_limits_and_quadrature():
    rng = np.random.default_rng(5)
    draws = rng.normal(0.40, 0.02, 4000)
    # no sampling error: the percentile interval of the draws
    r0 = combine_ci(draws, 0.0, estimate=0.40)
    assert r0["ci95"] == pytest.approx(list(np.percentile(draws, [2.5, 97.5])))
    # constant draws (no rubric uncertainty): estimate +- z*se
    r1 = combine_ci(np.full(50, 0.4), 0.01)
    assert r1["ci95"] == pytest.approx([0.4 - 1.96 * 0.01, 0.4 + 1.96 * 0.01], abs=1e-4)
    # both: matches the Monte-Carlo percentile interval of draws + N(0, se^2) for normal draws
    r2 = combine_ci(draws, 0.015, estimate=0.40)
    mc = np.percentile(draws + rng.normal(0, 0.015, len(draws)), [2.5, 97.5])
    assert r2["ci95"] == pytest.approx(list(mc), abs=0.003)
    assert r2["ci95"][0] < r0["ci95"][0] and r2["ci95"][1] > r0["ci95"][1]
    _json_ok(r2)
    with pytest.raises(ValueError):
        combine_ci([0.1], 0.01)
    with pytest.raises(ValueError):
        combine_ci(draws, -1.0)


def test_combine_ci_skewed_draws_keep_asymmetry():
    draws = np.concatenate([np.full(90, 0.5), np.linspace(0.3, 0.5, 10)])
    res = combine_ci(draws, 0.001, estimate=0.5)
    lo, hi = res["ci95"]
    assert 0.5 - lo > 5 * (hi - 0.5)


def test_combine_ci_symmetric_uses_the_larger_side_both_ways():
    draws = np.concatenate([np.full(90, 0.5), np.linspace(0.3, 0.5, 10)])
    skew = combine_ci(draws, 0.001, estimate=0.5)
    sym = combine_ci(draws, 0.001, estimate=0.5, symmetric=True)
    assert sym["ci95"][0] == pytest.approx(skew["ci95"][0])          # the lower side is unchanged
    assert sym["ci95"][1] - 0.5 == pytest.approx(0.5 - sym["ci95"][0])
    assert sym["ci95"][1] > skew["ci95"][1]
    assert "both ways" in sym["method"] and "both ways" not in skew["method"]


@pytest.mark.parametrize("n,ties", [(12, False), (57, True), (300, True), (300, False)])
def test_spearman_ci_by_counted_ranks_is_the_sorting_bootstrap(n, ties):
    """spearman_ci ranks resamples by counting (audit.core.stats._counted_ranks): the same result, bit for bit, as
    scipy's paired bootstrap of rankdata-based Spearman."""
    from audit.core import stats as S
    rng = np.random.default_rng(n)
    x = rng.random(n)
    y = 0.6 * x + rng.random(n)
    if ties:
        x, y = np.round(x, 1), np.round(y, 1)
    for method in ("BCa", "percentile"):
        slow = S._correlation_ci(x, y, S._spearman, "spearman_ci", n_resamples=500, seed=n, confidence=0.9,
                                 method=method)
        assert S.spearman_ci(x, y, n_resamples=500, seed=n, confidence=0.9, method=method) == slow
