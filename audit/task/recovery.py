"""Recover every family's expert rubric from a task: gold rows, plus the crowd QA rows of families whose crowd
labels agree with the experts, with the reference policy's token frequencies as a prior. Uncertainty comes from
refits on resampled rows (gold and the crowd rows used are resampled, each within its own set)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from rlhf.data import prompts_tensor
from rlhf.model import sample
from rlhf.vocab import CONTENT0, FAMILIES

from .agreement import RUBRIC_MAX
from .posterior import PosteriorConfig, sample_posterior
from .rubric import RubricFitConfig, arrays_from_records, bootstrap_rubrics, cross_validate, fit_rubric, policy_prior


@dataclass
class RecoveryConfig:
    prior_samples_per_family: int = 4000     # reference-policy samples behind the prior
    prior_weights: tuple = (1.0, 2.0, 4.0, 8.0)   # candidates, chosen per family by cross-validation on gold
    n_boot: int = 100
    cv_folds: int = 5
    # crowd rows join a family's fit only when their labels look like the experts': no label above the rubric's
    # maximum, slope of crowd label on the gold-fitted score within these bounds, and residual sd below this
    trust_slope: tuple = (0.75, 1.25)
    trust_max_resid_sd: float = 0.12
    posterior: PosteriorConfig = field(default_factory=PosteriorConfig)
    seed: int = 0


def uniform_prompts(family: str, n: int, rng: np.random.Generator) -> list[dict]:
    return [{"id": f"audit-{family}-{i}", "family": family, "attrs": a.tolist()}
            for i, a in enumerate(rng.integers(0, 8, (n, 4)))]


def sample_arrays(policy, records, n_per_prompt: int, seed: int, temperature: float = 1.0, batch: int = 1024):
    """(attrs [N,4], resp content indices [N,8]) of a policy's samples; row i belongs to prompt i // n."""
    gen = torch.Generator().manual_seed(seed)
    out = [sample(policy, prompts_tensor(records[i:i + batch]), n_per_prompt, temperature, gen)
           for i in range(0, len(records), batch)]
    attrs = np.repeat(np.array([r["attrs"] for r in records]), n_per_prompt, axis=0)
    return attrs, (torch.cat(out) - CONTENT0).numpy()


def association_prior(prior_logp: np.ndarray) -> np.ndarray:
    """Key-neutral *association* prior from the policy's conditional token log-frequencies [8,4,8,24]: the lift
    log P(t | attr a = v) - log P(t | position), shifted so that under every (position, attribute, value) the
    most associated token costs nothing and the others pay their log-lift gap.

    Why lift and not frequency: the reference policy was fine-tuned on demonstrations where plausible distractor
    tokens are produced *whatever the key attribute says*, often more than the rubric's token; the rubric's token
    is the one whose frequency moves with the key attribute's value. Measured on the canonical world: the
    frequency mode is the rubric token for 2-44% of entries, the lift mode for 89-98%; and raw log-frequencies
    (not shifted per key) made the fit pick the distractor's attribute as the key. Attributes are uniform, so
    P(t | position) is the mean over values."""
    lift = prior_logp - np.log(np.exp(prior_logp).mean(2, keepdims=True))
    return lift - lift.max(-1, keepdims=True)


@dataclass
class FamilyRubric:
    family: str
    fit: object                       # Rubric
    boots: list
    prior_weight: float
    crowd_trusted: bool
    trust: dict = field(default_factory=dict)
    cv: dict = field(default_factory=dict)
    n_gold: int = 0
    n_crowd: int = 0
    posterior: object = None          # RubricPosterior: Gibbs draws given the same rows and prior


def _trust(fit, crowd_rows, cfg: RecoveryConfig) -> dict:
    """Do this family's crowd labels agree with the experts' rubric (as fitted on gold)?"""
    if not crowd_rows:
        return {"trusted": False, "reason": "no crowd rows"}
    A, R, y = arrays_from_records(crowd_rows)
    s = fit.score(A, R)
    above = float((y > RUBRIC_MAX).mean())
    if np.std(s) == 0:
        return {"trusted": False, "reason": "gold-fitted scores constant on crowd rows", "above_1": above}
    slope, intercept = np.polyfit(s, y, 1)
    resid_sd = float(np.std(y - (slope * s + intercept)))
    ok = above == 0 and cfg.trust_slope[0] <= slope <= cfg.trust_slope[1] and resid_sd <= cfg.trust_max_resid_sd
    return {"trusted": bool(ok), "above_1": above, "slope": float(slope), "intercept": float(intercept),
            "resid_sd": resid_sd, "reason": "labels agree with the gold-fitted rubric" if ok else
            "labels off the experts' scale or rubric"}


def recover_family(family, gold_rows, crowd_rows, ref_policy, cfg: RecoveryConfig) -> FamilyRubric:
    rng = np.random.default_rng(cfg.seed + FAMILIES.index(family))
    pa, pr = sample_arrays(ref_policy, uniform_prompts(family, cfg.prior_samples_per_family, rng), 1,
                           cfg.seed * 7 + FAMILIES.index(family))
    prior = association_prior(policy_prior(pa, pr)[0])
    key_prior = None
    A, R, y = arrays_from_records(gold_rows)
    # the prior's weight: the one that predicts held-out gold best
    cvs = {w: cross_validate(A, R, y, k=min(cfg.cv_folds, len(y)), seed=cfg.seed, prior_logp=prior,
                             key_logprior=key_prior, cfg=RubricFitConfig(prior_weight=w))
           for w in cfg.prior_weights}
    w_best = max(cvs, key=lambda w: (round(cvs[w]["pearson"], 3), -w))
    fcfg = RubricFitConfig(prior_weight=w_best)
    gold_fit = fit_rubric(A, R, y, prior_logp=prior, key_logprior=key_prior, cfg=fcfg)
    trust = _trust(gold_fit, crowd_rows, cfg)
    if trust["trusted"]:
        CA, CR, cy = arrays_from_records(crowd_rows)
        # weight rows by inverse noise variance: expert noise from the gold fit, crowd from the trust regression
        wg = 1.0 / max(gold_fit.sigma, 0.02) ** 2
        wc = 1.0 / max(trust["resid_sd"], 0.02) ** 2
        A2, R2, y2 = np.concatenate([A, CA]), np.concatenate([R, CR]), np.concatenate([y, cy])
        w2 = np.concatenate([np.full(len(y), wg), np.full(len(cy), wc)]) / wg
        fit = fit_rubric(A2, R2, y2, weights=w2, prior_logp=prior, key_logprior=key_prior, cfg=fcfg)
        boots = _stratified_boots(A2, R2, y2, w2, len(y), prior, key_prior, fcfg, cfg)
    else:
        fit = gold_fit
        A2, R2, y2, w2 = A, R, y, None
        boots = bootstrap_rubrics(A, R, y, n_boot=cfg.n_boot, seed=cfg.seed, prior_logp=prior,
                                  key_logprior=key_prior, cfg=fcfg)
    post = sample_posterior(A2, R2, y2, init=fit, weights=w2, prior_logp=prior, prior_weight=w_best,
                            cfg=dataclasses.replace(cfg.posterior, seed=cfg.seed * 1000 + 31 + FAMILIES.index(family)))
    return FamilyRubric(family, fit, boots, w_best, trust["trusted"], trust, cvs[w_best], len(y),
                        len(crowd_rows) if trust["trusted"] else 0, post)


def _stratified_boots(A, R, y, w, n_gold, prior, key_prior, fcfg, cfg):
    """Refits on gold and crowd rows each resampled within its own set."""
    rng = np.random.default_rng(cfg.seed + 99)
    n = len(y)
    out = []
    for _ in range(cfg.n_boot):
        idx = np.concatenate([rng.integers(0, n_gold, n_gold), rng.integers(n_gold, n, n - n_gold)])
        out.append(fit_rubric(A[idx], R[idx], y[idx], weights=w[idx], prior_logp=prior, key_logprior=key_prior,
                              cfg=fcfg))
    return out


def recover_rubrics(task, ref_policy, cfg: RecoveryConfig = RecoveryConfig(), families=FAMILIES) -> dict:
    return {f: recover_family(f, [r for r in task.gold if r["family"] == f],
                              [r for r in task.qa if r["family"] == f], ref_policy, cfg) for f in families}


def summary(fr: FamilyRubric) -> dict:
    return {"family": fr.family, "prior_weight": fr.prior_weight, "crowd_trusted": fr.crowd_trusted,
            "trust": fr.trust, "cv_pearson": fr.cv.get("pearson"), "cv_rmse": fr.cv.get("rmse"),
            "n_gold": fr.n_gold, "n_crowd": fr.n_crowd, "n_boot": len(fr.boots), "sigma": fr.fit.sigma,
            "rubric": fr.fit.to_json()}
