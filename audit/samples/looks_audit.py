"""The samples audit of a rounds design with declared looks (the default of draw-gold --rounds; docs/samples.md,
"Labelling in rounds", docs/intervals.md, "Declared looks").

The draw declares the label counts a cell may be read at (the looks, e.g. 20, 40, 60, 100, 150, 200). At look k a
quantity -- a cell, a family's change, a balanced figure, a pair of runs -- gets the door's own fixed-n interval on
the first looks[k] labels of each of its cells in draw order, at confidence 1 - alpha / K (K looks). Every quantity's
K intervals cover together with probability >= 1 - alpha (a union bound), whichever look a stopping rule ends at and
however the rounds were spread over the cells: the interval at a look is a function of the first looks[k] positions
of each cell's seeded order, defined whether or not the rounds went there. A sum is read at its cells' smallest
count (lockstep), so it too is seen once per look. One look is the fixed design exactly: today's intervals.
"""
from __future__ import annotations

import numpy as np

from audit.core import bounded
from .estimates import SamplesAudit, combine, digest
from .rounds import LOOKS_METHOD, snap
from .rounds_audit import RoundsAudit


def look_at(n: int, looks) -> int | None:
    """The index of the largest look at or below n (None below the first)."""
    k = [i for i, v in enumerate(looks) if v <= n]
    return k[-1] if k else None


def intersect(bounds: list) -> tuple:
    """A quantity's bounds [(lo, hi), ...] at its looks so far (floats, or arrays over replicates) -> their
    intersection (all looks cover together on the union bound's event, so it does too; a side once shown stays
    shown); where they do not meet -- a look missed -- the last look's alone."""
    lo = np.max([np.asarray(b[0], float) for b in bounds], 0)
    hi = np.min([np.asarray(b[1], float) for b in bounds], 0)
    apart = lo > hi
    return np.where(apart, bounds[-1][0], lo), np.where(apart, bounds[-1][1], hi)


def audit_for(table, reference, cfg=None, cell_cache=None) -> SamplesAudit:
    """The audit a table asks for: a rounds design's when its draw record declared rounds (declared looks, or
    confidence sequences for a design drawn with --looks anytime), else the fixed design's."""
    design = getattr(table, "rounds", None)
    cls = SamplesAudit if not design else LooksAudit if design.get("looks") else RoundsAudit
    return cls(table, reference, cfg, cell_cache)


class LooksAudit(RoundsAudit):
    """A rounds design read at declared looks: the fixed door's intervals, at 1 - alpha/K, on lockstep counts."""

    def __init__(self, table, reference, cfg=None, cell_cache=None):
        super().__init__(table, reference, cfg, cell_cache)
        self.looks = [int(v) for v in self.design["looks"]]
        self.look_confidence = 1 - (1 - self.cfg.confidence) / len(self.looks)

    def intervals(self) -> dict:
        base = super(RoundsAudit, self).intervals()
        K = len(self.looks)
        return {**base, "method": LOOKS_METHOD, "looks": self.looks, "look_confidence": self.look_confidence,
                "description": f"{bounded.METHOD_LONG}; taken at each of the {K} declared looks "
                               f"({', '.join(map(str, self.looks))} labels a cell) at confidence "
                               f"{self.look_confidence:.4g} (alpha {1 - self.cfg.confidence:g} split over the looks), "
                               "on the first labels of each cell in its seeded draw order",
                "why": f"declared looks: each quantity's intervals at all {K} looks cover together with probability "
                       f">= {self.cfg.confidence:g} (a union bound), so labelling may stop at any look or go on where "
                       "the audit says a decision is open, in any cells (docs/intervals.md, \"Declared looks\")",
                "design": f"rounds with declared looks (round {self.design['round']}, looks "
                          f"{', '.join(map(str, self.looks))} labels a cell)"}

    def next_count(self, now: int, need: int) -> int:
        """A cell's labels after the next round: its next look, whatever the estimate of what settles it (the rule
        measured in docs/intervals.md: a look skipped is alpha spent for nothing, a look overshot labels for nothing)."""
        return snap(now + 1, self.looks)

    def next_round_rule(self) -> str:
        return "each cell to its next declared look"

    def cell_method(self, c: dict, lam: float) -> str:
        k = self.sum([(1.0, (c["run"], c["family"]))])["look"]
        return (f"{bounded.METHOD} at look {k} of {len(self.looks)} ({self.looks[k - 1]} labels in draw order, "
                f"confidence {self.look_confidence:.4g})"
                + (f", prediction-powered (lam {lam:.2f})" if lam else ", gold only"))

    def _cell(self, run, family) -> dict:
        t = self.t
        idx, pos, g = self._in_draw_order(run, family)
        rows = idx[np.argsort(pos, kind="stable")]       # the whole cell in its seeded order; rows[:n] are the gold
        n = len(g)
        summ = t.summaries.get((run, family))
        missing = t.missing_proxy(run, family)
        return {"run": run, "family": family, "n_gold": n, "rows": rows, "complete": n == len(idx),
                # what every look's parts of this cell are computed from (_parts), hashed once: the corruption
                # stress's re-runs share the parts of the cells it left alone
                "digest": digest(t.gold[rows], t.proxy[rows], t.position[rows]),
                "n_samples": int(len(idx)) if summ is None else summ["n_samples"],
                "proxy_mean": float(np.nanmean(t.proxy[idx])) if summ is None else summ["proxy_mean"],
                "gold_mean": float(t.gold[rows[:n]].mean()) if n else float("nan"), "n_missing_proxy": missing,
                "design": t.design.get((run, family), {"random": True, "p_value": None}), "widened": False,
                "labels_to_halve": None, "n_pool": int(len(idx) - n)}

    def _reach(self, c: dict) -> float:
        """How far a cell's labels reach for the lockstep count: all of them, or every look when the cell is wholly
        labelled (a cell smaller than a look has all its rows at that look)."""
        return float("inf") if c["complete"] else c["n_gold"]

    def _parts(self, run, family, n: int, conf: float) -> dict:
        """The fixed door's interval parts of a cell on the first n labels of its draw order (the rest of the cell
        unlabelled), at confidence conf; cached by the cell's inputs."""
        c, t = self.cell(run, family), self.t
        lo, hi = self.gold_range["range"]
        n = min(n, c["n_gold"])
        summarised = (run, family) in t.summaries
        key = ("looks-cell", run, family, c["digest"], summarised, self.design["cap"], n, lo, hi, conf, self.cfg.seed,
               self.cfg.draws)
        if key not in self._shared:
            # which rows, by draw order; each set in table order, as the fixed door reads a cell (so one look is the
            # fixed design exactly: the same rows in the same order give the same interval)
            lab, rest = np.sort(c["rows"][:n]), c["rows"][n:]
            if summarised:
                # a cell summarised for its size (audit.samples.cells) keeps a subsample of its unlabelled rows,
                # whose make-up follows how many rows the rounds labelled; its rows beyond the cap -- never labelled
                # -- are a random sample of the cell whatever the rounds did, so they alone stand for the unlabelled
                rest = rest[t.position[rest] > self.design["cap"]]
            rest = np.sort(rest)
            y, f, fu = t.gold[lab], t.proxy[lab], t.proxy[rest]
            if c["n_missing_proxy"] or not len(rest):
                # no proxy on some rows (or nothing unlabelled): the gold rows alone, as the fixed door draws them
                g = bounded.draw(np.clip(y, lo, hi), lo, hi, bounded.stream(self.cfg.seed, run, family, "gold"),
                                 self.cfg.draws)
                self._shared[key] = {"ppi": [(1.0, g)], "gold_only": [(1.0, g)], "lam": 0.0}
            else:
                p = bounded.ppi_cells(y, f, fu, lo, hi, confidence=conf, seed=self.cfg.seed, key=(run, family),
                                      draws=self.cfg.draws)
                self._shared[key] = {"ppi": p.parts, "gold_only": p.gold_only, "lam": float(p.lam)}
        return self._shared[key]

    def sum(self, terms, gold_only: bool = False) -> dict:
        """The interval of sum_k w_k (cell k's mean) at the last look its cells all reach, intersected with its
        intervals at the looks before (all of them cover together with probability >= 1 - alpha, so their
        intersection does too, and a side once shown stays shown): estimate, ci95, the look's count, lam of each
        cell; cached."""
        reach = min(self._reach(self.cell(r, f)) for _, (r, f) in terms)
        k = len(self.looks) - 1 if reach == float("inf") else look_at(int(reach), self.looks)
        if k is None:
            cells = ", ".join(f"{r}/{f}" for _, (r, f) in terms)
            raise ValueError(f"cells {cells}: {int(reach)} labels, below the first declared look {self.looks[0]} "
                             "(draw-gold's rounds end on looks; was a record edited?)")
        key = ("looks-sum", tuple((float(w), c) for w, c in terms), gold_only, k, self.look_confidence)
        if key not in self._sums:
            at = [self._at_look(terms, gold_only, j) for j in range(k + 1)]
            lo, hi = (float(v) for v in intersect([a["ci95"] for a in at]))
            self._sums[key] = {"estimate": float(np.clip(at[-1]["estimate"], lo, hi)), "ci95": [lo, hi],
                               "n": self.looks[k], "look": k + 1, "lam": at[-1]["lam"]}
        return self._sums[key]

    def _at_look(self, terms, gold_only: bool, k: int) -> dict:
        """The fixed design's interval of the sum on the first looks[k] labels of each cell, at 1 - alpha/K."""
        n, conf = self.looks[k], self.look_confidence
        parts = [(float(w), self._parts(r, f, n, conf)) for w, (r, f) in terms]
        ci = combine([(w, p["gold_only" if gold_only else "ppi"]) for w, p in parts], conf)
        return {"estimate": float(ci["estimate"]), "ci95": [float(v) for v in ci["ci95"]],
                "lam": [0.0 if gold_only else p["lam"] for _, p in parts]}
