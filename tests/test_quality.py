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
