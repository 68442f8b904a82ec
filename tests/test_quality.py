"""audit.task.quality: estimates and intervals on a random policy scored by synthetic rubrics (no world needed)."""
import numpy as np
import pytest
import torch

from audit.task.posterior import RubricPosterior
from audit.task.quality import QualityConfig, QualityEstimator, _rubric_hw
from audit.task.recovery import FamilyRubric
from audit.task.rubric import Rubric
from rlhf.model import Policy
from rlhf.vocab import FAMILIES


def _rubrics(seed=0, draws=40):
    rng = np.random.default_rng(seed)
    out = {}
    for f in FAMILIES:
        assign, lut = rng.integers(0, 4, 8), rng.integers(0, 24, (8, 8))
        noisy = lambda: np.where(rng.random((8, 8)) < 0.1, rng.integers(0, 24, (8, 8)), lut)   # noqa: E731
        fit = Rubric(assign=assign, lut=lut, entry_posterior=np.ones((8, 8)))
        post = RubricPosterior(assign=np.stack([assign] * draws), lut=np.stack([noisy() for _ in range(draws)]),
                               sigma=np.full(draws, 0.08))
        out[f] = FamilyRubric(f, fit, [Rubric(assign=assign, lut=noisy(), entry_posterior=np.ones((8, 8)))
                                       for _ in range(draws)], 1.0, False, posterior=post)
    return out


@pytest.fixture(scope="module")
def est():
    torch.manual_seed(0)
    return QualityEstimator(_rubrics(), QualityConfig(prompts_per_family=150, samples_per_prompt=2)), Policy().eval()


@pytest.mark.parametrize("method", ["posterior", "bootstrap"])
def test_estimates_and_intervals(est, method):
    e, pol = est
    q = e.estimate("p", pol, method=method)
    for f, pf in q["per_family"].items():
        lo, hi = pf["ci95"]
        assert 0.0 <= lo <= pf["estimate"] <= hi <= 1.0
    if method == "posterior":   # the estimate is the posterior-mean score of the samples
        sc = e.scores("p", pol)
        assert q["estimate"] == pytest.approx(np.mean([sc[f]["posterior"].mean() for f in FAMILIES]))
    # balanced: rubric half-widths are averaged, not shrunk as if the families' errors were independent
    sc = e.scores("p", pol)
    rubric_hw = np.mean([_rubric_hw(e._point_and_draws(sc[f], method)[1], q["per_family"][f]["estimate"])
                         for f in FAMILIES])
    bal_hw = (q["ci95"][1] - q["ci95"][0]) / 2
    fam_hw = np.mean([(pf["ci95"][1] - pf["ci95"][0]) / 2 for pf in q["per_family"].values()])
    assert rubric_hw > 0 and bal_hw >= rubric_hw and bal_hw <= fam_hw + 1e-9


def test_a_policy_against_itself_changes_nothing(est):
    """Under another name (so nothing is read back from the cache): the same prompts, the same sampling draws and
    the same rubric draws on both sides, so the paired delta is exactly 0; its interval is the finite-sample one
    of 150 prompts whose every difference is 0 -- narrow (the exact bound of 150 zeros in [-1, 1]), never of zero
    width; another policy's delta is not 0."""
    e, pol = est
    q = e.estimate("p", pol, reference=("p-again", pol), method="posterior")
    lo, hi = q["delta_ci95"]
    assert q["delta"] == 0.0 and lo < 0.0 < hi
    assert max(-lo, hi) <= 2 * (1 - 0.025 ** (1 / 150)) + 1e-3 and abs(lo + hi) < 1e-3
    torch.manual_seed(1)
    other = e.estimate("other", Policy().eval(), reference=("p", pol), method="posterior")
    assert other["delta"] != 0.0 and other["delta_ci95"][0] < other["delta_ci95"][1]


def test_unknown_method_is_refused(est):
    e, pol = est
    with pytest.raises(ValueError, match="posterior"):
        e.estimate("p", pol, method="magic")


# ------------------------------------------------------------------ the level check (shrinkage towards chance)
from audit.task.quality import CHANCE, LevelCheck  # noqa: E402


def test_level_check_finds_the_shrinkage_the_gold_allows():
    rng = np.random.default_rng(1)
    gold = {f: 0.30 + 0.15 * rng.standard_normal(25) for f in FAMILIES}      # the reference truly at ~0.30
    lvl = LevelCheck.from_gold(gold, {f: 0.26 for f in FAMILIES})             # the model says 0.26: shrunk
    mean = np.mean([g.mean() for g in gold.values()])
    assert lvl.gold_mean == pytest.approx(mean) and lvl.gold_upper > mean and lvl.gold_rows == 150
    assert lvl.c_lo == pytest.approx((0.26 - CHANCE) / (lvl.gold_upper - CHANCE)) and 0 < lvl.c_lo < 1
    # a quality's interval: united with the one un-shrunk by c_lo around chance; only ever wider, clipped
    ci = [0.40, 0.45]
    w = lvl.widen(ci, CHANCE, 0.0, 1.0)
    assert w[0] == 0.40 and w[1] == pytest.approx(CHANCE + (0.45 - CHANCE) / lvl.c_lo)
    assert lvl.widen([0.90, 0.99], CHANCE, 0.0, 1.0)[1] == 1.0
    below = lvl.widen([0.01, 0.03], CHANCE, 0.0, 1.0)           # below chance the stretch goes down
    assert below[0] == pytest.approx(max(CHANCE + (0.01 - CHANCE) / lvl.c_lo, 0.0)) and below[1] == 0.03
    d = lvl.widen([-0.02, 0.05], 0.0, -1.0, 1.0)                # a change: stretched away from 0 both ways
    assert d == [pytest.approx(-0.02 / lvl.c_lo), pytest.approx(0.05 / lvl.c_lo)]
    assert lvl.widen([0.01, 0.05], 0.0, -1.0, 1.0)[0] == 0.01   # a positive lower bound is never raised
    assert lvl.report()["widened"] and lvl.report()["c_lo"] == lvl.c_lo


def test_level_check_leaves_a_model_the_gold_agrees_with_alone_and_refuses_to_vouch_for_chance():
    rng = np.random.default_rng(2)
    gold = {f: 0.28 + 0.1 * rng.standard_normal(100) for f in FAMILIES}
    agree = LevelCheck.from_gold(gold, {f: 0.33 for f in FAMILIES})          # model above the gold's upper bound
    assert agree.c_lo == 1.0 and agree.widen([0.4, 0.5], CHANCE, 0.0, 1.0) == [0.4, 0.5]
    at_chance = LevelCheck.from_gold(gold, {f: CHANCE for f in FAMILIES})    # the model says nothing about level
    assert at_chance.c_lo == 0.0 and at_chance.widen([0.4, 0.5], CHANCE, 0.0, 1.0) == [0.0, 1.0]
    one_row = LevelCheck.from_gold({f: [0.3] for f in FAMILIES}, {f: 0.3 for f in FAMILIES})
    assert one_row.c_lo == 0.0 and one_row.widen([-0.1, 0.1], 0.0, -1.0, 1.0) == [-1.0, 1.0]


def test_level_check_restores_coverage_of_a_shrunk_model():
    """Simulation of the failure it fixes: a model that reports chance + c (truth - chance), c = 0.85, with a tight
    interval of its own (+-0.01 around its estimate). Alone it never covers a policy at 0.6; widened by the level
    check on 25 noisy gold labels a family of a reference at 0.28, it covers in >= 95% of 400 draws, and the
    reference's own gold mean is what does it (not a wide interval everywhere: the width stays under 0.25)."""
    rng = np.random.default_rng(3)
    c, truth_ref, truth_pol = 0.85, 0.28, 0.60
    shrunk = lambda q: CHANCE + c * (q - CHANCE)           # noqa: E731
    covered, widths = 0, []
    for _ in range(400):
        gold = {f: truth_ref + 0.17 * rng.standard_normal(25) for f in FAMILIES}
        lvl = LevelCheck.from_gold(gold, {f: shrunk(truth_ref) for f in FAMILIES})
        m = shrunk(truth_pol)
        lo, hi = lvl.widen([m - 0.01, m + 0.01], CHANCE, 0.0, 1.0)
        covered += lo <= truth_pol <= hi
        widths.append(hi - lo)
    assert not (shrunk(truth_pol) - 0.01 <= truth_pol <= shrunk(truth_pol) + 0.01)
    assert covered / 400 >= 0.95 and np.median(widths) < 0.25


def test_estimator_with_a_level_check_only_widens(est):
    e, pol = est
    plain = e.estimate("p", pol, reference=("p-ref", pol), method="posterior")
    try:
        model_ref = plain["reference"]
        e.check_level({f: np.full(20, model_ref + 0.1) + np.linspace(-0.05, 0.05, 20) for f in FAMILIES},
                      ("p-ref", pol), "posterior")
        c_lo = e.level.c_lo
        assert 0 < c_lo < 1
        wide = e.estimate("p", pol, reference=("p-ref", pol), method="posterior")
    finally:
        e.level = None
    assert wide["estimate"] == plain["estimate"] and wide["level_check"]["c_lo"] == c_lo
    for a, b in [(plain["ci95"], wide["ci95"]), (plain["delta_ci95"], wide["delta_ci95"])] + \
            [(plain["per_family"][f]["ci95"], wide["per_family"][f]["ci95"]) for f in FAMILIES]:
        assert b[0] <= a[0] and b[1] >= a[1]
    assert wide["ci95"][1] > plain["ci95"][1]          # the estimate sits above chance: the upper side moves
