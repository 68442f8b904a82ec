import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from audit.task.rubric import (Rubric, RubricFitConfig, arrays_from_records, bootstrap_rubrics, cross_validate,
                          fit_rubric, lut_accuracy, policy_prior)
from rlhf.vocab import CONTENT
from tests.synth_rubric import make_family, true_quality

seeds = st.integers(0, 2**32 - 1)


def _acc(fam, **kw):
    return lut_accuracy(fit_rubric(fam.attrs, fam.resp, fam.labels, **kw), fam.assign, fam.lut)


def _truth(fam):
    return Rubric(assign=fam.assign, lut=fam.lut, entry_posterior=np.ones((8, 8)))


# ------------------------------------------------------------------------------------------- recovery

def test_accuracy_rises_with_rows():
    small = np.mean([_acc(make_family(s, 50)) for s in range(4)])
    large = np.mean([_acc(make_family(s, 400)) for s in range(4)])
    assert large >= 0.95
    assert large > small + 0.3


@given(seeds)
def test_recovery_with_policy_prior(seed):
    fam = make_family(seed, 300, n_ref=3000)
    prior_logp, key_logprior = policy_prior(fam.ref_attrs, fam.ref_resp)
    assert _acc(fam, prior_logp=prior_logp, key_logprior=key_logprior) >= 0.9


@given(seeds)
def test_recovery_without_prior_from_400_rows(seed):
    assert _acc(make_family(seed, 400)) >= 0.9


def test_prior_helps_with_few_rows():
    accs_none, accs_prior = [], []
    for s in range(4):
        fam = make_family(s, 50, n_ref=3000)
        accs_none.append(_acc(fam))
        accs_prior.append(_acc(fam, **dict(zip(("prior_logp", "key_logprior"),
                                               policy_prior(fam.ref_attrs, fam.ref_resp)))))
    assert np.mean(accs_prior) >= 0.9 > np.mean(accs_none)


def test_data_overrule_a_wrong_prior():
    # A prior built from another family's policy: with enough rows the data-started fit must win.
    fam, other = make_family(11, 300), make_family(12, 0, n_ref=3000)
    prior_logp, key_logprior = policy_prior(other.ref_attrs, other.ref_resp)
    assert _acc(fam, prior_logp=prior_logp, key_logprior=key_logprior) >= 0.9


def test_fitted_score_tracks_true_quality():
    fam = make_family(3, 300)
    rub = fit_rubric(fam.attrs, fam.resp, fam.labels)
    q = true_quality(fam.assign, fam.lut, fam.attrs, fam.resp)
    assert np.corrcoef(rub.score(fam.attrs, fam.resp), q)[0, 1] > 0.95
    assert 0.02 <= rub.sigma < 0.08 and rub.converged
    assert rub.identified.all() and rub.entry_posterior.shape == (8, 8)
    assert _truth(fam).score(fam.attrs, fam.resp) == pytest.approx(q)
    assert _truth(fam).correct(fam.attrs, fam.resp).dtype == bool


def test_weights_downweight_noisy_rows():
    fam = make_family(5, 300)
    labels = fam.labels.copy()
    labels[:150] = np.random.default_rng(0).uniform(0, 1, 150)      # half the rows are junk
    w = np.r_[np.full(150, 1e-3), np.ones(150)]
    assert _acc(fam, weights=w) > lut_accuracy(fit_rubric(fam.attrs, fam.resp, labels), fam.assign, fam.lut) - 1e-9
    assert lut_accuracy(fit_rubric(fam.attrs, fam.resp, labels, weights=w), fam.assign, fam.lut) >= 0.9


# ------------------------------------------------------------------------------------------- policy prior

def test_policy_prior_shapes_and_normalisation():
    fam = make_family(2, 0, n_ref=3000)
    prior_logp, key_logprior = policy_prior(fam.ref_attrs, fam.ref_resp)
    assert prior_logp.shape == (8, 4, 8, 24) and key_logprior.shape == (8, 4)
    assert np.allclose(np.exp(prior_logp).sum(-1), 1.0)
    assert np.allclose(np.exp(key_logprior).sum(-1), 1.0)
    assert np.all(np.isfinite(prior_logp)) and np.all(np.isfinite(key_logprior))
    assert np.array_equal(key_logprior.argmax(1), fam.assign)
    with pytest.raises(ValueError, match="no samples"):
        policy_prior(np.zeros((0, 4), int), np.zeros((0, 8), int))


# ------------------------------------------------------------------------------------------- uncertainty

def test_bootstrap_rubrics_deterministic_and_wider_with_less_data():
    fam = make_family(4, 300)
    a = bootstrap_rubrics(fam.attrs, fam.resp, fam.labels, n_boot=8, seed=1)
    b = bootstrap_rubrics(fam.attrs, fam.resp, fam.labels, n_boot=8, seed=1)
    assert len(a) == 8 and all(np.array_equal(x.lut, y.lut) for x, y in zip(a, b))

    def spread(rubs):   # share of LUT entries on which the refits disagree with their majority
        luts = np.stack([r.lut for r in rubs])
        return np.mean([np.mean(luts[:, p, v] != np.bincount(luts[:, p, v]).argmax())
                        for p in range(8) for v in range(8)])

    few = bootstrap_rubrics(fam.attrs[:40], fam.resp[:40], fam.labels[:40], n_boot=8, seed=1)
    assert spread(few) > spread(a)


def test_cross_validate():
    fam = make_family(6, 300)
    cv = cross_validate(fam.attrs, fam.resp, fam.labels, k=5, seed=0)
    assert cv["pearson"] > 0.9 and cv["rmse"] < 0.08 and len(cv["folds"]) == 5
    assert sum(f["n_test"] for f in cv["folds"]) == 300
    json.dumps(cv, allow_nan=False)
    with pytest.raises(ValueError, match="k"):
        cross_validate(fam.attrs[:3], fam.resp[:3], fam.labels[:3], k=5)


# ------------------------------------------------------------------------------------------- degenerate input

def test_zero_rows_raise():
    with pytest.raises(ValueError, match="no labelled rows"):
        fit_rubric(np.zeros((0, 4), int), np.zeros((0, 8), int), np.zeros(0))


@pytest.mark.parametrize("attrs, resp, labels, match", [
    (np.full((2, 4), 8), np.zeros((2, 8), int), [0.1, 0.2], "attrs: values must be in 0..7"),
    (np.zeros((2, 4), int), np.full((2, 8), 24), [0.1, 0.2], "resp: values must be in 0..23"),
    (np.zeros((2, 4), int), np.full((2, 8), -1), [0.1, 0.2], "resp: values must be in 0..23"),
    (np.zeros((2, 4), int), np.full((2, 8), 30), [0.1, 0.2], "token id - 16"),   # token ids, not indices
    (np.zeros((2, 3), int), np.zeros((2, 8), int), [0.1, 0.2], r"attrs: expected shape \[N, 4\]"),
    (np.zeros((2, 4), int), np.zeros((3, 8), int), [0.1, 0.2], "rows"),
    (np.zeros((2, 4), int), np.zeros((2, 8), int), [0.1], "labels: expected shape"),
    (np.zeros((2, 4), int), np.zeros((2, 8), int), [0.1, np.nan], "NaN"),
    (np.full((2, 4), 0.5), np.zeros((2, 8), int), [0.1, 0.2], "integers"),
])
def test_bad_input_raises_clear_error(attrs, resp, labels, match):
    with pytest.raises(ValueError, match=match):
        fit_rubric(attrs, resp, labels)


def test_bad_weights_and_prior_raise():
    fam = make_family(0, 10)
    with pytest.raises(ValueError, match="weights"):
        fit_rubric(fam.attrs, fam.resp, fam.labels, weights=np.zeros(10))
    with pytest.raises(ValueError, match="prior_logp"):
        fit_rubric(fam.attrs, fam.resp, fam.labels, prior_logp=np.zeros((8, 4, 8)))
    with pytest.raises(ValueError, match="finite"):
        fit_rubric(fam.attrs, fam.resp, fam.labels, prior_logp=np.full((8, 4, 8, 24), -np.inf))


def test_one_row_fits_and_marks_unseen_entries_unidentified():
    fam = make_family(1, 1)
    rub = fit_rubric(fam.attrs, fam.resp, fam.labels)
    assert rub.n_rows == 1 and rub.identified.sum(axis=1).tolist() == [1] * 8
    assert np.all((rub.entry_posterior >= 0) & (rub.entry_posterior <= 1))
    json.dumps(rub.to_json(), allow_nan=False)
    boots = bootstrap_rubrics(fam.attrs, fam.resp, fam.labels, n_boot=3)
    assert len(boots) == 3


def test_constant_labels_fit():
    fam = make_family(2, 100, n_ref=500)
    prior = policy_prior(fam.ref_attrs, fam.ref_resp)
    for kw in ({}, dict(zip(("prior_logp", "key_logprior"), prior))):
        rub = fit_rubric(fam.attrs, fam.resp, np.full(100, 0.3), **kw)
        assert np.all(np.isfinite(rub.entry_posterior)) and rub.sigma >= 0.02
    cv = cross_validate(fam.attrs, fam.resp, np.full(100, 0.3), k=3)
    assert cv["pearson"] == 0.0 and all(fold["pearson"] == 0.0 for fold in cv["folds"])   # constant: no association


@given(st.integers(1, 12), seeds)
def test_arbitrary_small_inputs_never_crash(n, seed):
    rng = np.random.default_rng(seed)
    attrs, resp = rng.integers(0, 8, (n, 4)), rng.integers(0, 24, (n, 8))
    labels = rng.choice([rng.normal(0.3, 1.0, n), np.full(n, rng.normal())])
    rub = fit_rubric(attrs, resp, labels, cfg=RubricFitConfig(max_sweeps=5))
    assert rub.assign.shape == (8,) and np.all((rub.assign >= 0) & (rub.assign < 4))
    assert np.all((rub.lut >= 0) & (rub.lut < 24))
    assert np.all((rub.entry_posterior >= 0) & (rub.entry_posterior <= 1))
    assert rub.score(attrs, resp).shape == (n,)


# ------------------------------------------------------------------------------------------- plain data

def test_json_round_trip_and_truth_format():
    fam = make_family(7, 200)
    rub = fit_rubric(fam.attrs, fam.resp, fam.labels)
    d = json.loads(json.dumps(rub.to_json(), allow_nan=False))
    assert all(t in CONTENT for row in d["lut"] for t in row)
    back = Rubric.from_json(d)
    assert np.array_equal(back.assign, rub.assign) and np.array_equal(back.lut, rub.lut)
    assert np.allclose(back.entry_posterior, rub.entry_posterior, atol=1e-6)
    # an oracle truth.json family entry: assign + lut of token strings only
    truth = {"assign": fam.assign.tolist(), "lut": [[CONTENT[t] for t in row] for row in fam.lut]}
    assert lut_accuracy(Rubric.from_json(truth), truth["assign"], truth["lut"]) == 1.0
    assert lut_accuracy(Rubric.from_json(truth), fam.assign, fam.lut) == 1.0
    with pytest.raises(ValueError, match="not a content token"):
        Rubric.from_json({"assign": [0] * 8, "lut": [["zz"] * 8] * 8})


def test_lut_accuracy_counts_key_and_token():
    fam = make_family(8, 0)
    rub = _truth(fam)
    wrong_key = Rubric(assign=(fam.assign + 1) % 4 * (np.arange(8) == 0) + fam.assign * (np.arange(8) != 0),
                       lut=fam.lut, entry_posterior=np.ones((8, 8)))
    assert lut_accuracy(rub, fam.assign, fam.lut) == 1.0
    assert lut_accuracy(wrong_key, fam.assign, fam.lut) == 56 / 64


def test_arrays_from_records():
    recs = [{"family": "anvil", "attrs": [1, 2, 3, 4], "response": list(CONTENT[:8]), "label": 0.5}]
    attrs, resp, labels = arrays_from_records(recs)
    assert attrs.tolist() == [[1, 2, 3, 4]] and resp.tolist() == [list(range(8))] and labels.tolist() == [0.5]


def test_config_validation():
    with pytest.raises(ValueError, match="max_sweeps"):
        RubricFitConfig(max_sweeps=0)
    with pytest.raises(ValueError, match="sigma"):
        RubricFitConfig(sigma=0.0)
    fam = make_family(9, 200)
    fixed = fit_rubric(fam.attrs, fam.resp, fam.labels, cfg=RubricFitConfig(sigma=0.05))
    assert fixed.sigma == 0.05 and lut_accuracy(fixed, fam.assign, fam.lut) >= 0.9
