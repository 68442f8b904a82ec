"""The samples door's rounds design: label in rounds until every decision is settled (docs/samples.md, "Labelling in
rounds"; the intervals: audit.core.sequential, docs/intervals.md).

    draw-gold --rounds --per-cell N --out labels/round-1.csv       declares the design at the first draw
    (label)  ->  python -m audit.samples --gold labels/ ...         says per decision "settled" or "open: about ..."
    draw-gold --next --from-answer OUT/answer.json --out labels/round-2.csv   draws where a label can still decide

The design must be declared at the first draw: a look at a fixed-n interval spends its 5% and cannot be taken back,
so a fixed draw cannot be continued in rounds (draw-gold --next refuses it). Every round continues each cell's seeded
random order (audit.samples.draw.cell_seed): round r labels positions counts_{r-1}+1 .. counts_r of the cells it
draws in. Each round's record (NAME.draw.json beside its file) holds the seed, the samples file's sha256, the
cumulative labels a cell, this round's ids, and the previous round's record by name and sha256 -- a chain the audit
walks back and checks: every round's rows are those positions, and the gold rows are exactly every round's rows.

The intervals here are confidence sequences over positions (audit.core.sequential): valid at every number of
labels at once, so the rounds may stop or continue on what the audit said, and may go to any cells. A cell's pool --
its rows beyond the cap (max_per_cell), never labelled -- lets the proxy in (prediction-powered), as the fixed door's
unlabelled rows do.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from audit.core import sequential
from . import decisions
from .estimates import SamplesAudit
from .draw import RECORD_KIND, cell_seed

DESIGN = "rounds"
DEFAULT_CAP = 200
MIN_ROUND = 10


def is_rounds(rec: dict) -> bool:
    return isinstance(rec, dict) and rec.get("design") == DESIGN


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------- draw order
def positions(table, seed: int) -> np.ndarray:
    """Every row's 1-based position in its cell's seeded random order (the order draw-gold draws in)."""
    pos = np.zeros(len(table.proxy), np.int64)
    for (run, fam), rows in table.cells.items():
        if len(rows):
            order = np.random.default_rng(cell_seed(seed, run, fam)).permutation(len(rows))
            pos[rows[order]] = np.arange(1, len(rows) + 1)
    return pos


def rows_between(table, pos: np.ndarray, before: dict, after: dict) -> np.ndarray:
    """Row indices at positions before[c] < p <= after[c] of every cell c, in cell order then position order."""
    out = []
    for c, rows in table.cells.items():
        lo, hi = before.get(c, 0), after.get(c, 0)
        if hi > lo:
            sel = rows[(pos[rows] > lo) & (pos[rows] <= hi)]
            out.append(sel[np.argsort(pos[sel])])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def counts_of(rec: dict) -> dict:
    return {(r, f): int(n) for r, f, n in rec.get("counts", [])}


def counts_list(counts: dict) -> list:
    return [[r, f, int(n)] for (r, f), n in sorted(counts.items())]


# ------------------------------------------------------------------------------------------- the record chain
def chain(latest: Path) -> tuple[list, list[str]]:
    """([(path, record, text), ...] oldest first, problems) walking back from the latest record by "previous"."""
    out, problems, path, seen = [], [], Path(latest), set()
    while True:
        try:
            text = path.read_text()
            rec = json.loads(text)
        except FileNotFoundError:
            problems.append(f"{path}: file not found (a round's record of the rounds design)")
            break
        except (OSError, ValueError) as e:
            problems.append(f"{path}: not a record of python -m audit.samples draw-gold ({type(e).__name__}: {e})")
            break
        out.append((path, rec, text))
        prev = rec.get("previous")
        if not prev:
            break
        nxt = (path.parent / str(prev.get("record", ""))).resolve()
        if nxt in seen:
            problems.append(f"{path}: its chain of previous records loops at {nxt}")
            break
        seen.add(nxt)
        if nxt.is_file() and text_sha256(nxt.read_text()) != prev.get("sha256"):
            problems.append(f"{path}: previous record {nxt}: sha256 differs from the one recorded (edited after "
                            "the next round was drawn?)")
            break
        path = nxt
    return out[::-1], problems


def latest_record(settings: dict) -> Path | None:
    """The record of the gold rows: --draw-record, GOLD's sibling NAME.draw.json, or -- GOLD a directory -- the one
    record inside it no other record there names as its previous (the last round); None without one."""
    given = settings.get("draw_record")
    if given:
        return Path(given)
    gold = Path(settings["gold"])
    if not gold.is_dir():
        p = gold.with_name(gold.stem + ".draw.json")
        return p if p.is_file() else None
    recs = sorted(gold.glob("*.draw.json"))
    if not recs:
        return None
    named = set()
    for p in recs:
        try:
            prev = json.loads(p.read_text()).get("previous") or {}
            if prev.get("record"):
                named.add((p.parent / prev["record"]).resolve())
        except (OSError, ValueError, AttributeError):
            pass
    last = [p for p in recs if p.resolve() not in named]
    return last[0] if len(last) == 1 else recs[-1]


def verify(settings: dict, table, latest: Path, problems: list[str]) -> dict | None:
    """Check a rounds design's chain of records against the samples and gold tables (problems appended, naming the
    file) and return the design {seed, cap, round, counts, record, record_path, record_sha256}; set the table's
    positions and design. None when the chain does not hold."""
    recs, bad = chain(latest)
    problems += bad
    if bad or not recs:
        return None
    first = recs[0][1]
    for i, (path, rec, _) in enumerate(recs, 1):
        if not is_rounds(rec) or rec.get("kind") != RECORD_KIND:
            problems.append(f"{path}: not a round of a rounds design (expected \"design\": \"rounds\"): a fixed "
                            "draw cannot be continued in rounds")
            return None
        if rec.get("round") != i:
            problems.append(f"{path}: round {rec.get('round')!r}, expected {i} (the chain from round 1 has {len(recs)})")
            return None
        for k in ("seed", "samples_sha256", "max_per_cell", "column_mapping"):
            if rec.get(k) != first.get(k):
                problems.append(f"{path}: {k} {rec.get(k)!r} differs from round 1's {first.get(k)!r}")
                return None
    if table is None:
        return None
    from .columns import table_sha256
    samples = Path(settings["samples"])
    got = table_sha256(samples)
    if got != first.get("samples_sha256"):
        problems.append(f"{samples}: sha256 {got[:12]}... is not the samples file the rounds were drawn from "
                        f"({recs[0][0]}: sha256 {str(first.get('samples_sha256'))[:12]}...)")
        return None
    seed, cap = int(first["seed"]), int(first["max_per_cell"])
    pos = positions(table, seed)
    ids = np.asarray(table.sample_id.to_pylist(), dtype=object)
    before: dict = {}
    drawn = set()
    for path, rec, _ in recs:
        after = counts_of(rec)
        if any(after.get(c, 0) < n for c, n in before.items()) or any(n > cap for n in after.values()):
            problems.append(f"{path}: labels a cell fall back or exceed the cap {cap}: not a continuation")
            return None
        want = set(ids[rows_between(table, pos, before, after)].tolist())
        if want != set(map(str, rec.get("sample_ids", []))):
            problems.append(f"{path}: its sample_ids are not positions {{previous count + 1 .. count}} of each cell's "
                            f"seeded order (seed {seed}): draw again with python -m audit.samples draw-gold")
            return None
        drawn |= want
        before = after
    labelled = set(ids[~np.isnan(table.gold)].tolist())
    missing, extra = sorted(drawn - labelled), sorted(labelled - drawn)
    for s in extra[:10]:
        problems.append(f"{settings['gold']}: sample_id {s!r} is not one of the {len(drawn)} rows drawn in rounds "
                        f"1..{len(recs)} ({latest}): gold rows must come from the rounds' draws")
    for s in missing[:10]:
        problems.append(f"{settings['gold']}: sample_id {s!r}, drawn in rounds 1..{len(recs)} ({latest}), has no "
                        "label: every drawn row needs its label (the intervals follow each cell's order)")
    if len(extra) + len(missing) > 20:
        problems.append(f"{settings['gold']}: ... and {len(extra) + len(missing) - 20} more rows off the rounds' draws")
    if extra or missing:
        return None
    path, rec, text = recs[-1]
    design = {"seed": seed, "cap": cap, "round": len(recs), "counts": before, "record": rec,
              "record_path": str(Path(path).resolve()), "record_sha256": text_sha256(text)}
    table.position, table.rounds = pos.astype(np.int32), design
    return design


# ------------------------------------------------------------------------------------------- the audit
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
        idx = t.cell(run, family)
        pos = t.position[idx]
        lab = ~np.isnan(t.gold[idx])
        g = idx[lab][np.argsort(pos[lab])]
        n = len(g)
        if not np.array_equal(np.sort(pos[lab]), np.arange(1, n + 1)):
            raise ValueError(f"run '{run}' family '{family}': the gold rows are not positions 1..{n} of the draw order")
        far = pos > cap
        pool = idx[far][np.argsort(pos[far])]
        key = ("rounds-cell", run, family, _digest(t.proxy[g], t.gold[g], t.proxy[pool]), lo, hi, cap)
        if key not in self._shared:
            self._shared[key] = sequential.track(t.gold[g][None], t.proxy[g][None], t.proxy[pool][None], lo, hi, cap)
        summ = t.summaries.get((run, family))
        return {"run": run, "family": family, "n_gold": n, "track": self._shared[key],
                "n_samples": int(len(idx)) if summ is None else summ["n_samples"],
                "proxy_mean": float(t.proxy[idx].mean()) if summ is None else summ["proxy_mean"],
                "gold_mean": float(t.gold[g].mean()) if n else float("nan"),
                "design": t.design.get((run, family), {"random": True, "p_value": None}), "widened": False,
                "labels_to_halve": None, "n_pool": int(len(pool))}

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
                      "method": f"{sequential.METHOD} over {c['n_gold']} labels in draw order"
                                + (f", prediction-powered (lam {lam:.2f} in the last block)" if lam else ", gold only"),
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


def _digest(*arrays) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


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
        target = min(cap, max(now + MIN_ROUND, min(n, 2 * now)))
        if target > now:
            nxt.append({"run": c_[0], "family": c_[1], "labelled": int(now), "target": int(target)})
    n_new = sum(x["target"] - x["labelled"] for x in nxt)
    open_rows = [r_ for r_ in rows if r_["state"] == "open"]
    if nxt:
        buys = (f"the next round ({n_new} labels in {len(nxt)} cells, each cell towards the labels its open "
                f"decisions are estimated to need, at most doubling it, at most {cap}) works on: "
                + "; ".join(r_["decision"] for r_ in open_rows))
    elif open_rows:
        buys = (f"nothing more can be drawn: the cells of the open decisions are at the cap ({cap} labels a cell); "
                "those decisions stay open")
    else:
        buys = "every decision is settled: no further round is needed"
    return {"design": DESIGN, "round": d["round"], "max_per_cell": cap, "seed": d["seed"],
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


# ------------------------------------------------------------------------------------------- draw-gold
def draw_round(a, out: Path, fmt, mapping: dict, problems: list[str]) -> int:
    """draw-gold --rounds (round 1, declaring the design) or --next (the round an audit's answer plans)."""
    import os

    from audit.core import claims_runner
    from rlhf.atomic import atomic_write_text
    from rlhf.errors import EXIT_OK
    from .columns import table_sha256
    from .draw import _rows_text, record_path
    from .table import load_samples
    if a.next and a.rounds:
        problems.append("--rounds starts a rounds design and --next continues one: give one of them")
    if a.max_per_cell is not None and not a.rounds:
        problems.append("--max-per-cell: only with --rounds (the first draw declares the cap; later rounds keep it)")
    if a.next and a.from_answer is None:
        problems.append("--next: give --from-answer OUT/answer.json, the audit of the rounds so far")
    if a.rounds and a.per_cell is None:
        problems.append("--per-cell: not given (the first round's labels a cell)")
    if a.rounds and a.from_answer is not None:
        problems.append("--rounds with --from-answer: a rounds design starts afresh; continue one with --next")
    cap = a.max_per_cell or DEFAULT_CAP
    if a.rounds and a.per_cell and a.per_cell > cap:
        problems.append(f"--per-cell {a.per_cell}: above the cap --max-per-cell {cap}")
    plan = prev = prev_path = prev_text = None
    if a.next and a.from_answer is not None:
        plan, prev_path, prev_text, bad = _planned(Path(a.from_answer))
        problems += bad
        prev = json.loads(prev_text) if prev_text else None
    loaded = load_samples(a.samples, (prev or {}).get("column_mapping") or mapping) if not problems else None
    if loaded is None and not problems:
        problems.append(f"--samples {a.samples}: a rounds draw reads the table with the columnar reader, which did "
                        "not take this file plainly; the audit (python -m audit.samples) names the file, line and "
                        "column it trips on")
    if prev is not None and (prev.get("column_mapping") or {}) != mapping and a.column:
        problems.append(f"--column: {mapping} differs from the rounds' {prev.get('column_mapping')} (round 1 fixed it)")
    if prev is not None and loaded is not None:
        got = table_sha256(a.samples)
        if got != prev.get("samples_sha256"):
            problems.append(f"{a.samples}: sha256 {got[:12]}... is not the samples file the rounds were drawn from "
                            f"({prev_path}: {str(prev.get('samples_sha256'))[:12]}...)")
    if problems:
        return claims_runner.refuse("draw-gold", problems, out)
    table, prompts = loaded
    if prev is not None:
        seed, cap, round_ = int(prev["seed"]), int(prev["max_per_cell"]), int(prev["round"]) + 1
        mapping = prev.get("column_mapping") or {}
        before = counts_of(prev)
        after = dict(before)
        for c in plan:
            key = (c["run"], c["family"])
            target = c["target"] if not a.per_cell else before.get(key, 0) + a.per_cell
            after[key] = int(min(cap, len(table.cells.get(key, [])), max(before.get(key, 0), target)))
        if after == before:
            print("[draw-gold] nothing to draw: the audit's answer plans no further round (every decision settled, or "
                  f"the open ones' cells at the cap {cap}); nothing written", flush=True)
            return EXIT_OK
    else:
        seed, round_, before = a.seed, 1, {}
        after = {c: min(a.per_cell, len(rows)) for c, rows in table.cells.items() if len(rows)}
    pos = positions(table, seed)
    picked = rows_between(table, pos, before, after)
    ids = table.sample_id.take(picked).to_pylist()
    cols = {"sample_id": ids, "run": [table.runs[c] for c in table.run_code[picked]],
            "family": [table.families[c] for c in table.family_code[picked]],
            "prompt_id": [table.prompts[c] for c in table.prompt_code[picked]],
            "prompt": prompts.take(picked) if prompts is not None else [""] * len(picked),
            "completion": table.texts(picked)}
    order = np.random.default_rng([seed, 1, round_]).permutation(len(ids))
    col = lambda c: mapping.get(c, c)   # noqa: E731
    rows = [{col("sample_id"): cols["sample_id"][i], "run": cols["run"][i], "family": cols["family"][i],
             "prompt_id": cols["prompt_id"][i], "prompt": cols["prompt"][i], "completion": cols["completion"][i],
             col("gold"): None} for i in order]
    rec = record_path(out)
    record = {"kind": RECORD_KIND, "design": DESIGN, "round": round_, "max_per_cell": cap,
              "method": sequential.METHOD, "samples": str(Path(a.samples).resolve()),
              "samples_sha256": table_sha256(a.samples), "seed": seed, "per_cell": a.per_cell if round_ == 1 else None,
              "column_mapping": mapping, "n_samples": int(table.n_rows),
              "n_cells": sum(len(r) > 0 for r in table.cells.values()), "n_drawn": len(rows), "to_label": out.name,
              "counts": counts_list(after), "sample_ids": sorted(map(str, ids)),
              "previous": None if prev is None else {"record": os.path.relpath(prev_path, out.parent.resolve()),
                                                     "sha256": text_sha256(prev_text)}}
    atomic_write_text(rec, json.dumps(record, indent=1) + "\n")       # the record first: data without one is plain
    if rows:
        atomic_write_text(out, _rows_text(rows, fmt))
    else:
        atomic_write_text(out, "" if fmt == "jsonl" else ",".join([col("sample_id"), "run", "family", "prompt_id",
                                                                    "prompt", "completion", col("gold")]) + "\n")
    where = "" if out.parent == Path(".") else f" (audit them with the earlier rounds' files: --gold {out.parent}/)"
    print(f"[draw-gold] round {round_} of a rounds design (at most {cap} labels a cell; seed {seed}): {len(rows)} rows "
          f"to label in {sum(after.get(c, 0) > before.get(c, 0) for c in after)} cells -> {out}; record -> {rec}"
          f"{where}. Fill in '{col('gold')}' for every row, then audit: python -m audit.samples --samples "
          f"{a.samples} --gold {out.parent if round_ > 1 else out} --out DIR", flush=True)
    return EXIT_OK


def _planned(answer: Path):
    """(the next round's cells, the last record's path and text, problems) from an audit's answer.json."""
    try:
        ans = json.loads(answer.read_text())
    except FileNotFoundError:
        return None, None, None, [f"--from-answer {answer}: file not found"]
    except (OSError, ValueError) as e:
        return None, None, None, [f"--from-answer {answer}: not an answer.json of python -m audit.samples "
                                  f"({type(e).__name__}: {e})"]
    block = ans.get("rounds") if isinstance(ans, dict) else None
    if not isinstance(block, dict):
        return None, None, None, [f"--from-answer {answer}: the audit of a fixed design (no 'rounds' block): its "
                                  "intervals spent their 5% at that look, so it cannot be continued in rounds; a "
                                  "rounds design is declared at the first draw (draw-gold --rounds)"]
    try:
        path, sha, cells = Path(block["record_path"]), block["record_sha256"], block["next_round"]["cells"]
        cells = [{"run": c["run"], "family": c["family"], "target": int(c["target"])} for c in cells]
    except (KeyError, TypeError, ValueError) as e:
        return None, None, None, [f"--from-answer {answer}: its 'rounds' block lacks {e} (expected record_path, "
                                  "record_sha256 and next_round.cells)"]
    try:
        text = path.read_text()
    except OSError:
        return None, None, None, [f"--from-answer {answer}: the last round's record {path} is not there (moved? "
                                  "draw-gold --next needs it beside its labels)"]
    if text_sha256(text) != sha:
        return None, None, None, [f"{path}: sha256 differs from the one {answer} audited (edited since?): audit again"]
    return cells, path.resolve(), text, []
