"""world/experiments/interval_methods.py: the betting and empirical-Bernstein intervals it weighs against the door are
valid (they are quoted as such in docs/intervals.md), and its lower bound on what validity forces is below what a
valid interval achieves."""
import numpy as np
import pytest
from scipy import stats

from world.experiments import interval_methods as im


@pytest.mark.parametrize("method", [im.betting_interval, im.bernstein_interval])
def test_all_equal_labels_get_a_valid_lower_bound(method):
    # 25 labels all 1: an interval excluding p covers at p at most 1 - p^25, so a valid lower bound is <= 0.05^(1/25)
    lo, hi = method(np.ones((1, 25)))
    assert hi[0] == 1.0
    assert 0.0 < lo[0] <= 0.05 ** (1 / 25)


@pytest.mark.parametrize("method", [im.betting_interval, im.bernstein_interval])
@pytest.mark.parametrize("p", [0.05, 0.5])
def test_binary_coverage(method, p):
    rng = np.random.default_rng(7)
    x = (rng.random((400, 40)) < p).astype(float)
    lo, hi = method(x)
    assert np.all((0 <= lo) & (lo < hi) & (hi <= 1))
    cover = np.mean((lo <= p) & (p <= hi))
    assert cover >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / 400)


def test_betting_respects_the_range():
    rng = np.random.default_rng(1)
    y = rng.uniform(2.0, 3.0, (50, 30))
    lo, hi = im.betting_interval(y, 2.0, 3.0)
    assert np.all((2.0 <= lo) & (lo < y.mean(1)) & (y.mean(1) < hi) & (hi <= 3.0))


def test_forced_width_is_below_exact_binomial_and_shrinks_with_n():
    # Clopper-Pearson is valid for binary labels: no lower bound on every valid interval's median width may exceed it
    for mean in (0.1, 0.5):
        widths = []
        for n in (25, 50, 100):
            w = im.forced_median_width(mean, n)
            k = stats.binom(n, mean).median()
            ci = stats.binomtest(int(k), n).proportion_ci(0.95, method="exact")
            assert 0 < w < ci.high - ci.low
            widths.append(w)
        assert widths[0] > widths[1] > widths[2]


def test_miss_bound_edges():
    assert im._miss_bound(0.6, 0.5, 50, 0.05)[0] == 1.0          # cannot move more than the pool
    assert im._miss_bound(1e-6, 0.5, 50, 0.05)[0] == pytest.approx(0.05, abs=1e-3)


def test_measure_reports_every_method():
    r = im.measure("binary", 0.5, 20, 100, 0.8, reps=6, seed=0, draws=400)
    for k in ("today", "door", "betting", "bernstein", "forced", *(f"clipped_{q}" for q in im.CLIPS)):
        assert np.isfinite(r[k]) and r[k] > 0
    assert r["kind"] == "binary" and "| binary | 0.5 | 20 | 100 |" in im.markdown([r])


def test_cli_refuses_an_unwritable_out_before_running(tmp_path, capsys):
    from rlhf.errors import run_cli
    assert run_cli(im.main, "interval_methods", ["--out", str(tmp_path / "no" / "x.md")]) == 2
    assert "--out" in capsys.readouterr().err
