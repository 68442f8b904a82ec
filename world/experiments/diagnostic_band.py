"""python -m world.experiments.diagnostic_band BENCH.json [BENCH.json ...]: the band of the diagnostic's three calls,
derived from what its calls were measured to miss on benches with known labels (issue 49; docs/diagnostic.md).

Each BENCH.json is a `world.experiments.diagnosis_bench --out` file: its rows hold every pair's SPEC §3 label run
(1,500 steps, the oracle's exact gains) and the diagnostic's risk at the bench's recipe; with `--replicates K` in
its diagnostic args, each seed's own risk too. A pair's SPEC risk is risk_of(kept_share(rm_gain, rubric_gain)),
the same formula the diagnostic applies to its stand-in's gains, and the residual of a call is its risk minus
that. Two kinds of call are measured per recipe:

* one run (the default: what a user gets from one call): every seed's risk on every pair, each a residual;
* the mean of K replicates (the diagnostic's combined risk at --replicates K): one residual a pair.

Risks are clipped to within 0.5 of the line first (clipped_residual: the far pairs' residuals cannot make a wrong
call). The band at a level (default 0.99) is the conformal quantile of the residuals on each side
(audit.task.diagnostic_band.band_from_residuals): SPEC's risk sits more than `below` above a call's risk, or more
than `above` under it, each with probability at most 1 - level for a pair drawn like the benches'. It also prints
where the residual comes from -- the seed-to-seed spread (the within-pair sd of one-run risks) and the shift of
the recipe against SPEC's (the pair's mean over seeds minus SPEC's risk; with `--alt-label` in the bench, the
oracle's own risk at the shorter recipe, i.e. the horizon alone) -- and, in sample, how many calls the band makes
and how many of them are right on each bench.

--write FILE writes the band file the audit reads (audit/task/diagnostic_band_measured.py): the bands with their
residuals' counts, their sources and this command. It reads the oracle's labels through the bench files only;
the audit reads nothing but the numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from audit.core.hazard import kept_share, risk_of
from audit.task.diagnostic import DiagnosticConfig
from audit.task.diagnostic_band import LINE, RECIPE_KEYS, RISKY, SAFE, band_from_residuals, band_module_text
from rlhf.atomic import atomic_write_text, check_out_file
from rlhf.cli import Parser
from rlhf.errors import InputError, run_cli

NEAR = 0.4          # pairs whose SPEC risk is within this of the line: where the seed spread is reported
WINDOW = 0.5        # risks are clipped to [LINE - W, LINE + W] before residuals are taken (clipped_residual)


def clipped_residual(risk: float, spec: float, window: float = WINDOW) -> float:
    """A call's residual against SPEC's risk, both clipped to within `window` of the line. A wrong call at a band
    edge e <= window always has a clipped residual beyond e (the call's risk is at most LINE - e, SPEC's at least
    LINE, or the mirror), so the band's bound on wrong calls holds as with raw residuals; what clipping drops is
    the size of residuals between risks both far on one side (a call at risk 2.0 where SPEC's is 1.3), which
    cannot make a wrong call and would only widen the band."""
    lo, hi = LINE - window, LINE + window
    return min(max(float(risk), lo), hi) - min(max(float(spec), lo), hi)


def bench_recipe(bench: dict) -> tuple[dict, int]:
    """(recipe, replicates) of the diagnostic a bench ran: DiagnosticConfig's defaults with the bench's
    --diagnostic-arg flags applied, parsed by the diagnostic's own argument parser."""
    from audit.task.diagnostic import add_config_args, config_from_args
    ap = argparse.ArgumentParser()
    add_config_args(ap)
    args = list(bench["config"].get("diagnostic_args") or [])
    a, _ = ap.parse_known_args(args)
    cfg = config_from_args(a)
    return {k: getattr(cfg, k) for k in RECIPE_KEYS}, cfg.replicates


def recipe_key(recipe: dict) -> str:
    return json.dumps(recipe, sort_keys=True)


def spec_risk(row: dict) -> float:
    return risk_of(kept_share(row["rm_gain"], row["rubric_gain"]))


def collect(benches: list[tuple[str, dict]], window: float = WINDOW) -> dict:
    """Residuals per (recipe, replicates): {"one": {(rm_dir, family, seed): residual}, "mean": {(rm_dir, family):
    residual}, "rows": {(rm_dir, family): row}} keyed by recipe_key; one-run draws of the same pair and seed counted
    once (a K = 1 bench at seed s and a K-replicate bench's first seed are the same call)."""
    out: dict = defaultdict(lambda: {"one": {}, "mean": defaultdict(dict), "risk": {}, "rows": {}, "sources": [],
                                     "recipe": None})
    for name, b in benches:
        recipe, k = bench_recipe(b)
        g = out[recipe_key(recipe)]
        g["recipe"] = recipe
        g["sources"].append({"bench": name, "replicates": k, "worlds": [Path(w).name for w in b["worlds"]],
                             "regime": b["config"]["regime"], "seed": b["config"]["seed"],
                             "rms": b["config"]["rms"]})
        seed0 = b["config"]["seed"]
        for r in b["rows"]:
            if "risk" not in r:
                continue
            pair = (r["rm_dir"], r["family"])
            truth = spec_risk(r)
            g["rows"][pair] = r
            risks = r.get("replicate_risks") or ([r["risk"]] if k == 1 else None)
            if risks:
                for j, x in enumerate(risks):
                    g["one"][(*pair, seed0 + j)] = clipped_residual(x, truth, window)
                    g["risk"][(*pair, seed0 + j)] = float(x)
            if k > 1:
                g["mean"][k][pair] = clipped_residual(r["risk"], truth, window)
                g["risk"][(*pair, f"mean{k}")] = float(r["risk"])
    return out


def decomposition(g: dict) -> dict:
    """Where one run's residual comes from, on this recipe's pairs: the within-pair sd of one-run risks (seed to
    seed; overall and on pairs within NEAR of the line), the pair's shift (mean over its seeds minus SPEC's risk),
    and with alt labels the oracle's own shift at the short recipe (the horizon alone)."""
    by_pair = defaultdict(list)       # raw (unclipped) residuals: where the noise comes from, not the band
    for (rm, f, seed) in g["one"]:
        by_pair[(rm, f)].append(g["risk"][(rm, f, seed)] - spec_risk(g["rows"][(rm, f)]))
    multi = {p: v for p, v in by_pair.items() if len(v) > 1}
    near = {p: v for p, v in multi.items() if abs(spec_risk(g["rows"][p]) - LINE) <= NEAR}

    def pooled_sd(groups):
        if not groups:
            return None
        ss = sum(float(((np.array(v) - np.mean(v)) ** 2).sum()) for v in groups.values())
        return float(np.sqrt(ss / sum(len(v) - 1 for v in groups.values())))
    shift = np.array([np.mean(v) for v in by_pair.values()])
    out = {"pairs": len(by_pair), "one_run_draws": len(g["one"]), "seed_sd": pooled_sd(multi),
           "seed_sd_near_line": pooled_sd(near), "near_line_pairs": len(near),
           "shift_quantiles": _quantiles(shift)}
    alt = [r for r in g["rows"].values() if "rm_gain_alt" in r]
    if alt:
        h = np.array([risk_of(kept_share(r["rm_gain_alt"], r["rubric_gain_alt"])) - spec_risk(r) for r in alt])
        out["horizon_shift_quantiles"] = _quantiles(h)
    return out


def _quantiles(x) -> dict:
    x = np.asarray(x, float)
    return {k: float(np.quantile(x, q)) for k, q in (("p01", 0.01), ("p05", 0.05), ("p25", 0.25), ("median", 0.5),
                                                      ("p75", 0.75), ("p95", 0.95), ("p99", 0.99))} | {
        "min": float(x.min()), "max": float(x.max()), "mean": float(x.mean()), "n": int(len(x))}


def in_sample(g: dict, band, k: int | None) -> dict:
    """The band's three calls on its own derivation pairs (not a validation: the band was read off them)."""
    draws = ([(p[:2], g["risk"][p]) for p in g["one"]] if k is None
             else [(p, g["risk"][(*p, f"mean{k}")]) for p in g["mean"][k]])
    called = right = 0
    for pair, risk in draws:
        truth = spec_risk(g["rows"][pair])
        c = band.call(risk)
        if c in (RISKY, SAFE):
            called += 1
            right += (c == RISKY) == (truth > LINE)
    return {"draws": len(draws), "called": called, "right": right}


def derive(benches: list[tuple[str, dict]], level: float, window: float = WINDOW) -> dict:
    """The bands of every recipe and replicate count the benches measured. Residuals are clipped to `window` of
    the line (clipped_residual); should an edge come out wider than the window (then clipping could hide a wrong
    call), everything is derived again at window 1.0, and the result says so."""
    res = _derive(benches, level, window)
    if window < 1.0 and any(max(e["below"], e["above"]) > window for e in res["bands"]):
        res = _derive(benches, level, 1.0)
        res["window_note"] = f"an edge exceeded the window {window:g}: derived again at window 1.0"
    return res


def _derive(benches: list[tuple[str, dict]], level: float, window: float) -> dict:
    groups = collect(benches, window)
    bands, report = [], []
    default = {k: getattr(DiagnosticConfig(), k) for k in RECIPE_KEYS}
    for key, g in groups.items():
        rec = g["recipe"]
        words = f"{rec['steps']} steps at lr {rec['lr']:g}"
        def where(k):       # the benches whose calls made these residuals (a mean of k needs k replicates)
            return "; ".join(f"{s['regime']} seed {s['seed']} on {'+'.join(s['worlds'])} ({s['rms']} RMs, "
                             f"{s['replicates']} replicate{'s' if s['replicates'] > 1 else ''})"
                             for s in g["sources"] if k == 1 or s["replicates"] == k)
        kinds = ([(1, list(g["one"].values()))] if g["one"] else []) + [(k, list(v.values()))
                                                                       for k, v in sorted(g["mean"].items())]
        for k, res in kinds:
            what = "one run" if k == 1 else f"the mean of {k} replicates"
            basis = (f"{100 * level:g}% conformal quantiles of {len(res)} residuals of {what} at {words} against "
                     f"SPEC's 1,500-step risk (risks clipped to {LINE - window:g}-{LINE + window:g}), on benches "
                     f"{where(k)} (python -m world.experiments.diagnostic_band)")
            band = band_from_residuals(res, level, basis)
            report.append({"recipe": rec, "replicates": k, "band": dataclasses.asdict(band),
                           "in_sample": in_sample(g, band, None if k == 1 else k)})
            if not np.isfinite([band.below, band.above]).all():
                continue            # too few residuals for this level: reported, not a band anyone can use
            bands.append({"recipe": rec, "replicates": k, "default": rec == default and k == 1,
                          "below": band.below, "above": band.above, "level": level, "residuals": len(res),
                          "window": window, "basis": basis})
        report[-1]["decomposition"] = decomposition(g)
    return {"bands": bands, "report": report, "window": window}


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.diagnostic_band", description=__doc__.splitlines()[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("benches", nargs="+", help="diagnosis_bench --out files")
    ap.add_argument("--level", type=float, default=0.99, help="one-sided level of each band edge (default 0.99)")
    ap.add_argument("--settle-replicates", type=int, default=3,
                    help="replicates of the long mode --settle runs (the band file's 'settle' entry)")
    ap.add_argument("--settle-seconds", type=float, default=None,
                    help="the long mode's measured wall time a RM on 2 threads, for the band file")
    ap.add_argument("--write", default=None, metavar="FILE", help="write the band file the audit reads")
    ap.add_argument("--out", default=None, help="JSON with the bands, the decomposition and the in-sample calls")
    a = ap.parse_args(argv)
    if not 0.5 < a.level < 1:
        ap.error(f"--level {a.level}: expected a number in (0.5, 1)")
    for f in (a.write, a.out):
        check_out_file(f, "the output file")
    benches = []
    for f in a.benches:
        try:
            benches.append((Path(f).name, json.loads(Path(f).read_text())))
        except (OSError, ValueError) as e:
            raise InputError(f"{f}: cannot be read as a diagnosis_bench --out file ({e})") from None
        if "rows" not in benches[-1][1] or "config" not in benches[-1][1]:
            raise InputError(f"{f}: expected a diagnosis_bench --out file with keys 'rows' and 'config'")
    res = derive(benches, a.level)
    if res.get("window_note"):
        print(res["window_note"])
    for r in res["report"]:
        b, s = r["band"], r["in_sample"]
        if "decomposition" in r:
            print(f"{r['recipe']['steps']} steps lr {r['recipe']['lr']:g}, where one run's residual comes from: "
                  + json.dumps(r["decomposition"]))
        if not np.isfinite([b["below"], b["above"]]).all():
            print(f"{r['recipe']['steps']} steps lr {r['recipe']['lr']:g}, {r['replicates']} replicate(s): "
                  f"{s['draws']} residuals are too few for level {a.level:g} (needs {math.ceil(1 / (1 - a.level)) - 1}); "
                  "no band written")
            continue
        print(f"{r['recipe']['steps']} steps lr {r['recipe']['lr']:g}, {r['replicates']} replicate(s): "
              f"SPEC's risk within [risk - {b['above']:.3f}, risk + {b['below']:.3f}] -> safe below "
              f"{LINE - b['below']:.3f}, risky above {LINE + b['above']:.3f}; in sample {s['called']}/{s['draws']} "
              f"called, {s['right']} right")
    command = "python -m world.experiments.diagnostic_band " + shlex.join(sys.argv[1:] if argv is None else argv)
    if a.write:
        steps, lr = 750, 6e-4
        data = {"about": "The band of the diagnostic's three calls (audit/task/diagnostic_band.py), measured; "
                         "docs/diagnostic.md 'Three calls'.", "command": command, "bands": res["bands"],
                "settle": {"steps": steps, "lr": lr, "replicates": a.settle_replicates,
                           "seconds_2_threads": a.settle_seconds}}
        atomic_write_text(a.write, band_module_text(data))
    if a.out:
        atomic_write_text(a.out, json.dumps({**res, "command": command}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.diagnostic_band"))
