import json

import pytest
from hypothesis import given, strategies as st

from audit.core.release import ReleaseRule
from rlhf.vocab import FAMILIES

GOOD_FAMS = {f: [0.01, 0.12] for f in FAMILIES}


def test_passes_and_says_why():
    out = ReleaseRule().evaluate(0.08, [0.05, 0.11], GOOD_FAMS)
    assert out["passes"] is True
    assert out["reasons"] == ["balanced gain 0.080 >= 0.05",
                              "balanced gain CI [0.050, 0.110] lower bound above 0",
                              "all 6 families non-inferior: lowest delta CI lower bound 0.010 (anvil) above -0.03"]
    assert out["rule"] == {"min_balanced_gain": 0.05, "balanced_ci_lower_gt": 0.0, "family_ci_lower_gt": -0.03,
                           "confidence": 0.95}
    json.dumps(out, allow_nan=False)


def test_fails_on_small_gain():
    out = ReleaseRule().evaluate(0.021, [0.005, 0.04], GOOD_FAMS)
    assert out["passes"] is False and out["reasons"] == ["balanced gain 0.021 < 0.05"]
    assert out["checks"]["balanced_gain"] is False and out["checks"]["balanced_ci"] is True


def test_fails_on_balanced_ci_lower_bound():
    out = ReleaseRule().evaluate(0.06, [-0.01, 0.13], GOOD_FAMS)
    assert out["passes"] is False
    assert out["reasons"] == ["balanced gain CI [-0.010, 0.130] lower bound below 0"]
    # exactly at the threshold is not "above": strict inequality as in the SPEC
    out = ReleaseRule().evaluate(0.06, [0.0, 0.13], GOOD_FAMS)
    assert out["passes"] is False and out["reasons"] == ["balanced gain CI [0.000, 0.130] lower bound not above 0"]


def test_fails_on_a_family_and_names_it():
    fams = dict(GOOD_FAMS, dune=[-0.13, -0.09])
    out = ReleaseRule().evaluate(0.08, [0.05, 0.11], fams)
    assert out["passes"] is False
    assert out["reasons"] == ["dune: delta CI [-0.130, -0.090] lower bound below -0.03"]
    assert out["checks"]["families"]["dune"] is False and out["checks"]["families"]["anvil"] is True


def test_all_failures_listed_in_family_order():
    fams = dict(GOOD_FAMS, ember=[-0.05, 0.0], birch=[-0.2, -0.1])
    out = ReleaseRule().evaluate(0.01, [-0.02, 0.04], fams)
    assert out["passes"] is False and len(out["reasons"]) == 4
    assert out["reasons"][0].startswith("balanced gain 0.010 < 0.05")
    assert out["reasons"][2].startswith("birch:") and out["reasons"][3].startswith("ember:")


def test_gain_exactly_at_threshold_passes():
    assert ReleaseRule().evaluate(0.05, [0.01, 0.09], GOOD_FAMS)["passes"] is True


def test_configurable_thresholds_and_description():
    rule = ReleaseRule(min_balanced_gain=0.1, family_ci_lower_gt=-0.01, confidence=0.9)
    out = rule.evaluate(0.08, [0.05, 0.11], dict(GOOD_FAMS, fjord=[-0.02, 0.05]))
    assert out["passes"] is False and len(out["reasons"]) == 2
    text = rule.describe()
    assert "0.1" in text and "-0.01" in text and "90%" in text
    assert "0.05" in ReleaseRule().describe() and "95%" in ReleaseRule().describe()


def test_bad_input_raises():
    rule = ReleaseRule()
    with pytest.raises(ValueError, match="balanced_delta_ci"):
        rule.evaluate(0.1, [0.2, 0.1], GOOD_FAMS)
    with pytest.raises(ValueError, match="dune"):
        rule.evaluate(0.1, [0.0, 0.2], {"dune": [float("nan"), 0.1]})
    with pytest.raises(ValueError, match="no families"):
        rule.evaluate(0.1, [0.0, 0.2], {})
    with pytest.raises(ValueError, match="balanced_delta"):
        rule.evaluate(float("inf"), [0.0, 0.2], GOOD_FAMS)


ci = st.tuples(st.floats(-1, 1), st.floats(0, 1)).map(lambda t: [t[0], t[0] + t[1]])


@given(st.floats(-1, 1), ci, st.dictionaries(st.sampled_from(FAMILIES), ci, min_size=1))
def test_passes_iff_every_condition_holds(delta, bci, fams):
    rule = ReleaseRule()
    out = rule.evaluate(delta, bci, fams)
    expected = (delta >= 0.05 and bci[0] > 0.0 and all(lo > -0.03 for lo, _ in fams.values()))
    assert out["passes"] is expected and out["reasons"]
