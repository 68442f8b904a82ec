"""audit.task.posterior: the Gibbs posterior over a family's rubric, on synthetic families (tests/synth_rubric.py)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from audit.task.posterior import PosteriorConfig, RubricPosterior, sample_posterior
from audit.task.recovery import association_prior
from audit.task.rubric import Rubric, fit_rubric, policy_prior
from tests.synth_rubric import make_family, true_quality

FAST = PosteriorConfig(n_samples=100, burn_in=10, thin=1)


def _posterior(fam, prior=True, cfg=FAST, init=None):
    P = association_prior(policy_prior(fam.ref_attrs, fam.ref_resp)[0]) if prior else None
    fit = init or fit_rubric(fam.attrs, fam.resp, fam.labels, prior_logp=P)
    return sample_posterior(fam.attrs, fam.resp, fam.labels, init=fit, prior_logp=P, prior_weight=4.0, cfg=cfg), fit


def _emit(assign, lut, attrs):
    """A deterministic policy that answers every prompt with the given rubric's tokens."""
    return lut[np.arange(8), attrs[:, assign]]


def test_ample_rows_concentrate_on_the_truth():
    fam = make_family(3, 600, n_ref=3000)
    post, _ = _posterior(fam)
    assert post.entry_probability(fam.assign, fam.lut).mean() > 0.97
    assert (post.mode().assign == fam.assign).all()


def test_few_rows_without_prior_stay_uncertain():
    fam = make_family(4, 30, n_ref=0)
    post, _ = _posterior(fam, prior=False)
    p = post.entry_probability(fam.assign, fam.lut)
    assert p.mean() < 0.8                  # 30 rows cannot settle 64 entries
    assert len(np.unique(post.lut.reshape(len(post), -1), axis=0)) > 10   # the chain moves


def test_key_is_found_from_a_wrong_start():
    fam = make_family(5, 400, n_ref=0)
    wrong = Rubric(assign=(fam.assign + 1) % 4, lut=np.zeros((8, 8), int), entry_posterior=np.ones((8, 8)), sigma=0.1)
    post, _ = _posterior(fam, prior=False, init=wrong, cfg=PosteriorConfig(n_samples=50, burn_in=30, thin=1))
    assert np.mean(post.assign == fam.assign[None]) > 0.95


def test_table_and_expected_score_agree_with_the_draws():
    fam = make_family(6, 120, n_ref=2000)
    post, _ = _posterior(fam)
    A, R = fam.ref_attrs[:300], fam.ref_resp[:300]
    assert np.allclose(post.expected_score(A, R), post.score(A, R).mean(0))
    T = post.table()
    assert T.shape == (8, 4, 8, 24) and np.allclose(T.sum((1, 3)), 1.0)   # per (p, v): one key and one token


def test_deterministic_for_a_seed_and_different_across_seeds():
    fam = make_family(7, 80, n_ref=1000)
    a, _ = _posterior(fam)
    b, _ = _posterior(fam)
    c, _ = _posterior(fam, cfg=PosteriorConfig(n_samples=100, burn_in=10, thin=1, seed=1))
    assert np.array_equal(a.lut, b.lut) and np.array_equal(a.sigma, b.sigma)
    assert not np.array_equal(a.lut, c.lut)


def test_prior_weight_is_learned_from_the_prior_reliability():
    # the family's own reference samples: a reliable prior, so the sampled weight is high; another family's
    # samples: an unrelated prior, so the weight falls towards 0 and the data decide
    fam, other = make_family(8, 150, n_ref=3000), make_family(9, 0, n_ref=3000)
    own, _ = _posterior(fam)
    P_other = association_prior(policy_prior(other.ref_attrs, other.ref_resp)[0])
    fit = fit_rubric(fam.attrs, fam.resp, fam.labels)
    foreign = sample_posterior(fam.attrs, fam.resp, fam.labels, init=fit, prior_logp=P_other, prior_weight=4.0,
                               cfg=FAST)
    assert np.median(own.prior_weight) >= 4.0
    assert np.median(foreign.prior_weight) <= 1.0


@settings(max_examples=8)
@given(st.integers(0, 2**31 - 1), st.sampled_from([40, 80, 160]))
def test_posterior_mean_is_honest_for_a_policy_trained_on_the_fit(seed, n_rows):
    """The winner's curse the posterior exists for: a policy that emits exactly the fitted rubric's tokens is
    scored 1.0 by that fit, right or wrong; the posterior mean must track its exact quality instead, within its
    own spread (5 sd, so the property is not flaky)."""
    fam = make_family(seed, n_rows, n_ref=2000)
    post, fit = _posterior(fam)
    rng = np.random.default_rng(seed)
    A = rng.integers(0, 8, (2000, 4))
    R = _emit(fit.assign, fit.lut, A)
    exact = true_quality(fam.assign, fam.lut, A, R).mean()
    draws = post.score(A, R).mean(1)
    assert fit.score(A, R).mean() == 1.0
    assert abs(draws.mean() - exact) <= 5 * draws.std() + 0.01


def test_bad_config_is_refused():
    with pytest.raises(ValueError):
        PosteriorConfig(n_samples=1)
    fam = make_family(1, 20)
    with pytest.raises(ValueError, match="labels"):
        sample_posterior(fam.attrs, fam.resp, fam.labels[:-1], init=fit_rubric(fam.attrs, fam.resp, fam.labels))


def test_posterior_of_given_draws():
    post = RubricPosterior(assign=np.zeros((2, 8), int), lut=np.stack([np.zeros((8, 8), int), np.ones((8, 8), int)]),
                           sigma=np.array([0.1, 0.1]))
    A = np.zeros((3, 4), int)
    assert np.allclose(post.expected_score(A, np.zeros((3, 8), int)), 0.5)
    assert np.allclose(post.entry_probability(np.zeros(8, int), np.zeros((8, 8), int)), 0.5)
