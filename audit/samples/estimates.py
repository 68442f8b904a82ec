"""The samples front door's statistics (SPEC §4): from a validated samples table (audit.samples.table), the true
quality of every run x family cell (the proxy as the prediction, the gold subset as the rectifier) beside the
gold-only estimate, balanced means and deltas against the reference run, the release rule's verdicts, the run to
ship, the proxy's agreement with the gold labels per family, and a gold budget per family. The claims in
checks/samples/ read from here; nothing here asserts. Generic: no tokens, checkpoints or world.

Intervals (audit.core.bounded, docs/intervals.md): finite-sample intervals for a bounded label -- the Gaffke /
Learned-Miller-Thomas bound, exactly Clopper-Pearson for two-valued labels, never of zero width -- over the label
range `gold_range` (stated with --gold-range, else [0, 1] when every label lies in it, else the labels' observed
range, and the report says which). A cell's interval covers the mean gold label of the population its rows were
drawn from (the run's policy on the family's prompts) when the gold rows are a random subset of the cell's rows
(tested: see audit.samples.table). Cells are independent samples: a balanced mean (families equally weighted) and
a delta (run minus reference) are sums over cells, bounded through the same statistic summed over the cells. A
cell whose gold rows failed the random-subset test and which the user asked to widen gets a worst-case part
(every unlabelled row anywhere in the label range), which sums add at its ends.

A cell with rows whose proxy is missing (a reward function that failed or did not apply: null in the samples
table) is certified from its gold rows alone (lam = 0, the gold-only interval). That stays valid whatever made the
proxies missing, because the gold rows are a random subset of all the cell's rows, those without a proxy
included; dropping those rows instead, or predicting over the others only, would assume they are missing at random
(their quality like the rest's), which nothing tests. The report counts them (answer.json `missing_proxy`).
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import stats as st

from audit.core import bounded
from audit.core.ppi import labels_to_halve
from audit.core.release import ReleaseRule
from .table import DesignConfig, Table
from audit.core.stats import pearson_ci, spearman_ci


MIN_COMPARATORS = 2     # a scale ratio against one other family cannot tell which of the two is off
MIN_PROXY_GOLD = 3      # gold rows with a proxy a family needs for its proxy-vs-gold claims


@dataclass
class SamplesConfig:
    seed: int = 0
    confidence: float = 0.95
    n_resamples: int = 2000
    draws: int = bounded.DRAWS      # Monte-Carlo draws of every interval's statistic (audit.core.bounded)
    release_rule: ReleaseRule = field(default_factory=ReleaseRule)
    design: DesignConfig = field(default_factory=DesignConfig)
    # the proxy agrees with the gold labels on a family: Pearson CI lower bound above this (as the task door's RM)
    agreement_min_pearson_lower: float = 0.2
    # the proxy is on a common scale across families: the family's proxy-per-gold slope over the other
    # families' median slope has a CI that reaches into [1/r, r]
    scale_max_ratio: float = 2.0
    stress_examples: int = 24       # hypothesis-drawn proxy corruptions (audit.samples.stress)


def gold_range(gold: np.ndarray, stated=None) -> dict:
    """The range every gold label can take, which the intervals rely on, and where it came from."""
    if stated is not None:
        lo, hi = (float(v) for v in stated)
        return {"range": [lo, hi], "source": "stated (--gold-range)"}
    y = gold[~np.isnan(gold)]
    if len(y) == 0 or (y.min() >= 0.0 and y.max() <= 1.0):
        return {"range": [0.0, 1.0], "source": "default: every gold label lies in [0, 1]"}
    lo, hi = min(0.0, float(y.min())), max(1.0, float(y.max()))
    return {"range": [lo, hi], "source": f"observed: some gold labels lie outside [0, 1], so the range is [0, 1] "
                                         f"widened to the labels' own extremes; state it with --gold-range LO HI"}


def combine(terms, confidence: float) -> dict:
    """The interval of sum_k w_k * part-list_k (each cell's parts are independent samples)."""
    return bounded.interval([(w * pw, s) for w, parts in terms for pw, s in parts], confidence)


class SamplesAudit:
    def __init__(self, table: Table, reference: str, cfg: SamplesConfig | None = None, cell_cache: dict | None = None):
        self.t, self.reference, self.cfg = table, reference, cfg or SamplesConfig()
        self.gold_range = gold_range(table.gold, self.cfg.design.gold_range)
        self._cells: dict = {}
        # cells depend only on their own rows: a re-run on a table whose proxy changed on some families (the
        # corruption stress) reuses the others' through this cache, keyed by the cell's inputs
        self._shared = cell_cache if cell_cache is not None else {}

    def intervals(self) -> dict:
        """Which intervals the audit uses, for the report."""
        return {"method": bounded.METHOD, "description": bounded.METHOD_LONG,
                "gold_range": self.gold_range["range"], "gold_range_source": self.gold_range["source"],
                "confidence": self.cfg.confidence, "alpha": 1 - self.cfg.confidence, "draws": self.cfg.draws,
                "why": "finite-sample intervals for a bounded label: they cover at small gold budgets and near 0 "
                       "and 1, where normal intervals do not, and are never of zero width (docs/intervals.md)"}

    # --------------------------------------------------------------------------------------------- cells
    def cell(self, run: str, family: str) -> dict:
        key = (run, family)
        if key not in self._cells:
            self._cells[key] = self._cell(run, family)
        return self._cells[key]

    def _cell(self, run, family) -> dict:
        t, conf = self.t, self.cfg.confidence
        lo, hi = self.gold_range["range"]
        idx = t.cell(run, family)
        lab = ~np.isnan(t.gold[idx])
        y, f = t.gold[idx][lab], t.proxy[idx][lab]
        # a summarised cell (audit.samples.cells): its unlabelled rows as their statistics, not the rows kept
        summ = t.summaries.get((run, family))
        fu = t.proxy[idx][~lab] if summ is None else None
        design = t.design.get((run, family), {"random": True, "p_value": None})
        missing = t.missing_proxy(run, family)
        present = t.proxy[idx][~np.isnan(t.proxy[idx])]
        out = {"run": run, "family": family, "n_samples": int(len(idx)) if summ is None else summ["n_samples"],
               "n_gold": int(len(y)), "n_missing_proxy": missing,
               "proxy_mean": (float(present.mean()) if len(present) else None) if summ is None else summ["proxy_mean"],
               "gold_mean": float(y.mean()), "design": design}
        h = hashlib.sha256(np.ascontiguousarray(t.proxy[idx]).tobytes() + np.ascontiguousarray(t.gold[idx]).tobytes()
                           + repr(summ).encode())
        ck = (run, family, h.hexdigest(), lo, hi, conf, self.cfg.seed, self.cfg.draws, bool(design["random"]))
        if ck in self._shared:
            out.update(self._shared[ck])
            return out
        n_u = len(fu) if summ is None else summ["n_unlabelled"]
        if design["random"] and missing:
            # the gold rows alone (see the module docstring): as ppi_cells' every-row-labelled case draws them
            gold = bounded.draw(np.clip(y, lo, hi), lo, hi, bounded.stream(self.cfg.seed, run, family, "gold"),
                                self.cfg.draws)
            halve = labels_to_halve(y, np.zeros_like(y), np.zeros(0), 0.0) if n_u else None
            res = dict(ppi=[(1.0, gold)], gold_only=[(1.0, gold)], lam=0.0, widened=False, labels_to_halve=halve,
                       method=f"{bounded.METHOD}, gold rows alone: {missing} of the cell's rows have no proxy "
                              "(the gold rows are a random subset of all of them)")
        elif design["random"]:
            unl = fu if summ is None else bounded.UnlabelledSummary(**summ["h"])
            c = bounded.ppi_cells(y, f, unl, lo, hi, confidence=conf, seed=self.cfg.seed, key=(run, family),
                                  draws=self.cfg.draws)
            lam = float(c.lam)
            hy = np.clip(c.intercept + c.slope * f, lo, hi)
            if not n_u:
                halve = None
            elif summ is None:
                halve = labels_to_halve(y, hy, np.clip(c.intercept + c.slope * fu, lo, hi), lam)
            else:
                halve = labels_to_halve(y, hy, None, lam, unlabelled_var=(n_u, summ["h"]["std"] ** 2))
            res = dict(ppi=c.parts, gold_only=c.gold_only, lam=lam, widened=False,
                       method=f"{bounded.METHOD}, prediction-powered (lam {lam:.2f} chosen for the narrowest "
                              "interval; lam 0 = gold only)", labels_to_halve=halve)
        else:   # --nonrandom-gold widen: every unlabelled row anywhere in the label range
            tot, u = len(y) + n_u, n_u
            gold = bounded.draw(y, lo, hi, bounded.stream(self.cfg.seed, run, family, "gold"), self.cfg.draws)
            worst = [(len(y) / tot, gold), (u / tot, bounded.fixed(lo, hi, draws=self.cfg.draws))]
            res = dict(ppi=worst, gold_only=worst, lam=None, labels_to_halve=None, widened=True,
                       method=f"worst case: gold rows not a random subset; {u} unlabelled rows anywhere in "
                              f"[{lo:g}, {hi:g}] (midpoint reported, not an estimate)")
        self._shared[ck] = res
        out.update(res)
        return out

    # ---------------------------------------------------------------------------------------------- runs
    def deltas(self, run: str) -> tuple[dict, dict]:
        """The release rule's inputs: per family and balanced (families equally weighted), the run minus the
        reference, prediction-powered ({family: interval}, interval)."""
        fams, conf = self.t.families, self.cfg.confidence
        w = 1.0 / len(fams)
        per, dbal = {}, []
        for f in fams:
            c, r = self.cell(run, f), self.cell(self.reference, f)
            # the parts are the shared cache's own objects (see _cell): a family the corruption stress left alone
            # keeps its delta interval from one corrupted table to the next
            key = ("delta", id(c["ppi"]), id(r["ppi"]), conf)
            if key not in self._shared:
                self._shared[key] = combine([(1.0, c["ppi"]), (-1.0, r["ppi"])], conf)
            per[f] = dict(self._shared[key])
            dbal += [(w, c["ppi"]), (-w, r["ppi"])]
        return per, combine(dbal, conf)

    def run(self, run: str) -> dict:
        """Per family and balanced: the estimates and gold-only estimates, deltas vs the reference, the rule."""
        fams, conf = self.t.families, self.cfg.confidence
        w = 1.0 / len(fams)
        deltas, db = self.deltas(run)
        per, bal, bal_g, dbal_g = {}, [], [], []
        for f in fams:
            c, r, d = self.cell(run, f), self.cell(self.reference, f), deltas[f]
            q, qg = combine([(1.0, c["ppi"])], conf), combine([(1.0, c["gold_only"])], conf)
            dg = combine([(1.0, c["gold_only"]), (-1.0, r["gold_only"])], conf)
            per[f] = {"estimate": q["estimate"], "ci95": q["ci95"],
                      "ci95_gold_only": qg["ci95"], "gold_only_estimate": qg["estimate"],
                      "reference": combine([(1.0, r["ppi"])], conf)["estimate"], "delta": d["estimate"],
                      "delta_ci95": d["ci95"], "delta_ci95_gold_only": dg["ci95"], "proxy_mean": c["proxy_mean"],
                      "reference_proxy_mean": r["proxy_mean"], "n_samples": c["n_samples"], "n_gold": c["n_gold"],
                      "lam": c["lam"], "widened": c["widened"], "method": c["method"],
                      "n_missing_proxy": c["n_missing_proxy"],
                      "width_ratio": _ratio(q["ci95"], qg["ci95"])}
            bal.append((w, c["ppi"])), bal_g.append((w, c["gold_only"]))
            dbal_g += [(w, c["gold_only"]), (-w, r["gold_only"])]
        b, bg, dbg = combine(bal, conf), combine(bal_g, conf), combine(dbal_g, conf)
        means = [per[f]["proxy_mean"] for f in fams]
        out = {"run": run, "is_reference": run == self.reference, "estimated_true_quality": b["estimate"],
               "ci95": b["ci95"], "ci95_gold_only": bg["ci95"], "gold_only_estimate": bg["estimate"],
               "delta": db["estimate"], "delta_ci95": db["ci95"], "delta_ci95_gold_only": dbg["ci95"],
               "proxy_mean": float(np.mean(means)) if None not in means else None, "per_family": per}
        if run == self.reference:
            out.update(passes=False, checks=None,
                       reasons=["the reference run: the baseline every run is compared with"])
        else:
            v = self._rule(deltas, db)
            out.update(passes=v["passes"], reasons=v["reasons"], checks=v["checks"])
        return out

    def verdict(self, run: str) -> dict:
        """The release rule's verdict on a run and its per-family delta CIs alone: what run() decides, without
        the estimates around it (the corruption stress re-decides every run for every corruption)."""
        return self._rule(*self.deltas(run))

    def _rule(self, per: dict, db: dict) -> dict:
        fam_delta_ci = {f: d["ci95"] for f, d in per.items()}
        return {**self.cfg.release_rule.evaluate(db["estimate"], db["ci95"], fam_delta_ci),
                "family_delta_ci95": fam_delta_ci}

    @cached_property
    def runs(self) -> dict:
        return {r: self.run(r) for r in self.t.runs}

    def ship(self) -> dict:
        """The passing non-reference run with the highest estimated true quality; none when no run passes."""
        ok = [r for r, v in self.runs.items() if v["passes"]]
        if not ok:
            return {"run": None, "reason": "no run passes the release rule: keep the reference "
                                            f"('{self.reference}')"}
        best = max(ok, key=lambda r: self.runs[r]["estimated_true_quality"])
        v = self.runs[best]
        return {"run": best, "reason": f"passes the release rule with the highest estimated true quality of the "
                                       f"{len(ok)} passing run{'s' * (len(ok) != 1)}"}

    # ------------------------------------------------------------------------------------ proxy vs gold
    @cached_property
    def gold_rows(self) -> dict:
        """Per family, its gold rows that have a proxy (ascending row indices): the only rows the proxy-vs-gold
        claims read (a row without a proxy says nothing about the proxy)."""
        g = np.flatnonzero(~np.isnan(self.t.gold) & ~np.isnan(self.t.proxy))
        fam = self.t.family_code[g]
        return {f: g[fam == k] for k, f in enumerate(self.t.families)}

    @cached_property
    def proxy_agreement(self) -> dict:
        return self.agreement()

    def agreement(self, proxy: np.ndarray | None = None, spearman: bool = True, ci_method: str = "BCa") -> dict:
        """Per family, pooled over runs: Pearson and Spearman of proxy vs gold on the gold rows (paired-bootstrap
        CIs), each run's Pearson, and the proxy-per-gold slope against the other families' (scale)."""
        t = self.t
        proxy = t.proxy if proxy is None else proxy
        rows = self.gold_rows
        out = {}
        for f in t.families:
            m = rows[f]
            x, y = proxy[m], t.gold[m]
            # a family's figures depend on its own gold rows only: the corruption stress, which changes one or two
            # families' proxy at a time, reuses the others' (keyed by the rows' values)
            key = ("agreement", f, digest(x, y), self.cfg.n_resamples, self.cfg.seed, ci_method, spearman)
            if key not in self._shared and len(m) < MIN_PROXY_GOLD:     # no proxy to judge (missing on its rows)
                self._shared[key] = {"pearson": None, "ci95": None, "spearman": None, "spearman_ci95": None,
                                     "method": f"not evaluable: {len(m)} gold rows with a proxy (at least "
                                               f"{MIN_PROXY_GOLD} needed)", "n": int(len(m)), "per_run_pearson": {},
                                     "n_resamples": self.cfg.n_resamples, "seed": self.cfg.seed}
            if key not in self._shared:
                p = pearson_ci(x, y, n_resamples=self.cfg.n_resamples, seed=self.cfg.seed, method=ci_method)
                s = (spearman_ci(x, y, n_resamples=self.cfg.n_resamples, seed=self.cfg.seed) if spearman
                     else {"estimate": None, "ci95": None})
                per_run = {}
                for j, r in enumerate(t.runs):
                    mr = m[t.run_code[m] == j]
                    if len(mr) >= 3 and np.ptp(proxy[mr]) > 0 and np.ptp(t.gold[mr]) > 0:
                        per_run[r] = float(st.pearsonr(proxy[mr], t.gold[mr]).statistic)
                self._shared[key] = {"pearson": p["estimate"], "ci95": p["ci95"], "method": p["method"],
                                     "spearman": s["estimate"], "spearman_ci95": s["ci95"], "n": int(len(m)),
                                     "per_run_pearson": per_run, "n_resamples": self.cfg.n_resamples,
                                     "seed": self.cfg.seed}
            out[f] = dict(self._shared[key])
        scale = self.scale(proxy, {f: out[f]["ci95"] is not None and out[f]["ci95"][0] >
                                   self.cfg.agreement_min_pearson_lower for f in out})
        for f in t.families:
            out[f]["scale"] = scale[f]
        return out

    def scale(self, proxy: np.ndarray, agrees: dict | None = None) -> dict:
        """Per family: the OLS slope of proxy on gold (proxy per unit of true quality) over the median slope of
        the other families, with a percentile-bootstrap CI (every family's rows resampled)."""
        t, rng = self.t, np.random.default_rng(self.cfg.seed)
        rows = self.gold_rows
        fams, B = t.families, self.cfg.n_resamples
        slopes, boot = {}, {}
        for f in fams:
            m = rows[f]
            x, y = proxy[m], t.gold[m]
            i = rng.integers(0, max(1, len(x)), (B, len(x)))   # drawn in every case: the next family's draw is the same
            key = ("slope", f, digest(x, y), B, self.cfg.seed)
            if key not in self._shared and len(m) < MIN_PROXY_GOLD:
                self._shared[key] = (np.nan, np.full(B, np.nan))
            if key not in self._shared:
                self._shared[key] = (_slope(x[None, :], y[None, :])[0], _slope(x[i], y[i]))
            slopes[f], boot[f] = self._shared[key]
        # the common scale: the median slope of the *other* families whose proxy agrees with gold (a family the
        # optimiser gamed has no scale to lend); fewer than MIN_COMPARATORS such families -> no comparison (the
        # claim cannot be evaluated)
        thr = self.cfg.agreement_min_pearson_lower
        agrees = {f: len(rows[f]) >= MIN_PROXY_GOLD and _pearson_lower(proxy[rows[f]], t.gold[rows[f]], B, self.cfg)
                  > thr for f in fams} if agrees is None else agrees
        out = {}
        for f in fams:
            others = [g for g in fams if g != f and agrees[g]]
            base = float(np.median([slopes[g] for g in others])) if others else None
            if len(others) < MIN_COMPARATORS or not base > 0 or len(rows[f]) < MIN_PROXY_GOLD:
                out[f] = {"slope": slopes[f] if len(rows[f]) >= MIN_PROXY_GOLD else None,
                          "others_median_slope": base, "compared_with": others, "ratio": None, "ci95": None}
                continue
            base_b = np.median(np.stack([boot[g] for g in others]), axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                rb = boot[f] / base_b
            rb = rb[np.isfinite(rb)]
            alpha = 1 - self.cfg.confidence
            ci = ([float(v) for v in np.percentile(rb, [100 * alpha / 2, 100 * (1 - alpha / 2)])]
                  if len(rb) > B // 2 else None)
            out[f] = {"slope": slopes[f], "others_median_slope": base, "compared_with": others,
                      "ratio": slopes[f] / base, "ci95": ci}
        return out

    # ---------------------------------------------------------------------------------------- gold budget
    def budget(self) -> dict:
        """Per family: gold rows now (all runs) and the gold rows needed for every run's interval in the family
        to be half as wide (same lambda, same unlabelled rows), or why gold alone cannot do it."""
        out = {}
        for f in self.t.families:
            cells = [self.cell(r, f) for r in self.t.runs]
            now = sum(c["n_gold"] for c in cells)
            need = [c["labels_to_halve"] for c in cells]
            if any(c["widened"] for c in cells):
                line = (f"{f}: {now} gold rows; some cells' gold rows are not a random subset: label a random "
                        "subset of them first")
                total = None
            elif any(n is None for n in need):
                stuck = [c["run"] for c, n in zip(cells, need) if n is None]
                total = None
                line = (f"{f}: {now} gold rows; gold alone cannot halve the interval of {', '.join(stuck)} (its "
                        "unlabelled-proxy term is over a quarter of the variance): it needs more samples too")
            else:
                total = int(sum(need))
                per_run = ", ".join(f"{c['run']} {n}" for c, n in zip(cells, need))
                line = (f"{f}: {now} gold rows now; about {total} ({total - now:+d}) to halve every run's "
                        f"interval (labels per run: {per_run})")
            out[f] = {"n_gold": now, "labels_to_halve": total, "line": line,
                      "per_run": {c["run"]: n for c, n in zip(cells, need)}}
        return out

    def table_facts(self) -> dict:
        """What the report says about the table beside the claims: rows left out as superseded, rows without a
        proxy (per cell, and how their cells were certified), and the generation settings of each run."""
        cells = {}
        for r in self.t.runs:
            for f in self.t.families:
                n = self.t.missing_proxy(r, f)
                if n:
                    cells.setdefault(r, {})[f] = {"missing": n, "of": self.cell(r, f)["n_samples"]}
        n_missing = sum(v["missing"] for fs in cells.values() for v in fs.values())
        gen = self.t.generation
        records = {r: [_json_or_text(g) for g in gen.get(r, [])] for r in self.t.runs}
        distinct = {g for recs in gen.values() for g in recs}
        return {
            "superseded_rows": int(self.t.n_superseded),
            "missing_proxy": {
                "rows": int(n_missing), "of_rows": int(self.t.n_rows), "cells": cells,
                "handling": None if not n_missing else
                "a cell with rows without a proxy is certified from its gold rows alone (the gold-only interval: "
                "valid whatever made the proxy missing, since the gold rows are a random subset of all the "
                "cell's rows); the proxy-vs-gold claims use the gold rows that have a proxy"},
            "generation": {"by_run": records if gen else {},
                           "runs_without": [r for r in self.t.runs if not gen.get(r)] if gen else [],
                           "same_for_every_run": (len(distinct) == 1 and all(gen.get(r) for r in self.t.runs))
                           if gen else None}}

    def config_dict(self) -> dict:
        return dataclasses.asdict(self.cfg)


def _json_or_text(text: str):
    """A generation record as the object it encodes (its text when it is no JSON object)."""
    import json
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if isinstance(v, dict) else text


def _pearson_lower(x, y, n_resamples, cfg) -> float:
    return pearson_ci(x, y, n_resamples=n_resamples, seed=cfg.seed, method="percentile")["ci95"][0]


def digest(*arrays) -> str:
    """sha256 of arrays' bytes: the key of a cache entry computed from them."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def _slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of x on y along the last axis (NaN where y is constant)."""
    xm, ym = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (xm * ym).sum(-1) / (ym * ym).sum(-1)


def _ratio(a, b):
    wa, wb = a[1] - a[0], b[1] - b[0]
    return wa / wb if wb > 0 else None
