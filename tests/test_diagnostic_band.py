"""The diagnostic's three calls (audit.task.diagnostic_band): the band arithmetic, the calls, which band a recipe
gets, the band file the audit ships, and the derivation command that writes it (world.experiments.diagnostic_band)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from audit.task import diagnostic_band as B
from audit.task.diagnostic import DiagnosticConfig
from audit.task.diagnostic_band import call_lines
from rlhf.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

DEFAULT = {k: getattr(DiagnosticConfig(), k) for k in B.RECIPE_KEYS}
LONG = {**DEFAULT, "steps": 750, "lr": 6e-4}


def table(**over):
    bands = [{"recipe": DEFAULT, "replicates": 1, "default": True, "below": 0.25, "above": 0.08, "level": 0.99,
              "residuals": 300, "basis": "one run"},
             {"recipe": LONG, "replicates": 3, "default": False, "below": 0.06, "above": 0.04, "level": 0.99,
              "residuals": 100, "basis": "long, 3"},
             {"recipe": LONG, "replicates": 1, "default": False, "below": 0.1, "above": 0.07, "level": 0.99,
              "residuals": 300, "basis": "long, 1"}]
    return {"bands": bands, **over}


def test_conformal_quantile_is_the_rank_that_holds_the_level():
    v = list(range(1, 100))                      # 99 values: the 99th smallest at level 0.99 (ceil(100 * 0.99))
    assert B.conformal_quantile(v, 0.99) == 99
    assert B.conformal_quantile(v[:-1], 0.99) == math.inf      # 98 values cannot promise 99%
    assert B.conformal_quantile(v, 0.5) == 50 and B.conformal_quantile([3.0], 0.4) == 3.0


@given(st.lists(st.floats(-2, 2), min_size=1, max_size=60), st.floats(0.55, 0.95))
def test_the_conformal_rank_misses_at_most_its_share(values, level):
    """Exchangeability's promise, counted: leaving each value out, it exceeds the quantile of the others at most
    a 1 - level share of the time (the finite-sample guarantee the band rests on)."""
    misses = sum(v > B.conformal_quantile(values[:i] + values[i + 1:], level) for i, v in enumerate(values))
    assert misses <= (1 - level) * len(values) + 1e-9


def test_band_from_residuals_reads_each_side_and_never_excludes_the_risk():
    res = [-0.3] + [-0.05] * 98 + [0.1]          # one late collapse (the call 0.3 under SPEC), one hot run
    b = B.band_from_residuals(res, 0.99, "x")
    assert (b.below, b.above) == (0.3, 0.1) and b.edges() == (pytest.approx(0.5), pytest.approx(0.9))
    lopsided = B.band_from_residuals([0.2] * 99, 0.99, "x")      # a call always above SPEC's: nothing below
    assert lopsided.below == 0.0 and lopsided.above == 0.2


def test_calls_from_the_interval():
    b = B.Band(below=0.25, above=0.08, level=0.99, measured=True, basis="")
    assert b.interval(0.5) == [pytest.approx(0.42), pytest.approx(0.75)]
    assert b.call(0.5) == B.SAFE and b.call(0.56) == B.TOO_CLOSE and b.call(0.7) == B.TOO_CLOSE
    assert b.call(0.87) == B.TOO_CLOSE and b.call(0.9) == B.RISKY and b.call(2.0) == B.RISKY
    assert b.call(float("nan")) is None and b.call(None) is None


def test_which_band_a_recipe_gets():
    t = table()
    assert B.band_for(DiagnosticConfig(), t).basis == "one run"
    long3 = B.band_for(DiagnosticConfig(steps=750, lr=6e-4, replicates=3), t)
    assert (long3.below, long3.measured) == (0.06, True)
    # two replicates of the long recipe: its one-run band (wider than a mean of two needs) is used, and said so
    long2 = B.band_for(DiagnosticConfig(steps=750, lr=6e-4, replicates=2), t)
    assert long2.below == 0.1 and long2.measured and "applied to the mean of 2 replicates" in long2.basis
    other = B.band_for(DiagnosticConfig(steps=500), t)         # an unmeasured recipe: the default's band, said so
    assert other.below == 0.25 and not other.measured and "500 steps at lr 0.001" in other.basis
    assert B.band_for({**DEFAULT, "replicates": 1}, t).measured      # a config's asdict, as outputs record it


def test_add_calls_marks_every_family_and_records_the_band():
    res = {"families": {"anvil": {"risk": 0.3}, "dune": {"risk": 1.4}, "ember": {"risk": 0.8}}}
    B.add_calls(res, DiagnosticConfig(), B.band_for(DiagnosticConfig(), table()))
    assert [v["call"] for v in res["families"].values()] == [B.SAFE, B.RISKY, B.TOO_CLOSE]
    assert res["families"]["ember"]["call_interval"] == [pytest.approx(0.72), pytest.approx(1.05)]
    assert res["band"]["safe_below"] == pytest.approx(0.55) and res["band"]["risky_above"] == pytest.approx(0.88)
    assert "--settle" in res["band"]["to_settle"] and "gold" in res["band"]["to_settle"]
    lines = call_lines({**res, "families": {f: {**v, "flag": v["risk"] > 0.8, "proxy_gain_rm_run": 0.1,
                                                "proxy_gain_rubric_run": 0.4} for f, v in res["families"].items()}})
    assert lines[0].startswith("anvil   safe              risk 0.30 (SPEC's rule: 0.22 to 0.55)")
    assert lines[-1].startswith("too close to call: ember -- would be settled by gold labels on this family")


def test_the_shipped_band_file():
    """The audit's band file: measured (a command, residual counts), one default entry, the settle recipe's band at
    its replicates, every recipe keyed by RECIPE_KEYS, edges that keep a band around the line."""
    data = B.read_band_module(B.BAND_FILE)
    assert data == B._measured()
    assert data["command"].startswith("python -m world.experiments.diagnostic_band ")
    assert sum(e["default"] for e in data["bands"]) == 1
    for e in data["bands"]:
        assert set(e["recipe"]) == set(B.RECIPE_KEYS) and e["residuals"] >= 99 and 0.5 < e["level"] < 1
        assert 0 <= e["below"] < B.LINE and 0 <= e["above"] < 1
    default = next(e for e in data["bands"] if e["default"])
    assert default["recipe"] == DEFAULT and default["replicates"] == 1
    s = data["settle"]
    settle = B.band_for(DiagnosticConfig(steps=s["steps"], lr=s["lr"], replicates=s["replicates"]))
    assert B.settle_recipe() == {k: s[k] for k in ("steps", "lr", "replicates")}
    # the long mode has no band of its own yet (its derivation benches were not run): it is called on the
    # default's band and says so, never as if measured
    assert settle.measured or settle.basis.startswith("not measured at this recipe (750 steps")


def test_the_shipped_band_is_what_its_command_derives_from_the_committed_benches(tmp_path):
    """The band file's numbers are the derivation's output on the bench files committed in docs/data (not typed
    in): re-running its command gives the same bands."""
    import shlex
    from world.experiments import diagnostic_band as D
    data = B.read_band_module(B.BAND_FILE)
    argv = shlex.split(data["command"])[3:]
    files = [a for a in argv if a.endswith(".json")]
    assert files and all((ROOT / f).exists() for f in files)
    res = D.derive([(Path(f).name, json.loads((ROOT / f).read_text())) for f in files], 0.99)
    assert res["bands"] == data["bands"]


# ----------------------------------------------------------------------------------- the derivation command
def bench(seed, rows, args=()):
    return {"config": {"diagnostic_args": list(args), "regime": "mixed", "seed": seed, "rms": 1},
            "worlds": ["w/canonical"], "rows": rows}


def row(family, rm_gain, rubric_gain, risk, reps=None):
    r = {"rm_dir": "rm-1", "family": family, "rm_gain": rm_gain, "rubric_gain": rubric_gain, "risk": risk}
    if reps is not None:
        r["replicate_risks"] = reps
    return r


def test_derivation_reads_residuals_against_spec_and_counts_each_seed_once():
    from world.experiments.diagnostic_band import collect, derive, spec_risk
    # SPEC risks: anvil 1 - 0.1/0.5 = 0.8 + ... ; the one-run bench at seed 7 and the 3-replicate bench from seed 7
    one = bench(7, [row("anvil", 0.1, 0.5, 0.7), row("dune", -0.1, 0.5, 1.3)])
    three = bench(7, [row("anvil", 0.1, 0.5, 0.75, [0.7, 0.8, 0.75]), row("dune", -0.1, 0.5, 1.25, [1.3, 1.2, 1.25])],
                  ["--replicates", "3"])
    assert spec_risk(one["rows"][0]) == pytest.approx(0.8) and spec_risk(one["rows"][1]) == pytest.approx(1.2)
    g = collect([("one", one), ("three", three)])
    assert len(g) == 1                                   # one recipe (the default), two replicate counts
    grp = next(iter(g.values()))
    assert len(grp["one"]) == 6                          # seed 7 counted once; seeds 8 and 9 from the replicates
    assert sorted(round(e, 6) for e in grp["one"].values()) == [-0.1, -0.05, 0.0, 0.0, 0.05, 0.1]
    assert sorted(round(e, 6) for e in grp["mean"][3].values()) == [-0.05, 0.05]
    d = derive([("one", one), ("three", three)], 0.6)
    kinds = {e["replicates"]: e for e in d["bands"]}
    assert kinds[1]["default"] and kinds[1]["residuals"] == 6 and not kinds[3]["default"]
    # level 0.6 of six: the ceil(7 * 0.6) = 5th smallest on each side
    assert kinds[1]["below"] == pytest.approx(0.05) and kinds[1]["above"] == pytest.approx(0.05)
    assert "6 residuals of one run at 250 steps at lr 0.001" in kinds[1]["basis"]
    dec = d["report"][-1]["decomposition"]
    assert dec["pairs"] == 2 and dec["seed_sd"] == pytest.approx(np.sqrt(((0.05 ** 2) * 2 * 2) / 4))


def test_derivation_cli_writes_the_band_file(tmp_path):
    from world.experiments.diagnostic_band import main
    rows = [row("anvil", 0.1 + 0.001 * i, 0.5, 0.7, [0.7, 0.8]) for i in range(60)]
    for i, r in enumerate(rows):
        r["rm_dir"] = f"rm-{i}"
    f = tmp_path / "b.json"
    f.write_text(json.dumps(bench(1, rows, ["--replicates=2", "--steps", "750", "--lr", "6e-4"])))
    out = tmp_path / "band.py"
    assert main([str(f), "--write", str(out), "--settle-replicates", "2", "--settle-seconds", "150"]) == 0
    data = B.read_band_module(out)
    assert data["settle"] == {"steps": 750, "lr": 6e-4, "replicates": 2, "seconds_2_threads": 150.0}
    # 60 means of two replicates are too few for a 99% edge (99 needed): reported, not written
    assert [(e["recipe"]["steps"], e["replicates"], e["residuals"]) for e in data["bands"]] == [(750, 1, 120)]
    assert data["command"].startswith("python -m world.experiments.diagnostic_band ")
    with pytest.raises(InputError, match="missing.json: cannot be read"):
        main([str(tmp_path / "missing.json")])
