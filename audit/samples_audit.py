"""The samples front door's statistics (SPEC §4): from a validated samples table (audit.samples_table), the true
quality of every run x family cell by PPI++ (the proxy as the prediction, the gold subset as the rectifier) beside
the gold-only interval, balanced means and deltas against the reference run, the release rule's verdicts, the
run to ship, the proxy's agreement with the gold labels per family, and a gold budget per family. The claims in
checks/samples/ read from here; nothing here asserts. Generic: no tokens, checkpoints or world.

Intervals. A cell's standard error is PPI++'s (audit.ppi, = ppi_py's) times t_{n-1} / z, a small-sample
correction for the n gold rows its variance is estimated from (1.05 at n = 25, 1.01 at n = 100). A cell's interval covers the mean gold label of the population its rows were drawn from (the
run's policy on the family's prompts) when the gold rows are a random subset of the cell's rows (tested: see
audit.samples_table). Cells are independent samples, so a balanced mean (families equally weighted) and a
delta (run minus reference) combine cell standard errors in quadrature. A cell whose gold rows failed the
random-subset test and which the user asked to widen gets a worst-case interval (every unlabelled row at
either end of the stated label range), added linearly, never in quadrature.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import stats as st

from .ppi import classical_mean, labels_to_halve, ppi_mean
from .release import ReleaseRule
from .samples_table import DesignConfig, Table
from .stats import pearson_ci, spearman_ci


MIN_COMPARATORS = 2     # a scale ratio against one other family cannot tell which of the two is off


@dataclass
class SamplesConfig:
    seed: int = 0
    confidence: float = 0.95
    n_resamples: int = 2000
    release_rule: ReleaseRule = field(default_factory=ReleaseRule)
    design: DesignConfig = field(default_factory=DesignConfig)
    # the proxy agrees with the gold labels on a family: Pearson CI lower bound above this (as the task door's RM)
    agreement_min_pearson_lower: float = 0.2
    # the proxy is on a common scale across families: the family's proxy-per-gold slope over the other
    # families' median slope has a CI that reaches into [1/r, r]
    scale_max_ratio: float = 2.0
    stress_examples: int = 24       # hypothesis-drawn proxy corruptions (audit.samples_stress)


@dataclass
class Interval:
    """estimate +- (z * se + fixed): se combines in quadrature, fixed (worst-case parts) linearly."""
    estimate: float
    se: float
    fixed: float = 0.0

    def ci(self, z: float) -> list[float]:
        hw = z * self.se + self.fixed
        return [self.estimate - hw, self.estimate + hw]

    @staticmethod
    def combine(parts: list[tuple[float, "Interval"]]) -> "Interval":
        return Interval(sum(w * p.estimate for w, p in parts), math.sqrt(sum((w * p.se) ** 2 for w, p in parts)),
                        sum(abs(w) * p.fixed for w, p in parts))


class SamplesAudit:
    def __init__(self, table: Table, reference: str, cfg: SamplesConfig | None = None):
        self.t, self.reference, self.cfg = table, reference, cfg or SamplesConfig()
        self.z = float(st.norm.ppf(0.5 + self.cfg.confidence / 2))
        self._cells: dict = {}

    # --------------------------------------------------------------------------------------------- cells
    def cell(self, run: str, family: str) -> dict:
        key = (run, family)
        if key not in self._cells:
            self._cells[key] = self._cell(run, family)
        return self._cells[key]

    def _cell(self, run, family) -> dict:
        t, conf = self.t, self.cfg.confidence
        idx = t.cell(run, family)
        lab = ~np.isnan(t.gold[idx])
        y, f, fu = t.gold[idx][lab], t.proxy[idx][lab], t.proxy[idx][~lab]
        design = t.design.get((run, family), {"random": True, "p_value": None})
        gold_only = classical_mean(y, confidence=conf)
        out = {"run": run, "family": family, "n_samples": int(len(idx)), "n_gold": int(len(y)),
               "proxy_mean": float(t.proxy[idx].mean()), "gold_mean": float(y.mean()), "design": design}
        if design["random"]:
            p = ppi_mean(y, f, fu, confidence=conf)
            k = self.small_sample_factor(len(y))
            out.update(ppi=Interval(p["estimate"], k * p["se"]),
                       gold_only=Interval(gold_only["estimate"], k * gold_only["se"]), small_sample_factor=k,
                       lam=p["lam"], method=p["method"], labels_to_halve=labels_to_halve(y, f, fu, p["lam"]),
                       widened=False)
        else:   # --nonrandom-gold widen: every unlabelled row at either end of the label range
            lo, hi = self.cfg.design.gold_range
            tot, s, u = len(idx), float(y.sum()), len(fu)
            b_lo, b_hi = (s + u * lo) / tot, (s + u * hi) / tot
            worst = Interval((b_lo + b_hi) / 2, float(y.std() / math.sqrt(tot)), (b_hi - b_lo) / 2)
            out.update(ppi=worst, gold_only=worst, lam=None, labels_to_halve=None, widened=True,
                       method=f"worst case: gold rows not a random subset; {u} unlabelled rows anywhere in "
                              f"[{lo:g}, {hi:g}] (midpoint reported, not an estimate)")
        return out

    def small_sample_factor(self, n: int) -> float:
        """Student's t (n - 1 degrees of freedom) over the normal quantile: the cell's variance is estimated
        from its n gold rows, and the normal interval under-covers at 25 rows (measured in docs/samples.md)."""
        a = 0.5 + self.cfg.confidence / 2
        return float(st.t.ppf(a, n - 1) / st.norm.ppf(a))

    # ---------------------------------------------------------------------------------------------- runs
    def run(self, run: str) -> dict:
        """Per family and balanced: PPI++ and gold-only estimates, deltas vs the reference, the release rule."""
        fams, z = self.t.families, self.z
        w = 1.0 / len(fams)
        per, bal, bal_g, dbal, dbal_g, fam_delta_ci = {}, [], [], [], [], {}
        for f in fams:
            c, r = self.cell(run, f), self.cell(self.reference, f)
            d = Interval.combine([(1.0, c["ppi"]), (-1.0, r["ppi"])])
            dg = Interval.combine([(1.0, c["gold_only"]), (-1.0, r["gold_only"])])
            per[f] = {"estimate": c["ppi"].estimate, "ci95": c["ppi"].ci(z),
                      "ci95_gold_only": c["gold_only"].ci(z), "gold_only_estimate": c["gold_only"].estimate,
                      "reference": r["ppi"].estimate, "delta": d.estimate, "delta_ci95": d.ci(z),
                      "delta_ci95_gold_only": dg.ci(z), "proxy_mean": c["proxy_mean"],
                      "reference_proxy_mean": r["proxy_mean"], "n_samples": c["n_samples"], "n_gold": c["n_gold"],
                      "lam": c["lam"], "widened": c["widened"], "method": c["method"],
                      "width_ratio": _ratio(c["ppi"].ci(z), c["gold_only"].ci(z))}
            fam_delta_ci[f] = d.ci(z)
            bal.append((w, c["ppi"])), bal_g.append((w, c["gold_only"]))
            dbal += [(w, c["ppi"]), (-w, r["ppi"])]
            dbal_g += [(w, c["gold_only"]), (-w, r["gold_only"])]
        b, bg = Interval.combine(bal), Interval.combine(bal_g)
        db, dbg = Interval.combine(dbal), Interval.combine(dbal_g)
        out = {"run": run, "is_reference": run == self.reference, "estimated_true_quality": b.estimate,
               "ci95": b.ci(z), "ci95_gold_only": bg.ci(z), "gold_only_estimate": bg.estimate,
               "delta": db.estimate, "delta_ci95": db.ci(z), "delta_ci95_gold_only": dbg.ci(z),
               "proxy_mean": float(np.mean([per[f]["proxy_mean"] for f in fams])), "per_family": per}
        if run == self.reference:
            out.update(passes=False, checks=None,
                       reasons=["the reference run: the baseline every run is compared with"])
        else:
            v = self.cfg.release_rule.evaluate(db.estimate, db.ci(z), fam_delta_ci)
            out.update(passes=v["passes"], reasons=v["reasons"], checks=v["checks"])
        return out

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
    def proxy_agreement(self) -> dict:
        return self.agreement()

    def agreement(self, proxy: np.ndarray | None = None, spearman: bool = True, ci_method: str = "BCa") -> dict:
        """Per family, pooled over runs: Pearson and Spearman of proxy vs gold on the gold rows (paired-bootstrap
        CIs), each run's Pearson, and the proxy-per-gold slope against the other families' (scale)."""
        t = self.t
        proxy = t.proxy if proxy is None else proxy
        lab = ~np.isnan(t.gold)
        out = {}
        for f in t.families:
            m = lab & (t.family == f)
            x, y = proxy[m], t.gold[m]
            p = pearson_ci(x, y, n_resamples=self.cfg.n_resamples, seed=self.cfg.seed, method=ci_method)
            s = (spearman_ci(x, y, n_resamples=self.cfg.n_resamples, seed=self.cfg.seed) if spearman
                 else {"estimate": None, "ci95": None})
            per_run = {}
            for r in t.runs:
                mr = m & (t.run == r)
                if mr.sum() >= 3 and np.ptp(proxy[mr]) > 0 and np.ptp(t.gold[mr]) > 0:
                    per_run[r] = float(st.pearsonr(proxy[mr], t.gold[mr]).statistic)
            out[f] = {"pearson": p["estimate"], "ci95": p["ci95"], "method": p["method"], "spearman": s["estimate"],
                      "spearman_ci95": s["ci95"], "n": int(m.sum()), "per_run_pearson": per_run,
                      "n_resamples": self.cfg.n_resamples, "seed": self.cfg.seed}
        scale = self.scale(proxy, {f: out[f]["ci95"][0] > self.cfg.agreement_min_pearson_lower for f in out})
        for f in t.families:
            out[f]["scale"] = scale[f]
        return out

    def scale(self, proxy: np.ndarray, agrees: dict | None = None) -> dict:
        """Per family: the OLS slope of proxy on gold (proxy per unit of true quality) over the median slope of
        the other families, with a percentile-bootstrap CI (every family's rows resampled)."""
        t, rng = self.t, np.random.default_rng(self.cfg.seed)
        lab = ~np.isnan(t.gold)
        fams, B = t.families, self.cfg.n_resamples
        slopes, boot = {}, {}
        for f in fams:
            m = lab & (t.family == f)
            x, y = proxy[m], t.gold[m]
            slopes[f] = _slope(x[None, :], y[None, :])[0]
            i = rng.integers(0, len(x), (B, len(x)))
            boot[f] = _slope(x[i], y[i])
        # the common scale: the median slope of the *other* families whose proxy agrees with gold (a family the
        # optimiser gamed has no scale to lend); fewer than MIN_COMPARATORS such families -> no comparison (the
        # claim cannot be evaluated)
        thr = self.cfg.agreement_min_pearson_lower
        agrees = {f: _pearson_lower(proxy[lab & (t.family == f)], t.gold[lab & (t.family == f)], B, self.cfg)
                  > thr for f in fams} if agrees is None else agrees
        out = {}
        for f in fams:
            others = [g for g in fams if g != f and agrees[g]]
            base = float(np.median([slopes[g] for g in others])) if others else None
            if len(others) < MIN_COMPARATORS or not base > 0:
                out[f] = {"slope": slopes[f], "others_median_slope": base, "compared_with": others,
                          "ratio": None, "ci95": None}
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

    def config_dict(self) -> dict:
        return dataclasses.asdict(self.cfg)


def _pearson_lower(x, y, n_resamples, cfg) -> float:
    return pearson_ci(x, y, n_resamples=n_resamples, seed=cfg.seed, method="percentile")["ci95"][0]


def _slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of x on y along the last axis (NaN where y is constant)."""
    xm, ym = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (xm * ym).sum(-1) / (ym * ym).sum(-1)


def _ratio(a, b):
    wa, wb = a[1] - a[0], b[1] - b[0]
    return wa / wb if wb > 0 else None
