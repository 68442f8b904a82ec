"""audit.core.ppi against the ppi-python package (ppi_py) on the same inputs, and its limiting cases."""
import numpy as np
import pytest

from audit.core.ppi import classical_mean, labels_to_halve, power_tuned_lambda, ppi_mean

# ppi_py pulls numba, scikit-learn and statsmodels (their own OpenMP runtimes) into the process that imports it;
# the cross-check runs in a fresh interpreter so that the rest of the suite's torch runs stay as they were
CROSSCHECK = r"""
import sys, numpy as np, ppi_py
from audit.core.ppi import classical_mean, ppi_mean
rng = np.random.default_rng(20231101)
bad = 0
for k in range(300):
    n, N = int(rng.integers(5, 200)), int(rng.integers(5, 3000))
    slope, noise, offset = rng.uniform(-3, 8), rng.uniform(0.01, 0.5), rng.uniform(-2, 2)
    x = rng.normal(0.3, 0.2, n + N)
    y = x + rng.normal(0, noise, n + N)
    f = offset + slope * x + rng.normal(0, 0.05, n + N)
    y, fl, fu = y[:n], f[:n], f[n:]
    pairs = [(ppi_mean(y, fl, fu)["ci95"], ppi_py.ppi_mean_ci(y, fl, fu, alpha=0.05)),
             ([ppi_mean(y, fl, fu)["estimate"]] * 2, [ppi_py.ppi_mean_pointestimate(y, fl, fu)] * 2),
             (classical_mean(y)["ci95"], ppi_py.classical_mean_ci(y, alpha=0.05))]
    pairs += [(ppi_mean(y, fl, fu, lam=lam)["ci95"], ppi_py.ppi_mean_ci(y, fl, fu, alpha=0.05, lam=lam))
              for lam in (0.0, 0.5, 1.0)]
    for mine, theirs in pairs:
        theirs = [float(np.ravel(v)[0]) for v in theirs]
        if not np.allclose(mine, theirs, rtol=0, atol=1e-9):
            bad += 1
            print(k, n, N, slope, mine, theirs)
print(f"{bad} mismatches")
sys.exit(1 if bad else 0)
"""


def _data(seed, n, N, slope, noise, offset=0.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.3, 0.2, n + N)
    y = x + rng.normal(0, noise, n + N)
    f = offset + slope * x + rng.normal(0, 0.05, n + N)
    return y[:n], f[:n], f[n:]


def test_matches_ppi_py():
    """audit.core.ppi = ppi_py (estimate, power-tuned interval, fixed-lambda intervals, classical interval) on 300
    drawn inputs: proxies of every scale and sign, 5-200 labelled rows, 5-3,000 unlabelled."""
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("ppi_py")
    r = subprocess.run([sys.executable, "-c", CROSSCHECK], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "0 mismatches" in r.stdout


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
