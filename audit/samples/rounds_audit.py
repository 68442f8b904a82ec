"""The samples audit of a rounds design (audit.samples.rounds): the same report as the fixed design's, with confidence
sequences (audit.core.sequential) in place of the fixed-n intervals, and the rounds block -- per decision settled or
open, and what the next round buys (docs/samples.md, "Labelling in rounds")."""
from __future__ import annotations

import math

import numpy as np

from audit.core import sequential
from . import decisions
from .estimates import SamplesAudit, digest
from .rounds import DESIGN, MIN_ROUND


class RoundsAudit(SamplesAudit):
    """The samples audit of a rounds design: the same report, with confidence sequences (audit.core.sequential) in
    place of the fixed-n intervals, and the rounds block (what is settled, what the next round buys)."""

    def __init__(self, table, reference, cfg=None, cell_cache=None):
        super().__init__(table, reference, cfg, cell_cache)
        self.design = table.rounds
        self._sums: dict = {}

    def intervals(self) -> dict:
        return {**super().intervals(), "method": sequential.METHOD, "description": sequential.METHOD_LONG,
                "why": "confidence sequences: valid at every round at once, so labelling may stop or go on where the "
                       "audit says a decision is open, and go to any cells (docs/intervals.md, \"Labelling in rounds\")",
                "design": f"rounds (round {self.design['round']}, at most {self.design['cap']} labels a cell)"}

    def _cell(self, run, family) -> dict:
        t, cap = self.t, self.design["cap"]
        lo, hi = self.gold_range["range"]
        idx, pos, g = self._in_draw_order(run, family)
        n = len(g)
        far = pos > cap
        pool = idx[far][np.argsort(pos[far])]
        key = ("rounds-cell", run, family, digest(t.proxy[g], t.gold[g], t.proxy[pool]), lo, hi, cap)
        if key not in self._shared:
            self._shared[key] = sequential.track(t.gold[g][None], t.proxy[g][None], t.proxy[pool][None], lo, hi, cap)
        summ = t.summaries.get((run, family))
        return {"run": run, "family": family, "n_gold": n, "track": self._shared[key],
                "n_samples": int(len(idx)) if summ is None else summ["n_samples"],
                "proxy_mean": float(t.proxy[idx].mean()) if summ is None else summ["proxy_mean"],
                "gold_mean": float(t.gold[g].mean()) if n else float("nan"),
                "design": t.design.get((run, family), {"random": True, "p_value": None}), "widened": False,
                "labels_to_halve": None, "n_pool": int(len(pool))}

    def _in_draw_order(self, run, family) -> tuple:
        """(the cell's rows, their positions in its seeded draw order, its gold rows in that order); the gold rows
        must be positions 1..n -- the first n of the order, as every round drew them."""
        t = self.t
        idx = t.cell(run, family)
        pos = t.position[idx]
        lab = ~np.isnan(t.gold[idx])
        g = idx[lab][np.argsort(pos[lab])]
        if not np.array_equal(np.sort(pos[lab]), np.arange(1, len(g) + 1)):
            raise ValueError(f"run '{run}' family '{family}': the gold rows are not positions 1..{len(g)} of the draw "
                             "order")
        return idx, pos, g

    def sum(self, terms, gold_only: bool = False) -> dict:
        """The confidence sequence of sum_k w_k (cell k's mean) now: estimate (clipped into the interval), ci95,
        the tuples it rests on, lam per block; cached."""
        tracks = [(float(w), self.cell(r, f)["track"]) for w, (r, f) in terms]
        key = (tuple((w, id(t)) for w, t in tracks), gold_only, self.cfg.confidence)
        if key not in self._sums:
            s = sequential.prepare(tracks, confidence=self.cfg.confidence, gold_only=gold_only)
            b = s.bounds()
            lo, hi = float(b["ci95"][0][0, 0]), float(b["ci95"][1][0, 0])
            est = float(np.clip(b["estimate"][0, 0], lo, hi))
            self._sums[key] = {"estimate": est, "ci95": [lo, hi], "n": int(b["n"][0]),
                               "lam": [float(v) for v in (s.lam[0] if s.lam is not None else [])]}
        return self._sums[key]

    def deltas(self, run: str) -> tuple[dict, dict]:
        fams, ref = self.t.families, self.reference
        per = {f: self.sum([(1.0, (run, f)), (-1.0, (ref, f))]) for f in fams}
        w = 1.0 / len(fams)
        return per, self.sum([(w, (run, f)) for f in fams] + [(-w, (ref, f)) for f in fams])

    def run(self, run: str) -> dict:
        fams, ref = self.t.families, self.reference
        w = 1.0 / len(fams)
        deltas, db = self.deltas(run)
        per = {}
        for f in fams:
            c, r, d = self.cell(run, f), self.cell(ref, f), deltas[f]
            q, qg = self.sum([(1.0, (run, f))]), self.sum([(1.0, (run, f))], gold_only=True)
            dg = self.sum([(1.0, (run, f)), (-1.0, (ref, f))], gold_only=True)
            lam = q["lam"][-1] if q["lam"] else 0.0
            per[f] = {"estimate": q["estimate"], "ci95": q["ci95"], "ci95_gold_only": qg["ci95"],
                      "gold_only_estimate": qg["estimate"], "reference": self.sum([(1.0, (ref, f))])["estimate"],
                      "delta": d["estimate"], "delta_ci95": d["ci95"], "delta_ci95_gold_only": dg["ci95"],
                      "proxy_mean": c["proxy_mean"], "reference_proxy_mean": r["proxy_mean"],
                      "n_samples": c["n_samples"], "n_gold": c["n_gold"], "lam": lam, "widened": False,
                      "method": self.cell_method(c, lam),
                      "width_ratio": _ratio(q["ci95"], qg["ci95"])}
        b = self.sum([(w, (run, f)) for f in fams])
        bg = self.sum([(w, (run, f)) for f in fams], gold_only=True)
        dbg = self.sum([(w, (run, f)) for f in fams] + [(-w, (ref, f)) for f in fams], gold_only=True)
        out = {"run": run, "is_reference": run == ref, "estimated_true_quality": b["estimate"], "ci95": b["ci95"],
               "ci95_gold_only": bg["ci95"], "gold_only_estimate": bg["estimate"], "delta": db["estimate"],
               "delta_ci95": db["ci95"], "delta_ci95_gold_only": dbg["ci95"],
               "proxy_mean": float(np.mean([per[f]["proxy_mean"] for f in fams])), "per_family": per}
        if run == ref:
            out.update(passes=False, checks=None, reasons=["the reference run: the baseline every run is compared with"])
        else:
            v = self._rule(deltas, db)
            out.update(passes=v["passes"], reasons=v["reasons"], checks=v["checks"])
        return out

    def cell_method(self, c: dict, lam: float) -> str:
        return (f"{sequential.METHOD} over {c['n_gold']} labels in draw order"
                + (f", prediction-powered (lam {lam:.2f} in the last block)" if lam else ", gold only"))

    def next_count(self, now: int, need: int) -> int:
        """A cell's labels after the next round: towards what its open decisions need, at most doubling, in the cap."""
        return min(self.design["cap"], max(now + MIN_ROUND, min(need, 2 * now)))

    def next_round_rule(self) -> str:
        """How next_count sizes a round, in the report's words."""
        return (f"each cell towards the labels its open decisions are estimated to need, at most doubling it, at most "
                f"{self.design['cap']}")

    def budget(self) -> dict:
        out = {}
        for f in self.t.families:
            now = sum(self.cell(r, f)["n_gold"] for r in self.t.runs)
            out[f] = {"n_gold": now, "labels_to_halve": None, "per_run": {},
                      "line": f"{f}: {now} gold rows (rounds design: the next round is planned where a decision is "
                              "open, see the rounds block)"}
        return out

    # ------------------------------------------------------------------------------------ the rounds block
    def rounds(self) -> dict:
        """What is settled and what the next round buys (docs/samples.md, "Labelling in rounds")."""
        return report(self)


def _ratio(a, b):
    wa, wb = a[1] - a[0], b[1] - b[0]
    return wa / wb if wb > 0 else None


def _need(s: dict, threshold: float, cap: int, capped: bool = True) -> int:
    """Tuples for the interval of s to clear `threshold` on the side its estimate is on, if the estimate holds:
    the half-width facing it shrinks about as 1 / sqrt(n) (a little slower, in truth: the estimate is rough).
    capped=False: the estimate itself, beyond the cap if need be (10**6 when the estimate sits on the threshold)."""
    est, (lo, hi), n = s["estimate"], s["ci95"], max(1, s["n"])
    hw, gap = (est - lo, est - threshold) if est > threshold else (hi - est, threshold - est)
    need = 10 ** 6 if gap <= 1e-9 or hw <= 0 else max(n + MIN_ROUND, math.ceil(n * (hw / gap) ** 2))
    return int(min(cap, need)) if capped else int(min(need, 10 ** 6))


def report(audit: RoundsAudit) -> dict:
    d, t = audit.design, audit.t
    cap, rule = d["cap"], audit.cfg.release_rule
    ref, fams = audit.reference, t.families
    cands = [r for r in t.runs if r != ref]
    counts = {(r, f): audit.cell(r, f)["n_gold"] for r in t.runs for f in fams}
    one = lambda v: np.array([v])     # noqa: E731
    w = 1.0 / len(fams)
    fam_terms = lambda r, f: [(1.0, (r, f)), (-1.0, (ref, f))]       # noqa: E731
    bal_terms = lambda r: [(w, (r, f)) for f in fams] + [(-w, (ref, f)) for f in fams]     # noqa: E731
    lines, rows, want = [], [], {}
    verdicts = {}
    for r in cands:
        ev_f = {f: decisions.Evidence.from_interval(one((s := audit.sum(fam_terms(r, f)))["estimate"]),
                                                    one(s["ci95"][0]), one(s["ci95"][1]), rule.family_ci_lower_gt)
                for f in fams}
        sb = audit.sum(bal_terms(r))
        ev_b = decisions.Evidence.from_interval(one(sb["estimate"]), one(sb["ci95"][0]), one(sb["ci95"][1]),
                                                rule.balanced_ci_lower_gt)
        ev_g = decisions.Evidence.from_interval(one(sb["estimate"]), one(sb["ci95"][0]), one(sb["ci95"][1]),
                                                rule.min_balanced_gain)
        v = decisions.verdict(ev_f, ev_b, ev_g, rule.min_balanced_gain)
        verdicts[r] = v
        cells_of = lambda k, r=r: ([(r, k[1]), (ref, k[1])] if k[0] == "family"     # noqa: E731
                                   else [(r, f) for f in fams] + [(ref, f) for f in fams])
        cells = decisions.cells_to_label(v["conditions"], v["settled"], cells_of)[0]
        reading = "passes" if v["passes"][0] else "fails"
        entry = {"decision": f"release verdict of {r}", "state": "settled" if v["settled"][0] else "open",
                 "reading": reading, "more_labels": None, "cells": []}
        if v["settled"][0]:
            failed = [k for k, c in v["conditions"].items() if c["fails"][0]]
            entry["line"] = (f"{r}: settled, {reading}" + (f" ({_name(failed[0], rule)} shown on the failing side)"
                                                            if failed else " (every condition shown to hold)"))
        else:
            need, beyond = {}, 0
            for k, c in v["conditions"].items():
                if c["settled"][0] or not (set(cells_of(k)) & cells):
                    continue
                s = audit.sum(fam_terms(r, k[1]) if k[0] == "family" else bal_terms(r))
                thr = {"family": rule.family_ci_lower_gt, "balanced_ci": rule.balanced_ci_lower_gt,
                       "gain": rule.min_balanced_gain}[k[0]]
                n_need = _need(s, thr, cap)
                beyond = max(beyond, _need(s, thr, cap, capped=False))
                for c_ in cells_of(k):
                    need[c_] = max(need.get(c_, 0), n_need)
            more = sum(max(0, n - counts[c]) for c, n in need.items())
            for c_, n in need.items():
                want[c_] = max(want.get(c_, 0), n)
            entry.update(more_labels=int(more), cells=[[a, b] for a, b in sorted(need)])
            open_conds = [_name(k, rule) for k, c in v["conditions"].items() if not c["settled"][0]]
            entry["line"] = (f"{r}: open (reads {reading} now): {', '.join(open_conds)} not yet shown on one side; "
                             f"about {more} more labels in cells {_cells_text(need)}"
                             + (f" (the estimate needs about {beyond} a cell, beyond the cap {cap}: it may stay open)"
                                if beyond > cap else ""))
        rows.append(entry)
    # the shipped choice
    passes = {r: verdicts[r]["passes"] for r in cands}
    quality = {r: one(audit.runs[r]["estimated_true_quality"]) for r in cands}

    def pair(a, b):
        return audit.sum([(w, (a, f)) for f in fams] + [(-w, (b, f)) for f in fams])
    sh = decisions.ship(passes, quality, lambda a, b: one(pair(a, b)["ci95"][0] > 0))
    chosen, all_settled = sh["run"][0], all(verdicts[r]["settled"][0] for r in cands)
    entry = {"decision": "the shipped choice", "reading": chosen or f"keep the reference ({ref})", "more_labels": None,
             "cells": []}
    if not all_settled:
        entry.update(state="open", line=f"the shipped choice ({entry['reading']} now): open until the verdicts are "
                                        "settled")
    elif sh["settled"][0]:
        entry.update(state="settled", line=f"the shipped choice: settled, {entry['reading']}"
                                          + (" (shown above every other passing run)" if chosen and
                                             sum(passes[r][0] for r in cands) > 1 else ""))
    else:
        need = {}
        for other in sh["open_runs"][0]:
            n_need = _need(pair(chosen, other), 0.0, cap)
            for r in (chosen, other):
                for f in fams:
                    need[(r, f)] = max(need.get((r, f), 0), n_need)
        more = sum(max(0, n - counts[c]) for c, n in need.items())
        for c_, n in need.items():
            want[c_] = max(want.get(c_, 0), n)
        entry.update(state="open", more_labels=int(more), cells=[[a, b] for a, b in sorted(need)],
                     line=f"the shipped choice: open ({chosen} now; not yet shown above "
                          f"{', '.join(sh['open_runs'][0])}): about {more} more labels in cells {_cells_text(need)}")
    rows.append(entry)
    # the next round: towards each open cell's estimate, at most doubling a cell's labels, within the cap
    nxt = []
    for c_, n in sorted(want.items()):
        now = counts[c_]
        target = audit.next_count(now, n)
        if target > now:
            nxt.append({"run": c_[0], "family": c_[1], "labelled": int(now), "target": int(target)})
    n_new = sum(x["target"] - x["labelled"] for x in nxt)
    open_rows = [r_ for r_ in rows if r_["state"] == "open"]
    if nxt:
        buys = (f"the next round ({n_new} labels in {len(nxt)} cells, {audit.next_round_rule()}) works on: "
                + "; ".join(r_["decision"] for r_ in open_rows))
    elif open_rows:
        buys = (f"nothing more can be drawn: the cells of the open decisions are at the cap ({cap} labels a cell); "
                "those decisions stay open")
    else:
        buys = "every decision is settled: no further round is needed"
    return {"design": DESIGN, "round": d["round"], "max_per_cell": cap, "seed": d["seed"], "looks": d.get("looks"),
            "labels": int(sum(counts.values())), "cells_at_cap": int(sum(n >= cap for n in counts.values())),
            "decisions": rows, "settled": sum(r_["state"] == "settled" for r_ in rows), "open": len(open_rows),
            "next_round": {"labels": int(n_new), "cells": nxt, "buys": buys} if nxt else {"labels": 0, "cells": [],
                                                                                        "buys": buys},
            "record_path": d["record_path"], "record_sha256": d["record_sha256"]}


def _name(key, rule) -> str:
    if key[0] == "family":
        return f"{key[1]}'s change vs {rule.family_ci_lower_gt:g}"
    if key[0] == "balanced_ci":
        return f"the balanced gain vs {rule.balanced_ci_lower_gt:g}"
    return f"the balanced gain vs min_gain {rule.min_balanced_gain:g}"


def _cells_text(cells) -> str:
    by: dict = {}
    for r, f in sorted(cells):
        by.setdefault(r, []).append(f)
    return "; ".join(f"{r}: {', '.join(fs)}" for r, fs in by.items())


