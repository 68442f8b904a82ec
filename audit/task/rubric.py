"""Recover a family's hidden expert rubric (SPEC §1) from labelled rows.

The truth: for each response position p (0..7) a key attribute k_p (0..3) and a lookup table LUT_p mapping the
key attribute's value (0..7) to a content token (0..23, repeats allowed). Position p is correct when
resp[p] == LUT_p[attrs[k_p]]; quality = share of the 8 positions correct; expert label = quality + N(0, sd^2).

Arrays used throughout (content tokens as indices 0..23, i.e. token id minus rlhf.vocab.CONTENT0):
    attrs [N, 4] ints 0..7,  resp [N, 8] ints 0..23,  labels [N] floats,  weights [N] (relative precisions).

Estimator: maximum a posteriori by backfitting. Given every other position's current match indicators, the
labels' squared error depends on position p only through which rows it marks correct, and that choice splits
into independent (value -> token) choices once the key attribute is fixed -- so each position's exact
conditional optimum is a few bincounts. Sweeping positions until nothing changes is coordinate ascent on the
posterior. A prior built from the reference policy's samples (policy_prior) fills in entries that the labelled
rows say little about.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlhf.vocab import CONTENT, CONTENT0, CONTENT_ID, N_ATTRS, N_CONTENT, N_VALUES, RESP_LEN

from audit.core.stats import _pearson

N_POS = RESP_LEN
_PRIOR_SHAPE = (N_POS, N_ATTRS, N_VALUES, N_CONTENT)


# ----------------------------------------------------------------------------------------------- validation

def _int_matrix(name: str, x, width: int, hi: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[1] != width:
        raise ValueError(f"{name}: expected shape [N, {width}], got {list(a.shape)}")
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer)
                               or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))):
        raise ValueError(f"{name}: expected integers, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= hi):
        hint = " (content index = token id - 16)" if name == "resp" else ""
        raise ValueError(f"{name}: values must be in 0..{hi - 1}{hint}; got min {a.min()}, max {a.max()}")
    return a


def _check_rows(attrs, resp):
    A = _int_matrix("attrs", attrs, N_ATTRS, N_VALUES)
    R = _int_matrix("resp", resp, N_POS, N_CONTENT)
    if len(A) != len(R):
        raise ValueError(f"attrs has {len(A)} rows but resp has {len(R)}")
    return A, R


def _check_labelled(attrs, resp, labels, weights):
    if np.size(labels) == 0 or len(np.asarray(attrs).reshape(-1)) == 0:
        raise ValueError("no labelled rows: a rubric cannot be fitted from zero rows")
    A, R = _check_rows(attrs, resp)
    y = np.asarray(labels, dtype=float)
    if y.shape != (len(A),):
        raise ValueError(f"labels: expected shape [{len(A)}], got {list(y.shape)}")
    if not np.all(np.isfinite(y)):
        raise ValueError("labels: contains NaN or infinite values")
    if weights is None:
        w = np.ones(len(A))
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (len(A),):
            raise ValueError(f"weights: expected shape [{len(A)}], got {list(w.shape)}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ValueError("weights: must be finite, >= 0, and not all zero")
    return A, R, y, w


def _check_prior(prior_logp, key_logprior):
    P = np.zeros(_PRIOR_SHAPE) if prior_logp is None else np.asarray(prior_logp, dtype=float)
    K = np.zeros((N_POS, N_ATTRS)) if key_logprior is None else np.asarray(key_logprior, dtype=float)
    if P.shape != _PRIOR_SHAPE:
        raise ValueError(f"prior_logp: expected shape {list(_PRIOR_SHAPE)}, got {list(P.shape)}")
    if K.shape != (N_POS, N_ATTRS):
        raise ValueError(f"key_logprior: expected shape [{N_POS}, {N_ATTRS}], got {list(K.shape)}")
    # -inf would make every token of an entry impossible; smoothing (policy_prior) keeps these finite.
    if not (np.all(np.isfinite(P)) and np.all(np.isfinite(K))):
        raise ValueError("prior_logp / key_logprior: must be finite (smooth the prior instead of using log 0)")
    return P, K


def _softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


# ----------------------------------------------------------------------------------------------- data types

@dataclass
class RubricFitConfig:
    prior_weight: float = 1.0        # multiplies prior_logp (0 = ignore the LUT prior)
    key_prior_weight: float = 1.0    # multiplies key_logprior
    max_sweeps: int = 20             # cap on backfitting sweeps (each sweep visits the 8 positions once)
    sigma: float | None = None       # label noise sd of a weight-1 row; None = estimate from residuals
    sigma_floor: float = 0.02        # keeps the likelihood from becoming infinitely sharp on a near-perfect fit

    def __post_init__(self):
        if self.max_sweeps < 1:
            raise ValueError(f"max_sweeps must be >= 1, got {self.max_sweeps}")
        if not self.sigma_floor > 0 or (self.sigma is not None and not self.sigma > 0):
            raise ValueError("sigma and sigma_floor must be > 0")
        if self.prior_weight < 0 or self.key_prior_weight < 0:
            raise ValueError("prior weights must be >= 0")


@dataclass
class Rubric:
    """A fitted (or true) rubric. Plain data: numpy arrays and numbers."""
    assign: np.ndarray                  # int [8]: key attribute per position
    lut: np.ndarray                     # int [8, 8]: lut[p, v] = content index of the correct token
    entry_posterior: np.ndarray         # float [8, 8]: posterior prob of lut[p, v] given the rest of the fit
    sigma: float | None = None          # label noise sd used in the final sweep
    n_rows: int = 0                     # labelled rows it was fitted on
    identified: np.ndarray = field(default_factory=lambda: np.ones((N_POS, N_VALUES), bool))
    # identified[p, v] False: no row had attrs[assign[p]] == v, so lut[p, v] came from the prior alone
    # (or is an arbitrary deterministic choice without a prior).
    key_posterior: np.ndarray = field(default_factory=lambda: np.ones(N_POS))  # prob of assign[p], given the rest
    n_sweeps: int = 0
    converged: bool = True
    objective: float | None = None      # log posterior (up to a constant) the fit reached; compares starts

    def correct(self, attrs, resp) -> np.ndarray:
        """bool [N, 8]: which positions of each response the rubric marks correct."""
        A, R = _check_rows(attrs, resp)
        expected = self.lut[np.arange(N_POS), A[:, self.assign]]
        return R == expected

    def score(self, attrs, resp) -> np.ndarray:
        """float [N]: fraction of the 8 positions correct (the rubric's quality)."""
        return self.correct(attrs, resp).mean(axis=1)

    def to_json(self) -> dict:
        """JSON-ready dict; "assign" and "lut" (token strings) use the oracle truth.json format."""
        return {"assign": [int(a) for a in self.assign],
                "lut": [[CONTENT[int(t)] for t in row] for row in self.lut],
                "entry_posterior": np.round(self.entry_posterior, 6).tolist(),
                "identified": self.identified.astype(bool).tolist(),
                "key_posterior": np.round(self.key_posterior, 6).tolist(),
                "sigma": None if self.sigma is None else float(self.sigma),
                "n_rows": int(self.n_rows), "n_sweeps": int(self.n_sweeps), "converged": bool(self.converged),
                "objective": None if self.objective is None else float(self.objective)}

    @classmethod
    def from_json(cls, d: dict) -> "Rubric":
        """Inverse of to_json. Only "assign" and "lut" are required, so an oracle truth.json family entry
        loads too (then every entry counts as certain and identified)."""
        assign = np.asarray(d["assign"])
        if assign.shape != (N_POS,) or not all(int(a) in range(N_ATTRS) for a in assign):
            raise ValueError(f"assign: expected {N_POS} integers in 0..{N_ATTRS - 1}, got {d['assign']!r}")
        lut = np.asarray([[_token_index(t) for t in row] for row in d["lut"]], dtype=np.int64)
        if lut.shape != (N_POS, N_VALUES):
            raise ValueError(f"lut: expected {N_POS} lists of {N_VALUES} tokens, got shape {list(lut.shape)}")
        return cls(assign=assign.astype(np.int64), lut=lut,
                   entry_posterior=np.asarray(d.get("entry_posterior", np.ones((N_POS, N_VALUES))), dtype=float),
                   sigma=d.get("sigma"), n_rows=int(d.get("n_rows", 0)),
                   identified=np.asarray(d.get("identified", np.ones((N_POS, N_VALUES), bool)), dtype=bool),
                   key_posterior=np.asarray(d.get("key_posterior", np.ones(N_POS)), dtype=float),
                   n_sweeps=int(d.get("n_sweeps", 0)), converged=bool(d.get("converged", True)),
                   objective=d.get("objective"))


def _token_index(t) -> int:
    if isinstance(t, str):
        if t not in CONTENT_ID:
            raise ValueError(f"lut: {t!r} is not a content token")
        return CONTENT_ID[t] - CONTENT0
    if not 0 <= int(t) < N_CONTENT:
        raise ValueError(f"lut: content index {t!r} out of range 0..{N_CONTENT - 1}")
    return int(t)


def arrays_from_records(records) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(attrs [N,4], resp [N,8] content indices, labels [N] or None) from labelled jsonl records."""
    attrs = np.asarray([r["attrs"] for r in records], dtype=np.int64).reshape(-1, N_ATTRS)
    resp = np.asarray([[CONTENT_ID[t] - CONTENT0 for t in r["response"]] for r in records],
                      dtype=np.int64).reshape(-1, N_POS)
    labels = np.asarray([r["label"] for r in records], dtype=float) if all("label" in r for r in records) else None
    return attrs, resp, labels


# ----------------------------------------------------------------------------------------------- fitting

def _robust_sigma(resid: np.ndarray, w: np.ndarray, cfg: RubricFitConfig) -> float:
    if cfg.sigma is not None:
        return float(cfg.sigma)
    # MAD of standardised residuals: a handful of rows that the current fit gets wrong by a whole position
    # (1/8) should not inflate the noise estimate and wash out the data term.
    z = np.abs(resid[w > 0] * np.sqrt(w[w > 0]))
    return max(cfg.sigma_floor, 1.4826 * float(np.median(z)))


def fit_rubric(attrs, resp, labels, *, weights=None, prior_logp=None, key_logprior=None,
               cfg: RubricFitConfig | None = None, init: Rubric | None = None) -> Rubric:
    """MAP rubric by backfitting over positions (see the module docstring).

    weights: relative precision per row (e.g. 1 for expert rows, (sd_expert/sd_crowd)^2 for crowd rows);
    sigma is then the noise sd of a weight-1 row. prior_logp [8,4,8,24] / key_logprior [8,4]: see policy_prior.
    init: start from this rubric instead of the prior's argmax (or, without a prior, a greedy first sweep).
    Raises ValueError on zero rows, shape mismatch or out-of-range values; one row or constant labels fit
    (most entries are then unidentified or weakly determined, which entry_posterior and bootstraps show).
    """
    cfg = cfg or RubricFitConfig()
    A, R, y, w = _check_labelled(attrs, resp, labels, weights)
    P, K = _check_prior(prior_logp, key_logprior)
    P, K = cfg.prior_weight * P, cfg.key_prior_weight * K
    has_prior = prior_logp is not None or key_logprior is not None

    # Row i falls in cell (k, attrs[i, k]) for each candidate key k; flat cell index k*8 + v.
    kv = np.arange(N_ATTRS) * N_VALUES + A                     # [N, 4]
    # A zero-weight row carries no evidence, so it does not make an entry identified.
    seen = np.bincount(kv[w > 0].ravel(), minlength=N_ATTRS * N_VALUES).reshape(N_ATTRS, N_VALUES) > 0

    if init is not None:
        starts = [(np.array(init.assign, dtype=np.int64), np.array(init.lut, dtype=np.int64))]
    elif has_prior:
        # Two starts, keep the better: the prior's own MAP rubric, and a greedy fit from the data alone.
        # From the prior's start alone, a prior that is wrong gets stuck: residuals of a wrong rubric are
        # large, so the estimated noise is large and the data term too weak to move any single position.
        assign = np.array([int(np.argmax(P[p].max(-1).sum(-1) + K[p])) for p in range(N_POS)])
        starts = [(assign, P[np.arange(N_POS), assign].argmax(-1)), None]
    else:
        starts = [None]
    fits = [_backfit(A, R, y, w, P, K, kv, start, cfg) for start in starts]
    best = max(fits, key=lambda f: f["objective"])         # ties -> the first start (deterministic)
    return Rubric(assign=best["assign"], lut=best["lut"], entry_posterior=best["post"], sigma=best["sigma"],
                  n_rows=len(y), identified=seen[best["assign"]], key_posterior=best["key_post"],
                  n_sweeps=best["sweeps"], converged=best["converged"], objective=best["objective"])


def _backfit(A, R, y, w, P, K, kv, start, cfg: RubricFitConfig) -> dict:
    n = len(y)
    n_cells = N_ATTRS * N_VALUES * N_CONTENT
    post = np.full((N_POS, N_VALUES), 1.0 / N_CONTENT)
    key_post = np.full(N_POS, 1.0 / N_ATTRS)
    if start is not None:
        assign, lut = start[0].copy(), start[1].copy()
        M = (R == lut[np.arange(N_POS), A[:, assign]]).astype(float)   # [N, 8] current match indicators
    else:
        assign, lut = np.full(N_POS, -1, dtype=np.int64), np.zeros((N_POS, N_VALUES), dtype=np.int64)
        # No starting rubric: let every not-yet-fitted position contribute the average per-position match
        # rate (= mean label), so the first sweep is a greedy fit that already accounts for the others.
        M = np.full((n, N_POS), float(np.clip(np.average(y, weights=w), 0.0, 1.0)))

    sigma, sweeps, converged = None, 0, False
    for sweeps in range(1, cfg.max_sweeps + 1):
        sigma = _robust_sigma(y - M.mean(axis=1), w, cfg)
        changed = False
        for p in range(N_POS):
            r = y - (M.sum(axis=1) - M[:, p]) / N_POS          # what is left for position p to explain
            # Marking row i correct at p changes its squared error by (r - 1/8)^2 - r^2 = 1/64 - r/4.
            c = w * (1.0 / 64 - r / 4)
            flat = kv * N_CONTENT + R[:, p, None]               # [N, 4]
            D = np.bincount(flat.ravel(), weights=np.repeat(c, N_ATTRS), minlength=n_cells)
            score = -D.reshape(N_ATTRS, N_VALUES, N_CONTENT) / (2 * sigma ** 2) + P[p]   # log posterior gain
            best_t = score.argmax(-1)                            # [4, 8]; ties -> lowest index (deterministic)
            key_score = score.max(-1).sum(-1) + K[p]             # [4]
            k = int(np.argmax(key_score))
            if k != assign[p] or np.any(best_t[k] != lut[p]):
                changed = True
            assign[p], lut[p] = k, best_t[k]
            M[:, p] = R[:, p] == lut[p][A[:, k]]
            # Conditional posteriors (the other positions held at their fitted values): per entry over the 24
            # tokens, and per position over the 4 keys. They understate uncertainty that flows between
            # positions; bootstrap_rubrics captures that.
            post[p] = np.take_along_axis(_softmax(score[k]), best_t[k][:, None], axis=-1)[:, 0]
            key_post[p] = _softmax(key_score)[k]
        if not changed:
            converged = True
            break

    # Objective to compare fits from different starts: profile log-likelihood of the labels (noise variance
    # at its weighted-mean-square estimate, floored) plus the log prior of the chosen rubric.
    resid = y - M.mean(axis=1)
    pos = w > 0
    var = max(cfg.sigma_floor ** 2, float(np.sum(w * resid ** 2) / pos.sum()))
    objective = (-0.5 * pos.sum() * np.log(var) + P[np.arange(N_POS)[:, None], assign[:, None],
                 np.arange(N_VALUES)[None, :], lut].sum() + K[np.arange(N_POS), assign].sum())
    return {"assign": assign, "lut": lut, "post": post, "key_post": key_post, "sigma": float(sigma),
            "sweeps": sweeps, "converged": converged, "objective": float(objective)}


def policy_prior(attrs, resp, *, smoothing: float = 0.5, key_temperature: float = 0.05, probs=None):
    """Prior for fit_rubric from samples of the reference policy (no labels needed).

    probs [M, 8, 24] (optional): the policy's next-token distribution at each position of each sample, given the
    sample's own prefix. Each sample then adds that distribution to the counts instead of its one drawn token:
    the same expected counts (the drawn token is a draw from it), with the token draw's noise gone
    (Rao-Blackwell). resp is then only checked for shape.

    prior_logp[p, a, v, t] = log of the smoothed frequency of token t at position p among samples with
    attrs[a] == v (`smoothing` pseudo-counts per token, so nothing is log 0). Rationale: the reference policy was
    fine-tuned on demonstrations that emit the rubric token often and, as distractors, tokens that other
    attributes predict; so under the true key its conditional token distribution peaks at the LUT entry, while
    under a wrong key the distractor mass is spread over values.

    key_logprior[p, a] = log_softmax over a of MI(attrs[a]; resp[p]) / key_temperature, MI in nats from the
    same smoothed counts. A heuristic: the key attribute usually shapes position p's tokens the most, but the
    distractors make other attributes informative too, so the temperature keeps this a soft preference
    (MI gaps of ~0.1 nat become a few nats of prior) that a few dozen labelled rows can overrule.
    """
    A, R = _check_rows(attrs, resp)
    if len(A) == 0:
        raise ValueError("policy_prior: no samples")
    if smoothing <= 0 or key_temperature <= 0:
        raise ValueError("policy_prior: smoothing and key_temperature must be > 0")
    # counts[p, a, v, t] via one bincount over the flat index ((p*4 + a)*8 + v)*24 + t for each sample.
    p_idx = np.arange(N_POS)[None, :, None]
    a_idx = np.arange(N_ATTRS)[None, None, :]
    if probs is None:
        flat = ((p_idx * N_ATTRS + a_idx) * N_VALUES + A[:, None, :]) * N_CONTENT + R[:, :, None]   # [M, 8, 4]
        counts = np.bincount(flat.ravel(), minlength=int(np.prod(_PRIOR_SHAPE))).reshape(_PRIOR_SHAPE).astype(float)
    else:
        probs = np.asarray(probs, dtype=float)
        if probs.shape != (len(A), N_POS, N_CONTENT) or not np.isfinite(probs).all():
            raise ValueError(f"policy_prior: probs must be finite, shape {(len(A), N_POS, N_CONTENT)}; got {probs.shape}")
        onehot = (A[:, :, None] == np.arange(N_VALUES)).astype(float)                      # [M, 4, 8]
        counts = np.einsum("mav,mpt->pavt", onehot, probs)
    cond = (counts + smoothing) / (counts.sum(-1, keepdims=True) + N_CONTENT * smoothing)    # P(t | a = v)
    prior_logp = np.log(cond)
    p_v = counts.sum(-1) / counts.sum((-1, -2))[..., None]                                   # [8, 4, 8]
    marg = (p_v[..., None] * cond).sum(-2, keepdims=True)                                    # P(t) [8, 4, 1, 24]
    mi = (p_v * (cond * (prior_logp - np.log(marg))).sum(-1)).sum(-1)                        # [8, 4]
    logits = mi / key_temperature
    key_logprior = logits - logits.max(1, keepdims=True)
    key_logprior -= np.log(np.exp(key_logprior).sum(1, keepdims=True))
    return prior_logp, key_logprior


# ----------------------------------------------------------------------------------------------- uncertainty

def bootstrap_rubrics(attrs, resp, labels, *, n_boot: int = 50, seed: int = 0, weights=None, prior_logp=None,
                      key_logprior=None, cfg: RubricFitConfig | None = None) -> list[Rubric]:
    """Rubrics refitted on rows resampled with replacement; deterministic for a given seed. Each refit starts
    afresh (not from the full-data fit) so that the spread includes the fit's sensitivity to its start."""
    A, R, y, w = _check_labelled(attrs, resp, labels, weights)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(y), len(y))
        if not np.any(w[idx] > 0):      # a resample of only zero-weight rows: draw again
            idx = np.concatenate([idx[:-1], rng.choice(np.flatnonzero(w > 0), 1)])
        out.append(fit_rubric(A[idx], R[idx], y[idx], weights=w[idx], prior_logp=prior_logp,
                              key_logprior=key_logprior, cfg=cfg))
    return out


def _corr(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:        # constant predictions or labels: no association to report (the
        return 0.0                              # formula would give nan, or +-1e-17 from the mean's rounding)
    r = float(_pearson(a, b))
    return 0.0 if not np.isfinite(r) else r


def cross_validate(attrs, resp, labels, *, k: int = 5, seed: int = 0, weights=None, prior_logp=None,
                   key_logprior=None, cfg: RubricFitConfig | None = None) -> dict:
    """k-fold cross-validation of fit_rubric: how well the rubric fitted on the other folds predicts held-out
    labels. Returns {"k", "seed", "n", "pearson", "rmse", "folds": [{"n_train", "n_test", "pearson", "rmse"}]}
    where the top-level pearson / rmse pool all held-out predictions (Pearson 0.0 when either side is constant).
    """
    A, R, y, w = _check_labelled(attrs, resp, labels, weights)
    n = len(y)
    if not 2 <= k <= n:
        raise ValueError(f"cross_validate: need 2 <= k <= number of rows ({n}), got k={k}")
    folds = np.array_split(np.random.default_rng(seed).permutation(n), k)
    pred = np.empty(n)
    per_fold = []
    for test in folds:
        train = np.setdiff1d(np.arange(n), test)
        if not np.any(w[train] > 0):
            raise ValueError("cross_validate: a training fold has only zero-weight rows")
        rub = fit_rubric(A[train], R[train], y[train], weights=w[train], prior_logp=prior_logp,
                         key_logprior=key_logprior, cfg=cfg)
        pred[test] = rub.score(A[test], R[test])
        per_fold.append({"n_train": int(len(train)), "n_test": int(len(test)),
                         "pearson": _corr(pred[test], y[test]) if len(test) > 1 else 0.0,
                         "rmse": float(np.sqrt(np.mean((pred[test] - y[test]) ** 2)))})
    return {"k": k, "seed": seed, "n": n, "pearson": _corr(pred, y),
            "rmse": float(np.sqrt(np.mean((pred - y) ** 2))), "folds": per_fold}


def lut_accuracy(rubric: Rubric, true_assign, true_lut) -> float:
    """Share of the 64 (p, v) entries where both the key and the token match the truth (tests / grading)."""
    ta = np.asarray(true_assign, dtype=np.int64)
    tl = np.asarray([[_token_index(t) for t in row] for row in true_lut], dtype=np.int64)
    if ta.shape != (N_POS,) or tl.shape != (N_POS, N_VALUES):
        raise ValueError("lut_accuracy: true_assign must have 8 entries and true_lut 8 rows of 8")
    ok = (np.asarray(rubric.assign) == ta)[:, None] & (np.asarray(rubric.lut) == tl)
    return float(ok.mean())
