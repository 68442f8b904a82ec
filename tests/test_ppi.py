"""audit.ppi against the ppi-python package (ppi_py) on the same inputs, and its limiting cases."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from audit.ppi import classical_mean, labels_to_halve, power_tuned_lambda, ppi_mean

ppi_py = pytest.importorskip("ppi_py")


def _data(seed, n, N, slope, noise, offset=0.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.3, 0.2, n + N)
    y = x + rng.normal(0, noise, n + N)
    f = offset + slope * x + rng.normal(0, 0.05, n + N)
    return y[:n], f[:n], f[n:]


@given(seed=st.integers(0, 10_000), n=st.integers(5, 200), N=st.integers(5, 3000),
       slope=st.floats(-3, 8), noise=st.floats(0.01, 0.5), offset=st.floats(-2, 2))
def test_matches_ppi_py(seed, n, N, slope, noise, offset):
    y, f, fu = _data(seed, n, N, slope, noise, offset)
    mine = ppi_mean(y, f, fu)
    lo, hi = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05)
    assert mine["ci95"] == pytest.approx([float(np.ravel(lo)[0]), float(np.ravel(hi)[0])], abs=1e-9)
    assert mine["estimate"] == pytest.approx(float(np.ravel(ppi_py.ppi_mean_pointestimate(y, f, fu))[0]), abs=1e-9)
    c = classical_mean(y)
    lo, hi = ppi_py.classical_mean_ci(y, alpha=0.05)
    assert c["ci95"] == pytest.approx([float(lo), float(hi)], abs=1e-9)
    for lam in (0.0, 0.5, 1.0):
        lo, hi = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05, lam=lam)
        assert ppi_mean(y, f, fu, lam=lam)["ci95"] == pytest.approx([float(np.ravel(lo)[0]),
                                                                       float(np.ravel(hi)[0])], abs=1e-9)


def test_limits():
    y, f, fu = _data(0, 100, 2000, 1.0, 0.05)
    # a good proxy: lam near 1, much narrower than gold alone
    p, c = ppi_mean(y, f, fu), classical_mean(y)
    assert p["lam"] > 0.7 and p["se"] < 0.6 * c["se"]
    # a proxy that predicts nothing (shuffled) or the wrong way (inverted): lam 0 = the classical interval
    rng = np.random.default_rng(1)
    for bad in (rng.permutation(np.concatenate([f, fu])), -np.concatenate([f, fu])):
        lam = power_tuned_lambda(y, bad[:100], bad[100:])
        assert lam <= 0.2
    assert ppi_mean(y, -f, -fu)["ci95"] == pytest.approx(c["ci95"])
    # rescaling the proxy leaves PPI++'s interval where it was (lam absorbs the scale) while lam stays in [0, 1]
    assert ppi_mean(y, 3 * f, 3 * fu)["ci95"] == pytest.approx(p["ci95"], rel=1e-9)
    # constant proxy, no unlabelled rows: classical
    assert ppi_mean(y, np.ones(100), np.ones(50))["lam"] == 0.0
    assert ppi_mean(y, f, np.array([]))["ci95"] == pytest.approx(c["ci95"])
    with pytest.raises(ValueError):
        ppi_mean(y[:1], f[:1], fu)
    with pytest.raises(ValueError):
        ppi_mean(np.array([np.nan, 1.0]), f[:2], fu)


def test_labels_to_halve():
    y, f, fu = _data(0, 100, 100_000, 1.0, 0.3)
    lam = power_tuned_lambda(y, f, fu)
    need = labels_to_halve(y, f, fu, lam)
    assert 380 <= need <= 420           # the proxy term is negligible with 100k rows: 4x the labels
    y, f, fu = _data(0, 100, 150, 1.0, 0.01)   # a near-perfect proxy, few unlabelled rows: gold cannot halve it
    assert labels_to_halve(y, f, fu, power_tuned_lambda(y, f, fu)) is None
