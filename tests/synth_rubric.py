"""A small synthetic stand-in for one family of the world (SPEC §1), for testing audit.task.rubric quickly.

Reference-like responses: per position, the rubric token with prob p_rubric, a distractor LUT_p[attrs[a']]
for a random other attribute a' with prob p_distractor, a uniform content token otherwise.
Expert labels = true quality + N(0, noise^2). Content tokens are indices 0..23.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_POS, N_ATTRS, N_VALUES, N_CONTENT = 8, 4, 8, 24


@dataclass
class SynthFamily:
    assign: np.ndarray      # [8]
    lut: np.ndarray         # [8, 8]
    attrs: np.ndarray       # [N, 4] labelled rows
    resp: np.ndarray        # [N, 8]
    labels: np.ndarray      # [N]
    ref_attrs: np.ndarray   # [M, 4] unlabelled reference samples (for the policy prior)
    ref_resp: np.ndarray    # [M, 8]


def random_rubric(rng):
    return rng.integers(0, N_ATTRS, N_POS), rng.integers(0, N_CONTENT, (N_POS, N_VALUES))


def true_quality(assign, lut, attrs, resp):
    return (resp == lut[np.arange(N_POS), attrs[:, assign]]).mean(axis=1)


def reference_responses(rng, assign, lut, attrs, p_rubric=0.30, p_distractor=0.42):
    n = len(attrs)
    rubric_tok = lut[np.arange(N_POS), attrs[:, assign]]                         # [N, 8]
    other = (assign[None, :] + rng.integers(1, N_ATTRS, (n, N_POS))) % N_ATTRS  # a random attribute != key
    distractor = lut[np.arange(N_POS)[None, :], attrs[np.arange(n)[:, None], other]]
    uniform = rng.integers(0, N_CONTENT, (n, N_POS))
    u = rng.random((n, N_POS))
    return np.where(u < p_rubric, rubric_tok, np.where(u < p_rubric + p_distractor, distractor, uniform))


def make_family(seed: int, n_rows: int, n_ref: int = 0, noise: float = 0.04) -> SynthFamily:
    rng = np.random.default_rng(seed)
    assign, lut = random_rubric(rng)
    attrs = rng.integers(0, N_VALUES, (n_rows, N_ATTRS))
    resp = reference_responses(rng, assign, lut, attrs)
    labels = true_quality(assign, lut, attrs, resp) + rng.normal(0, noise, n_rows)
    ref_attrs = rng.integers(0, N_VALUES, (n_ref, N_ATTRS))
    ref_resp = reference_responses(rng, assign, lut, ref_attrs)
    return SynthFamily(assign, lut, attrs, resp, labels, ref_attrs, ref_resp)
