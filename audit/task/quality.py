"""True-quality estimates of any policy, per family and balanced, on fresh prompts with uniform attributes,
scored by the recovered rubrics. Default method "posterior": the estimate is the posterior-mean rubric score
(audit.task.posterior: each LUT entry a policy relies on credited with its posterior probability -- honest for a
policy trained against the recovered rubric, which the fit itself would credit in full); "bootstrap": the
fit's score with refits on resampled rows. The 95% CI combines the rubric's uncertainty (the policy's samples
rescored under every draw; the larger side of the spread used both ways, see stats.combine_ci) with
Monte-Carlo sampling error, clipped to the quantity's range. The sampling error's half-widths come from the
finite-sample interval of a bounded mean (audit.core.bounded) on the per-prompt scores, which lie in [0, 1] (their
differences in [-1, 1]): a policy whose every sample scores 1 still gets an interval below 1, never a zero-width
one. Deltas against the reference are paired: the same prompts and the same random numbers for both policies
(common random numbers), so shared noise cancels.

The level check (`LevelCheck`, docs/intervals.md "The task door's level"): with few gold rows a family, the
posterior spreads each entry's credit over several tokens and every policy's posterior-mean score is pulled
towards chance, model = chance + c (truth - chance) with one c < 1 for every policy (measured: canonical at 25 gold
rows a family, c = 0.915 fits the reference and all five runs to 0.002; the tiny world at 10 rows, c = 0.16), a
shift the posterior's spread does not contain. The reference is the one policy whose true level the gold labels
give without a model (they are its samples): their mean's upper 97.5% bound U gives the smallest shrinkage the
data allow, c_lo = (model(reference) - chance) / (U - chance), one for all families (one procedure, one prior:
per family, 25 rows would say little). Every interval is then widened to also hold what the model's own interval
says un-shrunk by c_lo: [lo, hi] u [chance + (lo - chance) / c_lo, chance + (hi - chance) / c_lo] for a quality,
[lo, hi] u [lo / c_lo, hi / c_lo] for a change. A union: it only widens, the estimates stay the model's.
At the task's own 100 rows a family it costs little (canonical: c_lo 0.965); at 25 it is what honesty costs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scipy import stats

from audit.core import bounded
from rlhf.vocab import N_CONTENT
from .recovery import sample_arrays, uniform_prompts
from audit.core.stats import combine_ci



CHANCE = 1.0 / N_CONTENT     # a uniformly drawn content token matches a rubric entry with this chance


@dataclass
class LevelCheck:
    """The reference's level from its gold labels against the model's estimate of it: the smallest shrinkage
    towards chance `c_lo` the gold allows (1: none; 0: the model says nothing about level)."""
    gold_mean: float          # balanced: the mean of the families' gold label means
    gold_upper: float         # its upper 97.5% bound (Student t on the families' pooled standard error)
    gold_rows: int
    model_reference: float    # the model's balanced estimate of the reference
    c_lo: float

    @classmethod
    def from_gold(cls, gold: dict, model_reference: dict) -> "LevelCheck":
        """gold: {family: labels of the reference's samples}; model_reference: {family: model estimate}."""
        fams = list(model_reference)
        labels = [np.asarray(gold.get(f, ()), dtype=float) for f in fams]
        m_ref = float(np.mean([model_reference[f] for f in fams]))
        if any(len(x) < 2 for x in labels):     # no spread to bound the mean with: the model's level is unchecked
            return cls(float("nan"), float("nan"), sum(map(len, labels)), m_ref, 0.0)
        mean = float(np.mean([x.mean() for x in labels]))
        se = float(np.sqrt(sum(x.var(ddof=1) / len(x) for x in labels)) / len(fams))
        upper = mean + float(stats.t.ppf(0.975, sum(map(len, labels)) - len(fams))) * se
        c_lo = (m_ref - CHANCE) / (upper - CHANCE) if upper > CHANCE else 1.0
        return cls(mean, upper, sum(map(len, labels)), m_ref, float(np.clip(c_lo, 0.0, 1.0)))

    def widen(self, ci, center: float, lo: float, hi: float) -> list:
        """ci united with ci stretched away from `center` (chance for a quality, 0 for a change) by 1 / c_lo,
        clipped to [lo, hi]."""
        if self.c_lo >= 1.0:
            return list(ci)
        if self.c_lo <= 0.0:
            return [lo, hi]
        s_lo, s_hi = (center + (x - center) / self.c_lo for x in ci)
        return [max(min(ci[0], s_lo), lo), min(max(ci[1], s_hi), hi)]

    def report(self) -> dict:
        return {"chance": CHANCE, "gold_mean": self.gold_mean, "gold_upper97_5": self.gold_upper,
                "gold_rows": self.gold_rows, "model_reference": self.model_reference, "c_lo": self.c_lo,
                "widened": self.c_lo < 1.0}


def _rubric_hw(draws, estimate) -> float:
    """The rubric's half-width around `estimate`: the larger side of the draws' 95% percentile interval, used
    both ways (stats.combine_ci(symmetric=True): draws tell how uncertain the rubric is, not in which direction
    its errors move a given policy)."""
    return max(combine_ci(draws, 0.0, estimate=estimate, symmetric=True)["rubric_halfwidths"])


def _interval(estimate, rubric_hw, sampling_hw, lo, hi) -> list:
    """estimate - sqrt(rubric_hw^2 + sampling_lo^2), estimate + sqrt(rubric_hw^2 + sampling_hi^2), clipped to what
    the quantity can be: a quality lies in [0, 1], a change in [-1, 1] (a wide interval can otherwise cross the
    bound next to a near-perfect policy)."""
    s_lo, s_hi = sampling_hw
    return [max(estimate - float(np.hypot(rubric_hw, s_lo)), lo), min(estimate + float(np.hypot(rubric_hw, s_hi)), hi)]


def _sampling_hw(terms, seed: int, key) -> tuple:
    """(below, above): the half-widths of the finite-sample 95% interval of sum_k w_k mean(x_k) for independent
    per-prompt scores x_k in [lo_k, hi_k], terms = [(w_k, x_k, lo_k, hi_k)] (audit.core.bounded)."""
    parts = [(w, bounded.draw(x, lo, hi, bounded.stream(seed, *key, k))) for k, (w, x, lo, hi) in enumerate(terms)]
    out = bounded.interval(parts, 0.95)
    lo_b, hi_b = out["ci95"]
    return max(out["estimate"] - lo_b, 0.0), max(hi_b - out["estimate"], 0.0)


def intervals(method: str, n_boot: int, level: dict | None = None) -> dict:
    """Which intervals the task door's quality figures use and why, for the report."""
    rubric = ("the rubric's uncertainty: the policy's samples rescored under {b} posterior draws of the recovered "
              "rubric" if method == "posterior" else "the rubric's uncertainty: {b} rubric refits on resampled "
              "gold") + "; the larger side of their 95% spread, used both ways"
    return {"method": "recovered-rubric quality: rubric uncertainty combined in quadrature with the sampling error",
            "rubric": rubric.format(b=n_boot),
            "sampling": f"{bounded.METHOD} of the per-prompt scores (in [0, 1]; paired differences in [-1, 1]), "
                        "balanced figures with one pseudo-observation for the sum (audit.core.bounded)",
            "level": _level_text(level),
            "confidence": 0.95,
            "why": "the gold labels fit the rubric that scores every policy, so the rubric's uncertainty dominates; "
                   "the sampling part is a finite-sample interval for a bounded score, so a policy whose every "
                   "sample scores 1 still gets an interval below 1 (docs/intervals.md)"}


def _level_text(level: dict | None) -> str:
    if not level:
        return "not checked against the gold labels' level"
    if not level["widened"]:
        return (f"checked: the reference's gold labels (mean {level['gold_mean']:.3f}, {level['gold_rows']} rows) allow "
                f"no shrinkage towards chance of the model's estimate {level['model_reference']:.3f}")
    if level["c_lo"] <= 0.0:
        return ("the model's estimate of the reference is at chance: its level is unchecked, every interval spans "
                "the quantity's range")
    return (f"widened for the model's shrinkage towards chance: the reference's gold labels (mean "
            f"{level['gold_mean']:.3f}, upper bound {level['gold_upper97_5']:.3f}, {level['gold_rows']} rows) against "
            f"the model's {level['model_reference']:.3f} allow a shrinkage factor down to {level['c_lo']:.3f}; every "
            "interval also holds the model's own interval un-shrunk by it")


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
        self.level = None      # LevelCheck once check_level has run: every later interval is widened by it

    def check_level(self, gold: dict, reference, method: str) -> LevelCheck:
        """Compare the model's estimate of the reference (key, policy) with its gold labels {family: labels}."""
        sc = self.scores(*reference)
        self.level = LevelCheck.from_gold(gold, {f: float(self._point_and_draws(sc[f], method)[0].mean())
                                                 for f in self.rubrics})
        return self.level

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

    def _level(self, ci, center, lo, hi):
        return self.level.widen(ci, center, lo, hi) if self.level else ci

    def estimate(self, key: str, policy, reference=None, method: str = "bootstrap") -> dict:
        """Quality per family and balanced; with reference=(key, policy) also the paired deltas.

        Per family: the rubric's half-width (the larger side both ways) combined in quadrature with the
        Monte-Carlo error. Balanced (the mean over families): Monte-Carlo errors are independent across families
        and combine in quadrature, but the rubric's half-width is the *mean* of the families' -- the recovered
        rubrics come from one procedure with one kind of prior, so their errors can lean the same way in every
        family (measured on a world with 3-4-token distractors: every family's posterior estimate of the own
        policy sat below its exact value, and an interval that let them cancel missed)."""
        s = self.scores(key, policy)
        r = self.scores(*reference) if reference else None
        fams = list(self.rubrics)
        seed, ref_key = self.cfg.seed, (reference[0] if reference else None)
        per, hw_q, hw_d, se_q, se_d, pps, diffs = {}, [], [], [], [], [], []
        for f in fams:
            point, q_draws = self._point_and_draws(s[f], method)
            pp = self._per_prompt(point)
            q, q_se = float(point.mean()), float(pp.std(ddof=1) / np.sqrt(len(pp)))
            hw_q.append(_rubric_hw(q_draws, q))
            se_q.append(q_se)
            pps.append(pp)
            res = {"estimate": q, "se_sampling": q_se,
                   "ci95": self._level(_interval(q, hw_q[-1], _sampling_hw([(1.0, pp, 0.0, 1.0)], seed, (key, f)),
                                                 0.0, 1.0), CHANCE, 0.0, 1.0)}
            if r is not None:
                rpoint, r_draws = self._point_and_draws(r[f], method)
                diff = pp - self._per_prompt(rpoint)
                diffs.append(diff)
                d, d_se = float(point.mean() - rpoint.mean()), float(diff.std(ddof=1) / np.sqrt(len(diff)))
                hw_d.append(_rubric_hw(q_draws - r_draws, d))
                se_d.append(d_se)
                res.update(reference=float(rpoint.mean()), delta=d, delta_se_sampling=d_se,
                           delta_ci95=self._level(_interval(d, hw_d[-1], _sampling_hw([(1.0, diff, -1.0, 1.0)], seed,
                                                                                      (key, ref_key, f)), -1.0, 1.0),
                                                  0.0, -1.0, 1.0))
            per[f] = res
        w = 1.0 / len(fams)
        bal = float(np.mean([per[f]["estimate"] for f in fams]))
        bal_se = float(np.sqrt(np.sum(np.square(se_q))) / len(fams))
        out = {"per_family": per, "estimate": bal, "method": method,
               "ci95": self._level(_interval(bal, float(np.mean(hw_q)),
                                             _sampling_hw([(w, x, 0.0, 1.0) for x in pps], seed, (key, "balanced")),
                                             0.0, 1.0), CHANCE, 0.0, 1.0),
               "se_sampling": bal_se, "n_boot": int(len(q_draws)),
               "sampling_interval": bounded.METHOD + " on the per-prompt scores",
               "prompts_per_family": self.cfg.prompts_per_family, "samples_per_prompt": self.cfg.samples_per_prompt,
               "level_check": self.level.report() if self.level else None}
        if r is not None:
            d = float(np.mean([per[f]["delta"] for f in fams]))
            out.update(reference=float(np.mean([per[f]["reference"] for f in fams])), delta=d,
                       delta_ci95=self._level(_interval(d, float(np.mean(hw_d)),
                                                        _sampling_hw([(w, x, -1.0, 1.0) for x in diffs], seed,
                                                                     (key, ref_key, "balanced")), -1.0, 1.0),
                                              0.0, -1.0, 1.0))
        return out
