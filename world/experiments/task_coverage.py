"""python -m world.experiments.task_coverage WORLD [WORLD ...] --out DIR [--gold 25] [--seeds 0]: the task door's quality
intervals against the oracle at a reduced gold budget (SPEC §3 "less gold": the estimate must widen honestly).

Per world and seed: a copy of WORLD/task (links to the world's files) whose data/gold_calib.jsonl keeps a simple
random `--gold` rows per family (drawn with the seed), certified by `python -m audit.certify --stress-examples 0`
(the stress claim does not touch the quality figures), then judged against the oracle:

  shipped   the certified quality's CI covers the shipped checkpoint's exact true quality; |error|; the
            improvement claim and families_improved right (world.grade's reporting and decision figures)
  runs      per run: the balanced CI covers the exact balanced quality, every family's change CI covers the exact
            change, and passes_release_rule against the rule applied to the exact values (unsafe = passes while
            the exact values refute it)

The audit never reads the oracle: the copy holds only the task. Resumable: a world x seed whose certify output
exists is not certified again. DIR/task_coverage.json and a markdown table (--markdown) at the end.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, positive_int, seed_list
from rlhf.common import setup_torch
from rlhf.data import read_json_object, write_json
from rlhf.errors import InputError, run_cli
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from ..config import RUNS, load_world_config
from ..grade import exact_rule, grade
from ..truth import load_truth, require_built_world, true_quality


def reduced_task(world: Path, dest: Path, gold: int, seed: int) -> Path:
    """dest: WORLD/task with `gold` random gold rows per family (links to everything else)."""
    src = world / "task"
    if (dest / "data" / "gold_calib.jsonl").exists():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        import shutil
        shutil.rmtree(tmp)
    (tmp / "data").mkdir(parents=True)
    for p in src.iterdir():
        if p.name != "data":
            (tmp / p.name).symlink_to(p.resolve())
    for p in (src / "data").iterdir():
        if p.name != "gold_calib.jsonl":
            (tmp / "data" / p.name).symlink_to(p.resolve())
    rows = [json.loads(x) for x in (src / "data" / "gold_calib.jsonl").read_text().splitlines() if x.strip()]
    rng = np.random.default_rng(seed)
    keep = []
    for f in FAMILIES:
        idx = [i for i, r in enumerate(rows) if r["family"] == f]
        if len(idx) < gold:
            raise InputError(f"{src}/data/gold_calib.jsonl: family {f} has {len(idx)} gold rows, fewer than "
                             f"--gold {gold}")
        keep += sorted(rng.choice(idx, gold, replace=False).tolist())
    (tmp / "data" / "gold_calib.jsonl").write_text("".join(json.dumps(rows[i]) + "\n" for i in sorted(keep)))
    tmp.rename(dest)
    return dest


def _covers(ci, v) -> bool | None:
    return None if not ci or None in ci else bool(ci[0] <= v <= ci[1])


def judge(world: Path, out: Path, grade_seed: int, truth_samples: int | None = None) -> dict:
    """world.grade's progress / decision / reporting (no diagnosis), plus every run's per-family change CIs, judged
    against true qualities from `truth_samples` samples a family (default: the world's grade_samples_per_family).
    The truth is itself a Monte-Carlo mean: at 6,000 samples a family change's standard error is about 0.0025,
    which against change CIs 0.02-0.03 wide turns edge cases into misses that are the truth's noise (measured:
    canonical at 50 gold rows, kl002's ember change -0.1877 at 6,000 samples, -0.1959 +- 0.0007 at 60,000)."""
    setup_torch()
    g = grade(world, out, seed=grade_seed, diagnosis="skip")
    answer = read_json_object(out / "answer.json", "a certify output")
    truth = load_truth(world)
    n = truth_samples or load_world_config(world).grade_samples_per_family
    ref = true_quality(load_policy(world / "task" / "policy")[0], truth, n, grade_seed)
    runs = {}
    for name, *_ in RUNS:
        q = true_quality(load_policy(world / "task" / "runs" / name)[0], truth, n, grade_seed)
        claimed = answer["runs"].get(name, {})
        delta = {f: q["per_family"][f] - ref["per_family"][f] for f in FAMILIES}
        per = claimed.get("per_family") or {}
        runs[name] = {"truth_samples": n, "delta_truth": delta,
                      "delta_truth_se": {f: float(np.hypot(q["se"][f], ref["se"][f])) for f in FAMILIES},
                      "balanced_covers": _covers(claimed.get("ci95"), q["balanced"]),
                      "estimate": claimed.get("estimated_true_quality"), "truth": q["balanced"],
                      "family_delta_covers": {f: _covers((per.get(f) or {}).get("delta_ci95"), delta[f])
                                              for f in FAMILIES},
                      "family_covers": {f: _covers((per.get(f) or {}).get("ci95"), q["per_family"][f])
                                        for f in FAMILIES},
                      "passes": claimed.get("passes_release_rule"), "exact_passes": exact_rule(delta)}
    return {"grade": {k: g.get(k) for k in ("progress", "decision", "reporting", "missing")}, "runs": runs,
            "reference_estimate": answer["certification"].get("reference_true_quality"),
            "reference_truth": ref["balanced"]}


def summarise(rows: list[dict]) -> dict:
    rep = [r["judged"]["grade"]["reporting"] for r in rows if r["judged"]["grade"].get("reporting")]
    runs = [v for r in rows for v in r["judged"]["runs"].values()]
    fam = [c for v in runs for c in v["family_delta_covers"].values() if c is not None]
    famq = [c for v in runs for c in v["family_covers"].values() if c is not None]
    bal = [v["balanced_covers"] for v in runs if v["balanced_covers"] is not None]
    return {"worlds": len(rows),
            "shipped_ci_covers": f"{sum(x.get('ci_covers', False) for x in rep)}/{len(rep)}",
            "shipped_mean_abs_error": float(np.mean([x["abs_error"] for x in rep])) if rep else None,
            "families_improved_right": f"{sum(x.get('families_improved_right', False) for x in rep)}/{len(rep)}",
            "runs_balanced_covers": f"{sum(bal)}/{len(bal)}",
            "runs_family_quality_covers": f"{sum(famq)}/{len(famq)}",
            "runs_family_delta_covers": f"{sum(fam)}/{len(fam)}",
            "unsafe_passes": sum(1 for v in runs if v["passes"] and not v["exact_passes"]),
            "exact_passes": sum(1 for v in runs if v["exact_passes"]),
            "confirmed_passes": sum(1 for v in runs if v["passes"] and v["exact_passes"])}


def markdown(rows: list[dict], s: dict) -> str:
    L = ["| world | seed | shipped estimate / truth | CI covers | families improved right | runs: balanced CI covers "
         "| family change CIs cover | passes / exact / unsafe |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        j = r["judged"]
        rep = j["grade"].get("reporting") or {}
        runs = j["runs"].values()
        fam = [c for v in runs for c in v["family_delta_covers"].values() if c is not None]
        L.append(f"| {r['world']} | {r['seed']} | {rep.get('estimate', float('nan')):.4f} / {rep.get('true', float('nan')):.4f} | "
                 f"{rep.get('ci_covers')} | {rep.get('families_improved_right')} | "
                 f"{sum(bool(v['balanced_covers']) for v in runs)}/{len(runs)} | {sum(fam)}/{len(fam)} | "
                 f"{sum(bool(v['passes']) for v in runs)} / {sum(v['exact_passes'] for v in runs)} / "
                 f"{sum(1 for v in runs if v['passes'] and not v['exact_passes'])} |")
    L += ["", f"All: shipped CI covers {s['shipped_ci_covers']}, mean |error| {s['shipped_mean_abs_error']:.4f}, "
              f"families improved right {s['families_improved_right']}; runs' balanced CIs cover "
              f"{s['runs_balanced_covers']}, family quality CIs {s['runs_family_quality_covers']}, family change "
              f"CIs {s['runs_family_delta_covers']}; passes confirmed {s['confirmed_passes']} of "
              f"{s['exact_passes']} exact, unsafe {s['unsafe_passes']}"]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.task_coverage", description=first_paragraph(__doc__))
    ap.add_argument("worlds", nargs="+", help="built worlds (python -m world build)")
    ap.add_argument("--out", required=True, help="directory: tasks/, certify outputs, task_coverage.json")
    ap.add_argument("--gold", type=positive_int, default=25, help="gold rows per family kept (default 25)")
    ap.add_argument("--seeds", type=seed_list, default=[0], help="gold draws and certify seeds, e.g. 0,1")
    ap.add_argument("--grade-seed", type=positive_int, default=12345)
    ap.add_argument("--truth-samples", type=positive_int, default=48000,
                    help="samples a family for the runs' true qualities the CIs are judged against (default 48,000: "
                         "a change's Monte-Carlo SE about 0.001; the world's own 6,000 leave about 0.0025)")
    ap.add_argument("--preset", choices=["full", "small"], default="full", help="audit.certify's preset (small: "
                    "tiny worlds and tests)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    worlds = [require_built_world(w) for w in a.worlds]
    out = Path(a.out)
    check_out_file(out / "task_coverage.json")
    rows = []
    for w in worlds:
        for s in a.seeds:
            name = f"{w.name}-g{a.gold}-s{s}"
            task = reduced_task(w, out / "tasks" / name, a.gold, s)
            cert = out / "certify" / name
            if not (cert / "answer.json").exists():
                t0 = time.time()
                print(f"[task_coverage] certify {name}", flush=True)
                r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(task), "--out", str(cert),
                                    "--seed", str(s), "--stress-examples", "0", "--no-figures", "--preset", a.preset],
                                   capture_output=True, text=True)
                (out / "certify").mkdir(parents=True, exist_ok=True)
                (out / "certify" / f"{name}.log").write_text(r.stdout + r.stderr)
                if r.returncode != 0:
                    raise RuntimeError(f"audit.certify on {task} exited {r.returncode}: see {name}.log")
                print(f"[task_coverage] certified {name} in {time.time() - t0:.0f}s", flush=True)
            rows.append({"world": w.name, "seed": s, "gold": a.gold, "judged": judge(w, cert, a.grade_seed, a.truth_samples)})
    s = summarise(rows)
    write_json(out / "task_coverage.json", {"gold": a.gold, "rows": rows, "summary": s})
    print(markdown(rows, s) if a.markdown else json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.task_coverage"))
