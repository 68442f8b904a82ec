"""The release rule of SPEC §3: configurable thresholds, a plain-words description for the report, and an
evaluation that says which condition passed or failed and by how much."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rlhf.vocab import FAMILIES


def _ci(name: str, ci) -> tuple[float, float]:
    try:
        lo, hi = (float(c) for c in ci)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a [lo, hi] pair of numbers, got {ci!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise ValueError(f"{name}: expected finite lo <= hi, got {ci!r}")
    return lo, hi


@dataclass
class ReleaseRule:
    min_balanced_gain: float = 0.05       # (a) balanced true-quality gain over the reference must reach this
    balanced_ci_lower_gt: float = 0.0     # (a) ... and its CI lower bound must exceed this
    family_ci_lower_gt: float = -0.03     # (b) every family's change: CI lower bound must exceed this
    confidence: float = 0.95              # level of the CIs the rule is applied to (the caller computes them)

    def describe(self, ci_basis: str = "The intervals include the uncertainty of the recovered rubric, not only "
                                       "prompt sampling.") -> str:
        pct = f"{100 * self.confidence:g}%"
        t = self.family_ci_lower_gt
        # (b) in words that match its threshold: below 0 it tolerates a loss up to |t| (non-inferiority)
        b = (f"no family may lose more than {-t:g}" if t < 0 else
             "every family must improve" if t == 0 else f"every family must gain more than {t:g}")
        return (f"A candidate passes when (a) its balanced true-quality gain over the reference (the mean over "
                f"the families, equally weighted) is at least {self.min_balanced_gain:g} and the lower bound of "
                f"its {pct} confidence interval is above {self.balanced_ci_lower_gt:g}, and (b) {b}: for every "
                f"family, the lower bound of the {pct} confidence interval of its true-quality change is above "
                f"{t:g}. {ci_basis}")

    def evaluate(self, balanced_delta: float, balanced_delta_ci, family_delta_ci: dict) -> dict:
        """Apply the rule. Returns {"passes", "reasons", "checks", "rule"}: when it fails, "reasons" lists every
        failed condition; when it passes, why each condition holds. "checks" has one bool per condition."""
        d = float(balanced_delta)
        if not math.isfinite(d):
            raise ValueError(f"balanced_delta: expected a finite number, got {balanced_delta!r}")
        b_lo, b_hi = _ci("balanced_delta_ci", balanced_delta_ci)
        if not family_delta_ci:
            raise ValueError("family_delta_ci: no families given; non-inferiority cannot be checked")
        fams = {f: _ci(f"family_delta_ci[{f!r}]", ci) for f, ci in family_delta_ci.items()}
        order = [f for f in FAMILIES if f in fams] + sorted(f for f in fams if f not in FAMILIES)

        gain_ok = d >= self.min_balanced_gain
        ci_ok = b_lo > self.balanced_ci_lower_gt
        fam_ok = {f: fams[f][0] > self.family_ci_lower_gt for f in order}
        passes = gain_ok and ci_ok and all(fam_ok.values())

        fails, oks = [], []
        (oks if gain_ok else fails).append(
            f"balanced gain {d:.3f} {'>=' if gain_ok else '<'} {self.min_balanced_gain:g}")
        side = "above" if ci_ok else ("below" if b_lo < self.balanced_ci_lower_gt else "not above")
        (oks if ci_ok else fails).append(
            f"balanced gain CI [{b_lo:.3f}, {b_hi:.3f}] lower bound {side} {self.balanced_ci_lower_gt:g}")
        for f in order:
            lo, hi = fams[f]
            if not fam_ok[f]:
                side = "below" if lo < self.family_ci_lower_gt else "not above"
                fails.append(f"{f}: delta CI [{lo:.3f}, {hi:.3f}] lower bound {side} {self.family_ci_lower_gt:g}")
        if all(fam_ok.values()):
            worst = min(order, key=lambda f: fams[f][0])
            oks.append(f"all {len(order)} families non-inferior: lowest delta CI lower bound "
                       f"{fams[worst][0]:.3f} ({worst}) above {self.family_ci_lower_gt:g}")
        return {"passes": passes, "reasons": oks if passes else fails,
                "checks": {"balanced_gain": gain_ok, "balanced_ci": ci_ok, "families": fam_ok},
                "rule": asdict(self)}
