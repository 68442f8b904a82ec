"""True-quality estimates of any policy, per family and balanced, on fresh prompts with uniform attributes,
scored by the recovered rubrics. The 95% CI combines the rubric's uncertainty (the policy's samples rescored
under every bootstrap refit; the larger side of its spread used both ways, see stats.combine_ci) with
Monte-Carlo sampling error. Deltas against the reference are paired: the same
prompts and the same random numbers for both policies (common random numbers), so shared noise cancels."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .recovery import sample_arrays, uniform_prompts
from .stats import combine_ci


@dataclass
class QualityConfig:
    prompts_per_family: int = 1500
    samples_per_prompt: int = 2
    temperature: float = 1.0
    method: str = "posterior"      # "posterior" or "bootstrap": see QualityEstimator._point_and_draws
    seed: int = 0


class QualityEstimator:
    def __init__(self, rubrics: dict, cfg: QualityConfig = QualityConfig()):
        self.rubrics, self.cfg = rubrics, cfg
        rng = np.random.default_rng(cfg.seed + 1)
        self.prompts = {f: uniform_prompts(f, cfg.prompts_per_family, rng) for f in rubrics}
        self._cache = {}

    def scores(self, key: str, policy) -> dict:
        """Per family: {"point": [N] under the fit, "bootstrap": [B, N] under the refits, "posterior": [S, N]
        under the posterior draws} of the policy's samples, cached by key."""
        if key not in self._cache:
            out = {}
            for k, f in enumerate(self.rubrics):
                A, R = sample_arrays(policy, self.prompts[f], self.cfg.samples_per_prompt,
                                     self.cfg.seed * 1009 + k, self.cfg.temperature)
                fr = self.rubrics[f]
                out[f] = {"point": fr.fit.score(A, R), "bootstrap": np.stack([b.score(A, R) for b in fr.boots]),
                          "posterior": fr.posterior.score(A, R)}
            self._cache[key] = out
        return self._cache[key]

    def _per_prompt(self, x):
        return x.reshape(*x.shape[:-1], -1, self.cfg.samples_per_prompt).mean(-1)

    def _point_and_draws(self, sc: dict, method: str):
        """(per-sample point scores [N], per-draw mean quality [B]) under `method`:
        "bootstrap": the fit's score, and the refits' means (the interval then uses the larger side both ways,
        see stats.combine_ci); "posterior": the posterior-mean score of each sample, and each posterior draw's
        mean (an interval straight from the posterior's percentiles)."""
        if method == "bootstrap":
            return sc["point"], sc["bootstrap"].mean(1)
        if method == "posterior":
            return sc["posterior"].mean(0), sc["posterior"].mean(1)
        raise ValueError(f"quality method must be 'bootstrap' or 'posterior', got {method!r}")

    def estimate(self, key: str, policy, reference=None, method: str = "bootstrap") -> dict:
        """Quality per family and balanced; with reference=(key, policy) also the paired deltas."""
        s = self.scores(key, policy)
        r = self.scores(*reference) if reference else None
        symmetric = True   # see stats.combine_ci: the larger side both ways, for either method
        fams = list(self.rubrics)
        per, draws_q, draws_d, se_q, se_d = {}, [], [], [], []
        for f in fams:
            point, q_draws = self._point_and_draws(s[f], method)
            pp = self._per_prompt(point)
            q_se = float(pp.std(ddof=1) / np.sqrt(len(pp)))
            res = {"estimate": float(point.mean()), "se_sampling": q_se,
                   "ci95": combine_ci(q_draws, q_se, estimate=float(point.mean()), symmetric=symmetric)["ci95"]}
            draws_q.append(q_draws)
            se_q.append(q_se)
            if r is not None:
                rpoint, r_draws = self._point_and_draws(r[f], method)
                diff = pp - self._per_prompt(rpoint)
                d_se = float(diff.std(ddof=1) / np.sqrt(len(diff)))
                d_draws = q_draws - r_draws
                d = float(point.mean() - rpoint.mean())
                res.update(reference=float(rpoint.mean()), delta=d, delta_se_sampling=d_se,
                           delta_ci95=combine_ci(d_draws, d_se, estimate=d, symmetric=symmetric)["ci95"])
                draws_d.append(d_draws)
                se_d.append(d_se)
            per[f] = res
        bal = float(np.mean([per[f]["estimate"] for f in fams]))
        bal_se = float(np.sqrt(np.sum(np.square(se_q))) / len(fams))
        out = {"per_family": per, "estimate": bal, "method": method,
               "ci95": combine_ci(np.mean(draws_q, 0), bal_se, estimate=bal, symmetric=symmetric)["ci95"],
               "se_sampling": bal_se, "n_boot": int(len(draws_q[0])),
               "prompts_per_family": self.cfg.prompts_per_family, "samples_per_prompt": self.cfg.samples_per_prompt}
        if r is not None:
            d = float(np.mean([per[f]["delta"] for f in fams]))
            d_se = float(np.sqrt(np.sum(np.square(se_d))) / len(fams))
            out.update(reference=float(np.mean([per[f]["reference"] for f in fams])), delta=d,
                       delta_ci95=combine_ci(np.mean(draws_d, 0), d_se, estimate=d, symmetric=symmetric)["ci95"])
        return out
