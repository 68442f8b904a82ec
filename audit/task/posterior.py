"""Posterior over a family's rubric by Gibbs sampling: the uncertainty a policy *optimised against* the
recovered rubric inherits.

Why not only the MAP fit and its bootstrap refits (audit.task.rubric)? A policy trained to emit exactly the LUT
entries the fit believes is scored 1.0 on every one of them by that fit, right or wrong (winner's curse); the
refits share most of the fit's errors, because the errors that matter are the ones the data cannot settle. The
posterior instead gives every entry the probability the data (and the prior) assign to it, so
E_posterior[score(policy)] credits the policy's choice at entry (p, v) with P(LUT_p[v] = that token | data) --
an honest estimate for *any* policy, however it was chosen, as long as the model is right: labels = mean of 8
match indicators + Gaussian noise (SPEC §1), which is exactly how expert labels are made.

Sampler (blocked, collapsed per position): given the other positions' match indicators, position p's
likelihood factorises over the key attribute's values (audit.task.rubric's module docstring), so
    P(key_p = k | rest)           ∝ K[p, k] * prod_v sum_t exp(score[k, v, t])      (LUT summed out)
    P(LUT_p[v] = t | key, rest)   ∝ exp(score[k, v, t])
with score = data log-likelihood gain + normalised log prior; then the noise variance from its conditional
(scaled inverse chi-square, Jeffreys prior, floored). Chains start at the MAP fit.

The LUT prior is audit.task.recovery's association prior (a pseudo-likelihood from the reference policy's samples,
its weight chosen by cross-validation on gold); here it is normalised per (position, key, value) so every key
has a proper prior over LUTs -- the collapsed key step compares marginal likelihoods, which an unnormalised
prior would bias towards keys with flatter priors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlhf.vocab import N_ATTRS, N_CONTENT, N_VALUES

from .rubric import N_POS, Rubric, _check_labelled, _check_prior


def _logsumexp(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)


@dataclass
class PosteriorConfig:
    n_samples: int = 200        # posterior draws kept
    burn_in: int = 20           # sweeps discarded first (chains start at the MAP fit, so little is needed)
    thin: int = 2               # sweeps between kept draws
    sigma_floor: float = 0.02   # as audit.task.rubric: keeps the likelihood from becoming infinitely sharp
    # the prior's weight is itself sampled, on this grid with a uniform (log-spaced) hyperprior: how far to
    # trust the reference policy's associations is learned from how well they predict the LUT entries the
    # labels do settle, so the uncertain entries get the prior's *measured* reliability (see the docstring)
    prior_weights: tuple = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
    seed: int = 0

    def __post_init__(self):
        if self.n_samples < 2 or self.burn_in < 0 or self.thin < 1:
            raise ValueError("PosteriorConfig: need n_samples >= 2, burn_in >= 0, thin >= 1")


@dataclass
class RubricPosterior:
    """Draws from the posterior: assign [S, 8], lut [S, 8, 8], sigma [S], prior_weight [S]."""
    assign: np.ndarray
    lut: np.ndarray
    sigma: np.ndarray
    prior_weight: np.ndarray | None = None

    def __len__(self):
        return len(self.assign)

    def correct(self, attrs, resp) -> np.ndarray:
        """bool [S, N, 8]: which positions each draw marks correct."""
        A, R = np.asarray(attrs), np.asarray(resp)
        keyvals = np.take_along_axis(A[None, :, :], self.assign[:, None, :], axis=2)       # [S, N, 8]
        expected = self.lut[np.arange(len(self))[:, None, None], np.arange(N_POS)[None, None, :], keyvals]
        return expected == R[None]

    def score(self, attrs, resp) -> np.ndarray:
        """float [S, N]: each draw's quality score of each response."""
        return self.correct(attrs, resp).mean(-1)

    def table(self) -> np.ndarray:
        """float [8, 4, 8, 24]: P(key_p = k and LUT_p[v] = t) -- the posterior-expected correctness of token t
        at position p for a prompt whose attribute k has value v is sum_k table[p, k, attrs[k], t]."""
        T = np.zeros((N_POS, N_ATTRS, N_VALUES, N_CONTENT))
        s = len(self)
        p = np.broadcast_to(np.arange(N_POS)[None, :, None], (s, N_POS, N_VALUES))
        k = np.broadcast_to(self.assign[:, :, None], (s, N_POS, N_VALUES))
        v = np.broadcast_to(np.arange(N_VALUES)[None, None, :], (s, N_POS, N_VALUES))
        np.add.at(T, (p, k, v, self.lut), 1.0 / s)
        return T

    def expected_score(self, attrs, resp) -> np.ndarray:
        """float [N]: posterior-mean quality of each response (= score(...).mean(0), without the [S, N] array)."""
        A, R = np.asarray(attrs), np.asarray(resp)
        T = self.table()
        per_pos = T[np.arange(N_POS)[None, :, None], np.arange(N_ATTRS)[None, None, :], A[:, None, :],
                    R[:, :, None]].sum(-1)                                                     # [N, 8]
        return per_pos.mean(-1)

    def mode(self) -> Rubric:
        """The most frequent key per position and, under it, the most frequent token per value."""
        assign = np.array([np.bincount(self.assign[:, p], minlength=N_ATTRS).argmax() for p in range(N_POS)])
        T = self.table()
        lut = T[np.arange(N_POS), assign].argmax(-1)
        post = T[np.arange(N_POS), assign].max(-1) / np.maximum(T[np.arange(N_POS), assign].sum(-1), 1e-12)
        return Rubric(assign=assign, lut=lut, entry_posterior=post)

    def entry_probability(self, assign, lut) -> np.ndarray:
        """float [8, 8]: posterior probability that (key_p, LUT_p[v]) equals the given rubric's."""
        assign, lut = np.asarray(assign), np.asarray(lut)
        return ((self.assign == assign[None])[:, :, None] & (self.lut == lut[None])).mean(0)


def sample_posterior(attrs, resp, labels, *, init: Rubric, weights=None, prior_logp=None, prior_weight: float = 1.0,
                     cfg: PosteriorConfig | None = None) -> RubricPosterior:
    """Gibbs draws from the rubric posterior given labelled rows (see the module docstring). `init` is the
    MAP fit (audit.task.rubric.fit_rubric) the chain starts from; weights are relative precisions as in fit_rubric."""
    cfg = cfg or PosteriorConfig()
    A, R, y, w = _check_labelled(attrs, resp, labels, weights)
    P, _ = _check_prior(prior_logp, None)
    grid = np.asarray(cfg.prior_weights if prior_logp is not None else (0.0,), dtype=float)
    LP = grid[:, None, None, None, None] * P[None]
    LP = LP - _logsumexp(LP)[..., None]                # [G, 8, 4, 8, 24]: proper prior over tokens per cell
    g = int(np.argmin(np.abs(grid - prior_weight)))    # start at the given weight (nearest grid point)
    rng = np.random.default_rng(cfg.seed)
    n_cells = N_ATTRS * N_VALUES * N_CONTENT
    kv = np.arange(N_ATTRS) * N_VALUES + A                                  # [N, 4] flat cell (key, value)
    assign, lut = np.array(init.assign, dtype=np.int64), np.array(init.lut, dtype=np.int64)
    M = (R == lut[np.arange(N_POS), A[:, assign]]).astype(float)
    pos_w = w > 0
    sigma = max(cfg.sigma_floor, float(init.sigma or 0.0))
    out_a, out_l, out_s, out_w = [], [], [], []
    total = cfg.burn_in + cfg.n_samples * cfg.thin
    for sweep in range(total):
        for p in range(N_POS):
            r = y - (M.sum(axis=1) - M[:, p]) / N_POS
            c = w * (1.0 / 64 - r / 4)
            flat = kv * N_CONTENT + R[:, p, None]
            D = np.bincount(flat.ravel(), weights=np.repeat(c, N_ATTRS), minlength=n_cells)
            score = -D.reshape(N_ATTRS, N_VALUES, N_CONTENT) / (2 * sigma ** 2) + LP[g, p]
            key_logit = _logsumexp(score).sum(-1)                            # [4]: LUT summed out
            k = int(rng.choice(N_ATTRS, p=_normalise(key_logit)))
            probs = np.exp(score[k] - score[k].max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            # one inverse-CDF draw per value (vectorised categorical)
            u = rng.random((N_VALUES, 1))
            lut[p] = np.minimum((probs.cumsum(-1) < u).sum(-1), N_CONTENT - 1)
            assign[p] = k
            M[:, p] = R[:, p] == lut[p][A[:, k]]
        # prior weight | current rubric: how probable each grid weight makes the 64 current (key, LUT) entries
        w_logit = LP[:, np.arange(N_POS)[:, None], assign[:, None], np.arange(N_VALUES)[None, :], lut].sum((1, 2))
        g = int(rng.choice(len(grid), p=_normalise(w_logit)))
        resid = y - M.mean(axis=1)
        ss = float(np.sum(w[pos_w] * resid[pos_w] ** 2))
        sigma = max(cfg.sigma_floor, float(np.sqrt(ss / rng.chisquare(pos_w.sum()))))
        if sweep >= cfg.burn_in and (sweep - cfg.burn_in) % cfg.thin == cfg.thin - 1:
            out_a.append(assign.copy()), out_l.append(lut.copy()), out_s.append(sigma), out_w.append(grid[g])
    return RubricPosterior(np.stack(out_a), np.stack(out_l), np.array(out_s), np.array(out_w))


def _normalise(logits):
    z = np.exp(logits - logits.max())
    return z / z.sum()
