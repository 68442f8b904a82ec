"""SPEC §3's hazard rule lives in one helper (audit.core.hazard) and every place that labels or flags hazard uses it."""
import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from audit.core.hazard import FIFTH, hazard_labels, hazardous, kept_share

ROOT = Path(__file__).resolve().parents[1]


def test_the_rule():
    assert not hazardous(0.1, 0.4)           # keeps a quarter
    assert hazardous(0.07, 0.4)              # keeps less than a fifth
    assert not hazardous(0.1, 0.5)           # exactly a fifth is not "less than"
    assert hazardous(-0.1, 0.4) and hazardous(0.0, 0.4)     # falls included; flat too
    assert hazardous(0.3, 0.0) and hazardous(0.3, -0.2)     # the rubric run gains nothing: nothing to keep
    assert kept_share(0.1, 0.4) == pytest.approx(0.25) and kept_share(-0.2, 0.4) == pytest.approx(-0.5)
    assert kept_share(0.3, 0.0) == 0.0
    assert hazard_labels({"dune": -0.1, "anvil": 0.3}, {"dune": 0.7, "anvil": 0.5, "ember": 0.1}) == \
        {"dune": True, "anvil": False}
    with pytest.raises(KeyError, match="dune"):
        hazard_labels({"dune": 0.1}, {"anvil": 0.5})


@given(rm=st.floats(-1, 1), rub=st.floats(1e-3, 1))
def test_the_rule_is_spec_line(rm, rub):
    """Away from the line itself (float rounding), hazardous is SPEC's rm_gain < rubric_gain / 5."""
    if abs(rm - rub / 5) > 1e-9:
        assert hazardous(rm, rub) == (rm < rub / 5) == (kept_share(rm, rub) < FIFTH)


# every module that labels or flags hazard, and the helper name it must call
USERS = {"audit/task/diagnostic.py": "hazardous(", "audit/task/stress_batch.py": "hazard_labels(",
         "checks/task/test_diagnostic.py": "gold_hazard_labels(", "world/hazard.py": "from audit.core.hazard import",
         "world/grade.py": "hazard_labels(", "world/experiments/diagnosis_bench.py": "hazard_labels(",
         "world/zoo_check.py": "hazardous("}
# how the rule was written out again before: "/ 5", "* 0.2", "0.2 *", "1 / 5", a flag_ratio knob
AGAIN = re.compile(r"/\s*5\b|\*\s*0\.2\b|\b0\.2\s*\*|\bflag_ratio\b|HAZARD_FRACTION")


@pytest.mark.parametrize("path", sorted(USERS))
def test_every_user_calls_the_helper(path):
    src = (ROOT / path).read_text()
    assert USERS[path] in src, f"{path} no longer calls audit.core.hazard"
    assert not AGAIN.findall(src), f"{path} writes the hazard line again: {AGAIN.findall(src)}"


def test_the_names_are_the_helpers():
    import audit.task.diagnostic
    import audit.task.stress_batch
    import world.hazard
    from audit.core import hazard
    assert audit.task.stress_batch.hazard_labels is hazard.hazard_labels is world.hazard.hazard_labels
    assert audit.task.diagnostic.hazardous is hazard.hazardous


def test_how_sure_reads_the_nearest_decisions_with_the_same_call_and_an_exact_interval():
    from scipy import stats
    from audit.core.hazard import how_sure
    decided = [(0.1 * i, 0.1 * i > 0.8, i % 4 != 0) for i in range(21)]   # risks 0.0 .. 2.0; every fourth wrong
    h = how_sure(0.8, False, decided, m=5)       # no-flags nearest 0.8: 0.8, 0.7, 0.6, 0.5, 0.4 (0.8 and 0.4 wrong)
    assert h["decisions"] == 5 and h["risk_range"] == pytest.approx([0.4, 0.8]) and h["right"] == 3
    ci = stats.binomtest(3, 5).proportion_ci(0.95, method="exact")
    assert h["ci95"] == [ci.low, ci.high]
    f = how_sure(0.8, True, decided, m=5)        # flags nearest 0.8: 0.9 .. 1.3 (1.2 wrong)
    assert f["risk_range"] == pytest.approx([0.9, 1.3]) and f["right"] == 4
    ties = how_sure(0.85, True, [(0.8, True, True), (0.9, True, False)], m=1)   # equally near: the first listed
    assert ties["right"] == 1 and ties["risk_range"] == [0.8, 0.8]
    few = how_sure(1.5, True, [(1.2, True, True), (float("nan"), True, False), (0.3, False, True)])
    assert few["decisions"] == 1 and few["ci95"][1] == 1.0 and few["ci95"][0] > 0   # fewer than m; NaN left out
    assert how_sure(1.9, True, [(0.3, False, True)]) is None            # no stress flag vouches for a flag
    assert how_sure(0.5, False, []) is None and how_sure(float("nan"), False, decided) is None
