"""The adaptive diagnostic (audit.task.diagnostic_adaptive): its looks, its pooled interval and projection, that a
run continued is the longer run (its look at --steps equals the fixed diagnostic with the same replicates), that
stopping early changes no decision, and its config refused where it cannot work."""
import dataclasses

import numpy as np
import pytest
from scipy import stats

from audit.core.hazard import FIFTH, hazardous
from audit.task.diagnostic import DiagnosticConfig, diagnose
from audit.task.diagnostic_adaptive import checkpoints, pooled_intervals, projected_margin
from rlhf.errors import InputError
from rlhf.vocab import FAMILIES

from .test_diagnostic import SMALL


def _rep(gains: dict) -> dict:
    return {"families": {f: {"proxy_gain_rm_run": a, "proxy_gain_rubric_run": b} for f, (a, b) in gains.items()}}


def test_checkpoints_start_a_look_before_steps_and_end_at_max_steps():
    cfg = DiagnosticConfig(steps=250, max_steps=450, check_every=50, replicates=2)
    assert checkpoints(cfg) == [200, 250, 300, 350, 400, 450]
    assert checkpoints(dataclasses.replace(cfg, check_every=150)) == [100, 250, 400, 450]
    assert checkpoints(dataclasses.replace(cfg, check_every=500)) == [250, 450]     # the trend then starts at 0


def test_projected_margin_is_the_line_through_the_last_two_looks():
    assert projected_margin(0.05, 0.09, 250, 200, 450) == pytest.approx(0.05 - 0.04 * 4)    # falling: crosses
    assert projected_margin(0.05, 0.04, 250, 200, 450) == pytest.approx(0.09)
    assert projected_margin(-0.1, -0.1, 300, 250, 450) == pytest.approx(-0.1)


def test_pooled_interval_is_the_t_interval_on_the_pooled_variance():
    reps = [_rep({"anvil": (0.30, 0.40), "birch": (0.02, 0.40), "cobalt": (0.09, 0.40)}),
            _rep({"anvil": (0.32, 0.42), "birch": (-0.01, 0.38), "cobalt": (0.07, 0.40)})]
    out = pooled_intervals(reps)
    margins = np.array([[0.30 - FIFTH * 0.40, 0.02 - FIFTH * 0.40, 0.09 - FIFTH * 0.40],
                        [0.32 - FIFTH * 0.42, -0.01 - FIFTH * 0.38, 0.07 - FIFTH * 0.40]])
    s2 = ((margins - margins.mean(0)) ** 2).sum() / 3          # F (K - 1) = 3 degrees of freedom
    half = stats.t.ppf(0.975, 3) * np.sqrt(s2 / 2)
    for j, f in enumerate(("anvil", "birch", "cobalt")):
        lo, hi = out[f]["hazard_margin_ci"]
        assert lo == pytest.approx(margins[:, j].mean() - half) and hi == pytest.approx(margins[:, j].mean() + half)
        assert out[f]["settled"] == ((lo > 0 or hi < 0) and len(set(np.sign(margins[:, j]))) == 1)
    assert out["anvil"]["settled"] and not out["cobalt"]["settled"]     # far above the line; on it
    one = pooled_intervals(reps[:1])                                      # one replicate: nothing to say
    assert one["anvil"]["hazard_margin_ci"] is None and one["anvil"]["settled"] is None


def test_replicates_on_both_sides_never_settle():
    """Many calm families make the pooled interval narrow; one whose replicates straddle the line is still not
    settled, however its mean sits (a pool of any size: here twenty families)."""
    calm = {f"f{i}": (0.30, 0.40) for i in range(19)}
    reps = [_rep({**calm, "odd": (0.20, 0.40)}), _rep({**calm, "odd": (0.07, 0.40)})]
    out = pooled_intervals(reps)
    lo, hi = out["odd"]["hazard_margin_ci"]
    assert lo > 0 or hi < 0                      # the pooled interval alone would settle it
    assert not out["odd"]["settled"] and out["f0"]["settled"]


@pytest.mark.parametrize("replicates", [1, 2])
def test_look_at_steps_is_the_fixed_diagnostic_and_the_rest_decided_later(tiny_world, replicates):
    task = tiny_world / "task"
    args = (task / "reward_model", task / "policy", task / "data" / "prompts_train.jsonl")
    cfg = DiagnosticConfig(**SMALL, seed=5, replicates=replicates)
    fixed = diagnose(*args, cfg)
    ad = diagnose(*args, dataclasses.replace(cfg, max_steps=12, check_every=3, stop_early=False))
    assert [t["step"] for t in ad["trace"]] == [3, 6, 9, 12] and ad["steps_run"] == 12
    look = ad["trace"][1]
    # the same runs for the first 6 steps: stacked both ways when K = 2 (the same bits); with K = 1 the fixed path
    # trains its two runs one after the other, unstacked (the same up to float rounding, test_stacked.py)
    tol = 1e-9 if replicates == 2 else 0.02
    for f in FAMILIES:
        for key in ("proxy_gain_rm_run", "proxy_gain_rubric_run"):
            assert look["families"][f][key] == pytest.approx(fixed["families"][f][key], abs=tol)
    decided = [f for t in ad["trace"] for f in t["decided"]]
    assert sorted(decided, key=FAMILIES.index) == list(FAMILIES)          # every family decided once, at >= 6
    assert not ad["trace"][0]["decided"]
    for f, r in ad["families"].items():
        at = r["decided_at_step"]
        seen = next(t for t in ad["trace"] if t["step"] == at)["families"][f]
        assert r["hazard_margin"] == seen["hazard_margin"] and r["projected_margin"] == seen["projected_margin"]
        assert r["flag"] == hazardous(r["proxy_gain_rm_run"], r["proxy_gain_rubric_run"])
        holds = r["hazard_margin"] * r["projected_margin"] > 0
        assert at == 12 or (holds and r["settled"] is not False)         # early only when both checks hold
    early = diagnose(*args, dataclasses.replace(cfg, max_steps=12, check_every=3))
    assert early["families"] == ad["families"]                           # stopping early changes no decision
    assert early["steps_run"] == max(r["decided_at_step"] for r in ad["families"].values())


def test_adaptive_config_refused_where_it_cannot_work():
    with pytest.raises(InputError, match="max_steps"):
        DiagnosticConfig(max_steps=200)              # not beyond steps (250)
