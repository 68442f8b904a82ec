"""python -m world.experiments.samples_coverage WORLD [WORLD ...] --out JSON: the samples front door judged against the oracle.

Each world's runs are exported as a samples table (world.export_samples: every run's samples scored by the task's
RM, a random gold subset labelled by the world's experts with their noise), audited by the same code the door's
claims use (audit.samples.estimates), and compared with the exact true quality (oracle rubric, Monte Carlo on
`--truth-samples` fresh samples a family, kept apart from the table):

  coverage      share of 95% PPI++ intervals that cover the truth: per run x family, per run (balanced), per run
                x family delta and balanced delta vs the reference (and the same for the gold-only intervals)
  unsafe passes runs that pass the release rule while the rule applied to the exact values fails (target 0);
                and how many of the exact passes the gold budget confirmed
  width ratio   PPI++ width / gold-only width per run x family: median overall, where the family's proxy agrees
                with gold (claim proxy.agrees_with_gold passes) and where it does not

`--gold 100,50,25` repeats the audit with smaller gold subsets (random subsets of the exported one, per cell).
Exports are cached under --cache (default /tmp/samples_export) by their settings.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from audit.samples.estimates import SamplesAudit, SamplesConfig
from audit.samples.table import DesignConfig, load
from rlhf.data import read_json_object, write_json
from rlhf.errors import InputError, run_cli

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, count_list, positive_int, seed_list
from ..export_samples import check_export, export
from ..grade import exact_rule
from ..truth import require_built_world


def _within(ci, v) -> bool:
    return ci[0] <= v <= ci[1]


def audit_world(exp_dir: Path, gold: int, seed: int) -> dict:
    truth = read_json_object(exp_dir / "oracle" / "truth.json", "an export's truth (python -m world export-samples)")
    # the door's random-subset test refuses about 1% of honest tables (its level, Bonferroni over the cells): the
    # export is read with the test at a level nothing reaches, and one the door would refuse is reported as refused
    # (the door writes no interval for it), not covered or missed
    door = DesignConfig(min_gold=min(10, gold))
    t = load(exp_dir / "samples.jsonl", exp_dir / "gold.jsonl", reference=truth["reference"],
             design=dataclasses.replace(door, alpha=1e-300))
    level = door.level(len(t.runs) * len(t.families))     # the door's own level for this table
    refused = sorted(f"{r}/{f} (KS p {d['p_value']:.2g} < {level:.2g})" for (r, f), d in t.design.items()
                     if d["p_value"] is not None and d["p_value"] < level)
    if refused:
        return {"runs": [], "variant": truth.get("world_variant"), "flagged": [], "refused": refused}
    rng = np.random.default_rng(seed + gold)
    for r in t.runs:                       # a random subset of each cell's gold rows is itself a random subset
        for f in t.families:
            idx = t.cell(r, f)
            g = idx[~np.isnan(t.gold[idx])]
            if len(g) > gold:
                t.gold[rng.choice(g, len(g) - gold, replace=False)] = np.nan
    a = SamplesAudit(t, truth["reference"], SamplesConfig(seed=seed, n_resamples=1000))
    agree = a.agreement(spearman=False)
    thr = a.cfg.agreement_min_pearson_lower
    tr = truth["runs"]
    ref = truth["reference"]
    rows = []
    for run, v in a.runs.items():
        exact = tr[run]["per_family"]
        d_exact = {f: exact[f] - tr[ref]["per_family"][f] for f in t.families}
        bal_d = float(np.mean(list(d_exact.values())))
        row = {"run": run, "reference": run == ref, "balanced": _within(v["ci95"], tr[run]["balanced"]),
               "balanced_gold_only": _within(v["ci95_gold_only"], tr[run]["balanced"]),
               "passes": v["passes"], "exact_passes": run != ref and exact_rule(d_exact),
               "estimate": v["estimated_true_quality"], "truth": tr[run]["balanced"], "cells": []}
        if run != ref:
            row["delta"] = _within(v["delta_ci95"], bal_d)
            row["delta_gold_only"] = _within(v["delta_ci95_gold_only"], bal_d)
        for f, p in v["per_family"].items():
            c = {"family": f, "covers": _within(p["ci95"], exact[f]),
                 "covers_gold_only": _within(p["ci95_gold_only"], exact[f]),
                 "width_ratio": p["width_ratio"], "agrees": agree[f]["ci95"][0] > thr, "lam": p["lam"],
                 "error": p["estimate"] - exact[f]}
            if run != ref:
                c["delta_covers"] = _within(p["delta_ci95"], d_exact[f])
                c["delta_covers_gold_only"] = _within(p["delta_ci95_gold_only"], d_exact[f])
            row["cells"].append(c)
        rows.append(row)
    return {"runs": rows, "variant": truth.get("world_variant"), "flagged": [f for f in t.families
                                                                             if not agree[f]["ci95"][0] > thr]}


def summarise(results: list[dict]) -> dict:
    cells = [c for w in results for r in w["runs"] for c in r["cells"]]
    runs = [r for w in results for r in w["runs"]]
    cand = [r for r in runs if not r["reference"]]
    dcells = [c for c in cells if "delta_covers" in c]
    rate = lambda xs: float(np.mean(xs)) if xs else None   # noqa: E731
    ratios = [c["width_ratio"] for c in cells if c["width_ratio"] is not None]
    return {"worlds": len(results), "refused_exports": sum(bool(w.get("refused")) for w in results),
            "cells": len(cells),
            "coverage_cells": rate([c["covers"] for c in cells]),
            "coverage_cells_gold_only": rate([c["covers_gold_only"] for c in cells]),
            "coverage_balanced": rate([r["balanced"] for r in runs]),
            "coverage_delta_cells": rate([c["delta_covers"] for c in dcells]),
            "coverage_delta_balanced": rate([r["delta"] for r in cand]),
            "coverage_delta_cells_gold_only": rate([c["delta_covers_gold_only"] for c in dcells]),
            "runs": len(cand), "passes": sum(r["passes"] for r in cand),
            "exact_passes": sum(r["exact_passes"] for r in cand),
            "unsafe_passes": sum(r["passes"] and not r["exact_passes"] for r in cand),
            "confirmed_passes": sum(r["passes"] and r["exact_passes"] for r in cand),
            "median_width_ratio": float(np.median(ratios)) if ratios else None,
            "median_width_ratio_agreeing": float(np.median([c["width_ratio"] for c in cells if c["agrees"]]))
            if any(c["agrees"] for c in cells) else None,
            "median_width_ratio_flagged": float(np.median([c["width_ratio"] for c in cells if not c["agrees"]]))
            if any(not c["agrees"] for c in cells) else None,
            "mean_abs_error_cells": rate([abs(c["error"]) for c in cells])}


def markdown(per_budget: dict, summary: dict) -> str:
    f = lambda v: "n/a" if v is None else f"{v:.3f}"   # noqa: E731
    top = max(per_budget)
    lines = [f"Per world, {top} gold rows per run x family:", "",
             "| world | flagged families | cells covered (PPI++ / gold only) | deltas covered | balanced covered | "
             "passes / exact passes / unsafe | median width ratio |", "|---|---|---|---|---|---|---|"]
    for w in per_budget[top]:
        if w.get("refused"):
            lines.append(f"| {Path(w['world']).name} (export seed {w.get('export_seed', 0)}) | refused by the door's "
                         f"random-subset test: {'; '.join(w['refused'])} | | | | | |")
            continue
        s = summarise([w])
        lines.append(f"| {Path(w['world']).name} (export seed {w.get('export_seed', 0)}) | {', '.join(w['flagged']) or '-'} | {f(s['coverage_cells'])} / "
                     f"{f(s['coverage_cells_gold_only'])} | {f(s['coverage_delta_cells'])} | "
                     f"{f(s['coverage_balanced'])} | {s['passes']} / {s['exact_passes']} / {s['unsafe_passes']} | "
                     f"{f(s['median_width_ratio'])} |")
    lines += ["", "All worlds, by gold budget:", "",
              "| gold rows per cell | cells | cells covered (PPI++ / gold only) | deltas covered (PPI++ / gold only) "
              "| balanced / balanced delta covered | passes / exact / unsafe / confirmed | median width ratio (all / "
              "agreeing / flagged families) | mean abs error |", "|---|---|---|---|---|---|---|---|"]
    for g, s in summary.items():
        lines.append(f"| {g} | {s['cells']} | {f(s['coverage_cells'])} / {f(s['coverage_cells_gold_only'])} | "
                     f"{f(s['coverage_delta_cells'])} / {f(s['coverage_delta_cells_gold_only'])} | "
                     f"{f(s['coverage_balanced'])} / {f(s['coverage_delta_balanced'])} | {s['passes']} / "
                     f"{s['exact_passes']} / {s['unsafe_passes']} / {s['confirmed_passes']} | "
                     f"{f(s['median_width_ratio'])} / {f(s['median_width_ratio_agreeing'])} / "
                     f"{f(s['median_width_ratio_flagged'])} | {f(s['mean_abs_error_cells'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.samples_coverage", description=first_paragraph(__doc__))
    ap.add_argument("worlds", nargs="+")
    ap.add_argument("--samples", type=positive_int, default=1000, help="samples per run x family")
    ap.add_argument("--gold", type=count_list, default=[100, 50, 25],
                    help="gold rows per run x family, comma-separated budgets (each at most --samples)")
    ap.add_argument("--truth-samples", type=positive_int, default=4000)
    ap.add_argument("--seeds", type=seed_list, default=[0],
                    help="export seeds, comma-separated: each an independent draw of every run's samples and gold "
                         "subset from the same world (default 0)")
    ap.add_argument("--cache", default=None, help="where exports are kept (default /tmp/samples_export)")
    ap.add_argument("--out", default=None, help="write every figure here (JSON)")
    ap.add_argument("--markdown", action="store_true", help="also print the tables as markdown (docs/samples.md)")
    a = ap.parse_args(argv)
    budgets = sorted(set(a.gold), reverse=True)
    t0 = time.time()
    per_budget = {g: [] for g in budgets}
    seeds = a.seeds
    for w in a.worlds:                      # the worlds and every setting before any work (exit 2, nothing written)
        require_built_world(w)
    check_out_file(a.out, "the --out file")
    cache = Path(a.cache) if a.cache else Path("/tmp") / "samples_export"
    if cache.exists() and not cache.is_dir():
        raise InputError(f"--cache {cache}: exists and is not a directory")
    exports = [(Path(w), s, cache / f"{Path(w).name}-n{a.samples}-g{budgets[0]}-t{a.truth_samples}-s{s}")
               for w in a.worlds for s in seeds]
    for w, seed, exp in exports:            # every export's settings (and an earlier export there) before any work
        check_export(w, exp, a.samples, budgets[0], a.truth_samples)
        if (exp / "oracle" / "truth.json").exists():
            read_json_object(exp / "oracle" / "truth.json", "an export's truth (python -m world export-samples)")
    for w, seed, exp in exports:
        if not (exp / "oracle" / "truth.json").exists():
            export(w, exp, samples=a.samples, gold=budgets[0], seed=seed, truth_samples=a.truth_samples,
                   quiet=True)
        for g in budgets:
            res = audit_world(exp, g, seed)
            res["world"] = str(w)
            res["export_seed"] = seed
            per_budget[g].append(res)
            if res.get("refused"):
                print(f"[{time.time() - t0:5.0f}s] {w.name:16s} s{seed} gold {g:3d}: refused by the door's random-"
                      f"subset test (its ~1% false refusals of honest tables): {'; '.join(res['refused'])}", flush=True)
                continue
            s = summarise([res])
            print(f"[{time.time() - t0:5.0f}s] {w.name:16s} s{seed} gold {g:3d}: cells {s['coverage_cells']:.3f} "
                  f"(gold-only {s['coverage_cells_gold_only']:.3f}), deltas {s['coverage_delta_cells']:.3f}, "
                  f"balanced {s['coverage_balanced']:.3f}; passes {s['passes']} / exact {s['exact_passes']}, "
                  f"unsafe {s['unsafe_passes']}; width ratio {s['median_width_ratio']:.3f}; flagged "
                  f"{','.join(res['flagged']) or '-'}", flush=True)
    summary = {g: summarise(per_budget[g]) for g in budgets}
    print("\nall worlds:")
    for g, s in summary.items():
        print(f"gold {g:3d}/cell: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                                 for k, v in s.items()}))
    if a.markdown:
        print(markdown(per_budget, summary))
    if a.out:
        write_json(a.out, {"settings": vars(a), "summary": summary,
                           "worlds": {g: per_budget[g] for g in budgets}})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.samples_coverage"))
