"""Large cells summarised (audit/samples/cells.py) and the same reduction on Ray (audit/samples/ray_cells.py): exact
sums against fractions, the Kolmogorov-Smirnov test from counts against scipy, the reduced table against the whole
one (the same intervals' inputs, the same stress subsample), and `--ray local` against the local path: the same
answer.json bytes on a sharded table with summarised cells."""
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st
from scipy import stats

from audit.core import exact_sums
from audit.samples import cells
from audit.samples.estimates import SamplesAudit, SamplesConfig
from audit.samples.session import load_table

ROOT = Path(__file__).resolve().parents[1]
# squares are exact above 1e-146 in magnitude (audit.core.exact_sums.squares); the sums alone at any magnitude below
floats = st.floats(min_value=-1e6, max_value=1e6).filter(lambda v: v == 0 or abs(v) > 1e-140)


@given(st.lists(floats, min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_exact_moments_are_the_rounded_exact_values_in_any_order(xs, rnd):
    x = np.array(xs)
    m = exact_sums.moments(x)[0]
    f = [Fraction(v) for v in xs]
    mean = sum(f) / len(f)
    assert m.mean == float(mean) and m.var == float(sum((v - mean) ** 2 for v in f) / len(f))
    assert (m.n, m.lo, m.hi) == (len(xs), min(xs), max(xs))
    perm = list(range(len(xs)))
    rnd.shuffle(perm)
    k = rnd.randrange(len(xs) + 1)
    parts = exact_sums.moments(x[perm[:k]])[0].merge(exact_sums.moments(x[perm[k:]])[0]) if k else m
    assert parts == m                               # split and merged in another order: the same integers


def test_exact_sums_over_the_whole_float_range():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300) * 10.0 ** rng.integers(-300, 300, 300)
    assert exact_sums.sums(x)[0] / (1 << exact_sums.SCALE) == float(sum(Fraction(v) for v in x))
    keys = rng.integers(0, 3, 300)
    per = exact_sums.sums(x, keys, 3)
    assert [float(Fraction(s, 1 << exact_sums.SCALE)) for s in per] == \
        [float(sum(Fraction(v) for v in x[keys == k])) for k in range(3)]
    with pytest.raises(ValueError, match="NaN or infinite"):
        exact_sums.sums([1.0, np.nan])
    assert exact_sums.moments([1e-160, 2e-160])[0].var >= 0.0      # squares underflow: inexact, never negative


@pytest.mark.parametrize("ties", [False, True])
def test_ks_from_counts_is_scipy_s_test(ties):
    rng = np.random.default_rng(1 + ties)
    for trial in range(6):
        n1, n2 = int(rng.integers(10, 80)), int(rng.integers(10_001, 14_000))
        g, u = rng.random(n1), rng.random(n2) + 0.02 * trial
        if ties:                                    # values on a grid: ties within and across the samples
            g, u = np.round(g * 20) / 20, np.round(u * 20) / 20
        srt = np.sort(u)
        gs = np.sort(g)
        d, p = cells.ks_from_counts(g, np.searchsorted(srt, gs, "left"), np.searchsorted(srt, gs, "right"), n2)
        ref = stats.ks_2samp(g, u)
        assert (d, p) == (float(ref.statistic), float(ref.pvalue))
    with pytest.raises(ValueError, match="exact branch"):
        cells.ks_from_counts(g, [0] * len(g), [0] * len(g), 500)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A sharded Parquet table whose four cells have more than KEEP_UNLABELLED unlabelled rows each."""
    from world.samples_table import TableConfig, generate, samples_path
    d = tmp_path_factory.mktemp("big")
    cfg = TableConfig(rows=45_000, runs=2, families=2, gold_per_cell=40, chunk=10_000, shards=3, seed=5)
    generate(cfg, d)
    return {"samples": str(samples_path(d, cfg)), "gold": str(d / "gold.parquet"), "seed": 3, "mapping": {},
            "design": {}}


def test_reduced_table_keeps_what_the_claims_read(big):
    from audit.samples import stress
    whole, _ = load_table(big, reduced=False)
    red, _ = load_table(big)
    assert whole.n_rows == red.n_rows == 45_000 and len(red.proxy) == whole.n_gold + 4 * cells.STRESS_UNLABELLED
    assert sorted(red.summaries) == sorted(whole.cells) and red.n_gold == whole.n_gold
    audit_w, audit_r = (SamplesAudit(t, "reference", SamplesConfig(seed=3, draws=2000)) for t in (whole, red))
    for c in whole.cells:
        s, idx = red.summaries[c], whole.cells[c]
        lab = ~np.isnan(whole.gold[idx])
        assert s["n_samples"] == len(idx) and s["n_unlabelled"] == (~lab).sum()
        assert s["ks_p_value"] == whole.design[c]["p_value"] and red.design[c] == whole.design[c]
        h = cells.predicted(whole.proxy[idx][~lab], s["h"]["intercept"], s["h"]["slope"], 0.0, 1.0)
        assert s["h"]["mean"] == pytest.approx(h.mean(), abs=1e-15) and s["h"]["std"] == pytest.approx(h.std(), abs=1e-15)
        assert s["proxy_mean"] == pytest.approx(whole.proxy[idx].mean(), abs=1e-15)
        a, b = audit_w.cell(*c), audit_r.cell(*c)
        for k in ("n_samples", "n_gold", "gold_mean", "lam", "labels_to_halve"):
            assert a[k] == b[k], k
        iw, ir = (audit.run(c[0])["per_family"][c[1]]["ci95"] for audit in (audit_w, audit_r))
        assert iw == pytest.approx(ir, abs=1e-6)    # float32 Monte-Carlo draws from the same mean and std
    sw, _ = stress.stress_table(whole, 3)
    sr, what = stress.stress_table(red, 3)
    assert sw.sample_id.equals(sr.sample_id) and what["of_rows"] == 45_000   # the same subsample
    with pytest.raises(ValueError, match="seed 3, not of seed 4"):
        stress.stress_table(red, 4)


def test_duplicate_ids_across_blocks_are_found_by_partition():
    from audit.samples.ray_cells import _duplicate, _partition
    ids = [pa.array(["a1", "b2", "c3"]), pa.array(["d4", "b2"])]
    parts = [_partition(a, 3) for a in ids]
    assert parts[0][1] == parts[1][1]               # equal ids, equal partitions
    pieces = [[a.filter(pa.array(k == p)) for a, k in zip(ids, parts)] for p in range(3)]
    assert [_duplicate(*ps) for ps in pieces].count("b2") == 1
    assert _duplicate(pa.array(["x", "y"]), pa.array(["z"])) is None


def _certify(big, out, *extra):
    return subprocess.run([sys.executable, "-m", "audit.samples", "--samples", big["samples"], "--gold", big["gold"],
                           "--out", str(out), "--no-figures", "--stress-examples", "2", "--seed", "3", *extra],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_ray_local_gives_the_same_answer_bytes(big, tmp_path):
    local, on_ray = _certify(big, tmp_path / "local"), _certify(big, tmp_path / "ray", "--ray", "local")
    assert local.returncode == 0, local.stderr[-2000:]
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert (tmp_path / "local" / "answer.json").read_bytes() == (tmp_path / "ray" / "answer.json").read_bytes()
    ans = json.loads((tmp_path / "ray" / "answer.json").read_text())
    assert ans["corruption_stress"]["table"]["of_rows"] == 45_000


def test_unreachable_ray_is_a_usage_error(big, tmp_path):
    r = _certify(big, tmp_path / "out", "--ray", "127.0.0.1:1")
    assert r.returncode == 2 and "--ray 127.0.0.1:1: cannot start or reach a Ray cluster" in r.stderr
    assert not (tmp_path / "out").exists()
    # a wrong draw record is refused before any Ray cluster is started or reached
    r = _certify(big, tmp_path / "out", "--ray", "127.0.0.1:1", "--draw-record", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and f"--draw-record {tmp_path / 'nope.json'}: file not found" in r.stderr
    assert "Ray" not in r.stderr and not (tmp_path / "out").exists()


def test_a_block_the_fast_reader_would_not_take_is_refused_with_the_reason():
    from audit.samples.ray_cells import KEYS, _first_pass
    names = {k: k for k in KEYS}
    block = pa.table({"sample_id": ["a", "b"], "run": ["r", "r"], "family": ["f", "f"], "prompt_id": ["p", "p"],
                      "completion": ["x y", "z"], "proxy_reward": [0.5, float("nan")]})
    out = _first_pass(block, names, pa.array(["a"]), 0, 2)
    assert out[0] == {"unusual": "non-finite number"} and len(out) == 3
    good = block.set_column(5, "proxy_reward", pa.array([0.5, 0.25]))
    first = _first_pass(good, names, pa.array(["a"]), 0, 2)[0]
    assert first["n"] == 2 and first["cells"][("r", "f")][:2] == (2, 1) and first["gold"]["sample_id"].to_pylist() == ["a"]


def test_a_large_cell_without_enough_gold_is_counted_for_the_design_check():
    from audit.samples.ray_cells import _plan
    gold_rows = {"run": pa.array(["r", "r", "s"]), "family": pa.array(["f", "f", "f"]),
                 "proxy": np.array([0.1, 0.9, 0.5])}
    counts = {("r", "f"): [20_000, 2, 0], ("s", "f"): [20_000, 1, 0], ("t", "f"): [50, 0, 0]}
    plan = _plan([("r", "f"), ("s", "f"), ("t", "f")], counts, gold_rows, np.array([0.0, 1.0, 0.5]), 0.0, 1.0, 0, 2)
    assert plan[("s", "f")] == {"too_few_gold": True} and plan[("t", "f")] is None
    assert plan[("r", "f")]["slope"] == pytest.approx(1.25) and len(plan[("r", "f")]["ranks"]) == cells.STRESS_UNLABELLED
