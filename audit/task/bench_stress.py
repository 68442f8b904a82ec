"""Benchmark: seconds per stress batch (audit/task/stress.py: the batch's RM re-trained, its hazard-label RL run, the
diagnostic on it; the rubric run shared by all batches counted in) batch by batch and stacked, side by side in
one run on one task, from cold caches. Also prints how far each path's hazard labels and flags agree with the
first path's, which they should up to the noise of runs that differ by float rounding. Paths: serial (one batch
after another, as diagnose() on each RM), stacked (the default: stacked models, the diagnostics' stand-in runs
shared between batches), stacked-unshared (stacked, each batch its own stand-in run).

python -m audit.bench_stress --task DIR [--examples 1 --seed 0 --threads 2 --paths serial,stacked]
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from rlhf.common import setup_torch
from rlhf.errors import run_cli

from .diagnostic import DiagnosticConfig
from .recovery import RecoveryConfig, recover_rubrics
from .stress import StressConfig, stress
from .task_dir import load_task
from rlhf.cli import Parser, first_paragraph, nonneg_int, positive_int, seed_arg


PATHS = {"serial": dict(stacked=False), "stacked": dict(stacked=True, share_stand_in_runs=True),
         "stacked-unshared": dict(stacked=True, share_stand_in_runs=False)}


def main(argv=None):
    ap = Parser(prog="python -m audit.bench_stress", description=first_paragraph(__doc__))
    ap.add_argument("--task", required=True)
    ap.add_argument("--examples", type=nonneg_int, default=1, help="corrupted batches besides the clean one")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--paths", default="serial,stacked", help=f"comma-separated, of {', '.join(PATHS)}")
    ap.add_argument("--min-replaced-share", type=float, default=StressConfig.min_replaced_share,
                    help="the drawn corruptions' smallest replaced share (StressConfig.min_replaced_share)")
    a = ap.parse_args(argv)
    paths = a.paths.split(",")
    if not paths or any(p not in PATHS for p in paths):
        ap.error(f"--paths {a.paths}: expected a comma-separated list of {', '.join(PATHS)}")
    setup_torch(a.threads)
    task = load_task(a.task)
    t = time.perf_counter()
    rubrics = recover_rubrics(task, task.load_policy(), RecoveryConfig(seed=a.seed))
    print(f"rubric recovery (shared, not counted): {time.perf_counter() - t:.1f}s", flush=True)
    cfg = StressConfig(examples=a.examples, min_replaced_share=a.min_replaced_share, seed=a.seed)
    dcfg = DiagnosticConfig(seed=a.seed)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            t = time.perf_counter()
            res = stress(task, rubrics, dataclasses.replace(cfg, **PATHS[path]), dcfg,
                         Path(tmp) / path, say=lambda s: None)
            secs = time.perf_counter() - t
            n = len(res["results"])
            out[path] = {"batches": n, "s_total": round(secs, 1), "s_per_batch": round(secs / n, 1),
                         "specs": [r["spec"] for r in res["results"]], "risk": [r["risk"] for r in res["results"]],
                         "hazard": [r["hazard"] for r in res["results"]], "flag": [r["flag"] for r in res["results"]]}
            print(f"{path:8s}: {n} batches in {secs:.1f}s = {secs / n:.1f} s/batch", flush=True)
    first = out[paths[0]]
    for path in paths[1:]:
        k = out[path]

        def same(key):
            return sum(x[f] == y[f] for x, y in zip(first[key], k[key]) for f in x)
        pairs = sum(len(x) for x in first["hazard"])
        print(f"{path} against {paths[0]}: {first['s_per_batch'] / k['s_per_batch']:.2f}x per batch; hazard labels "
              f"equal on {same('hazard')}/{pairs}, flags on {same('flag')}/{pairs}")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m audit.bench_stress"))
