"""Which of the samples door's decisions are settled -- more labels cannot change them -- and which are open, and
where labels can still change one (the rounds design: docs/samples.md, "Labelling in rounds"). Shared by the door
(audit.samples.estimates) and the rounds harness (world.experiments.rounds_coverage), so both decide alike; batch
arrays throughout (a leading replicate axis; the door's are of length 1).

A condition of the release rule compares a quantity with a threshold:

    family f      the run's change on f vs the reference: holds when its lower bound is above the margin (-0.03)
    balanced_ci   the balanced gain: holds when its lower bound is above gain_ci_lower (0)
    gain          the balanced gain's estimate is at least min_gain (0.05)

It is *settled* when the quantity's interval lies wholly on one side of the threshold: above it (the condition holds
for good; for `gain`, the estimate can no longer fall below) or below it (it fails for good). Intervals from a
confidence sequence only shrink (running intersection), and so do the declared looks' (intersected over the looks
reached: audit.samples.looks_audit), so a settled condition stays settled. A run's verdict is
settled when one condition has failed for good (it fails whatever else happens) or every condition holds for good.
The shipped choice (the passing run with the highest estimate) is settled when every verdict is and the chosen run's
balanced quality is shown above each other passing run's (their difference's lower bound above 0); with one passing
run or none it is settled with the verdicts.

Where labels can change an open verdict: if some open condition leans towards failing (its estimate is on the
failing side), only those conditions' cells (the run fails when any one of them settles); else every open
condition's cells. A family condition's cells are the run's and the reference's cell of that family; the balanced
ones', all of the run's and the reference's cells; the shipped choice's, every family of the chosen run and of the
passing runs it is not yet separated from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

@dataclass
class Evidence:
    """One quantity's standing against one threshold (arrays (B,)): `above` -- shown above it (lower bound over
    the threshold), `below` -- shown below it (upper bound under the threshold); the estimate beside them."""
    estimate: np.ndarray
    above: np.ndarray
    below: np.ndarray
    threshold: float

    @classmethod
    def from_interval(cls, estimate, lo, hi, threshold: float) -> "Evidence":
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        return cls(np.asarray(estimate, float), lo > threshold, hi < threshold, float(threshold))


def verdict(family: dict, balanced_ci: Evidence, gain: Evidence, min_gain: float) -> dict:
    """The release rule's verdict on one run and whether it is settled. family: {f: Evidence vs the margin};
    balanced_ci: the balanced gain vs gain_ci_lower; gain: the same quantity vs min_gain. Returns arrays (B,):
    passes, settled, and per condition {"holds", "settled", "leans_fail"} (the rule's own reading: a family
    condition and balanced_ci hold when shown above; gain when the estimate reaches min_gain)."""
    conds = {}
    for f, e in family.items():
        conds[("family", f)] = _state(e.above, e)
    conds[("balanced_ci",)] = _state(balanced_ci.above, balanced_ci)
    conds[("gain",)] = _state(gain.estimate >= min_gain, gain)
    holds = np.all([c["holds"] for c in conds.values()], 0)
    failed = np.any([c["fails"] for c in conds.values()], 0)
    for_good = np.all([c["settled"] & c["holds"] for c in conds.values()], 0)
    return {"passes": holds, "settled": failed | for_good, "conditions": conds}


def _state(holds, e: Evidence) -> dict:
    """A condition's state from the rule's reading (holds) and the evidence: settled when shown on one side; an
    open one leans towards failing when its estimate is not above its threshold."""
    holds = (np.asarray(holds, bool) | e.above) & ~e.below     # what is settled overrides a point estimate's reading
    settled = e.above | e.below
    return {"holds": holds, "settled": settled, "fails": e.below,
            "leans_fail": ~settled & ~(e.estimate > e.threshold)}


def cells_to_label(conditions: dict, settled: np.ndarray, cells_of) -> list:
    """Per replicate, the cells where labels can change an open verdict: a list (length B) of sets. cells_of(key)
    gives a condition's cells."""
    B = len(settled)
    out = [set() for _ in range(B)]
    leaning = {k: c["leans_fail"] for k, c in conditions.items()}
    any_lean = np.any(list(leaning.values()), 0) if leaning else np.zeros(B, bool)
    for k, c in conditions.items():
        want = ~settled & ~c["settled"] & np.where(any_lean, leaning[k], True)
        for i in np.flatnonzero(want):
            out[i] |= set(cells_of(k))
    return out


def ship(passes: dict, quality: dict, separated) -> dict:
    """The shipped choice per replicate: {"run": list (B) of the chosen run or None, "settled": (B,), "open_runs":
    list (B) of the passing runs not yet separated from the chosen one}. passes, quality: {run: (B,)};
    separated(a, b) -> (B,) whether run a's balanced quality is shown above run b's."""
    runs = list(passes)
    B = len(next(iter(passes.values()))) if runs else 0
    P = np.array([passes[r] for r in runs]) if runs else np.zeros((0, B), bool)
    Q = np.array([np.where(passes[r], quality[r], -np.inf) for r in runs]) if runs else np.zeros((0, B))
    chosen = [runs[int(np.argmax(Q[:, i]))] if P[:, i].any() else None for i in range(B)]
    settled = np.ones(B, bool)
    open_runs = [[] for _ in range(B)]
    for r in runs:
        for other in runs:
            if r == other:
                continue
            rows = [i for i in range(B) if chosen[i] == r and passes[other][i]]
            if not rows:
                continue
            sep = np.asarray(separated(r, other), bool)
            for i in rows:
                if not sep[i]:
                    settled[i] = False
                    open_runs[i].append(other)
    return {"run": chosen, "settled": settled, "open_runs": open_runs}
