"""The stress claim's hazard labels against SPEC §3's own, on a built world (it reads the oracle: world/, not audit/).

python -m world.experiments.stress_labels --world WORLD --stress-dir OUT/.cache/<key>/stress [--seed 0 --steps 1500
                              --n-eval 3000 --jobs 2 --cache-dir DIR --out JSON]

`diagnostic.flags_synthetic_corruption` (audit.task.stress) labels each (batch, family) of its stress stage without gold or
oracle: a short run (StressConfig: 250 steps at lr 1e-3) against the batch's RM and one against the rubric the
audit recovered, both scored with the recovered rubric's posterior. SPEC §3's rule is 1,500 steps at lr 3e-4, scored
with the true rubric.
This runs SPEC's recipe (world.hazard.strong_recipe) on every RM a certify run's stress stage cached, and once against
the true rubric, labels each pair by the one rule (audit.core.hazard.hazard_labels), and reports how many of the claim's
labels agree and the diagnostic's flag accuracy against both sets of labels. The 1,500-step gains are cached
(world.hazard.rl_gain) under --cache-dir; one run per worker process, one thread each.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from audit.core.hazard import hazard_labels
from rlhf.data import read_json_object, write_json
from rlhf.errors import InputError, run_cli
from rlhf.vocab import FAMILIES

from ..hazard import _worker, strong_recipe
from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from ..truth import require_built_world


def stress_results(stress_dir: Path) -> dict:
    """{batch key: the stress stage's stored result} for every batch whose RM is cached beside it."""
    stress_dir = Path(stress_dir)
    if not stress_dir.is_dir():
        raise InputError(f"{stress_dir}: not a directory (expected OUT/.cache/<key>/stress of a certify run)")
    out = {}
    for p in sorted(stress_dir.glob("*.json")):
        if p.name == "rubric_gain.json":
            continue
        res = read_json_object(p, "a stress batch's stored result (audit.certify's stress stage)")
        if "hazard" in res and (stress_dir / f"rm-{p.stem}" / "rm.safetensors").is_file():
            out[p.stem] = res
    if not out:
        raise InputError(f"{stress_dir}: no stress batch with its RM (expected <key>.json beside rm-<key>/)")
    return out


def compare_labels(results: dict, oracle_gains: dict, rubric_gain: dict) -> dict:
    """Per pair: the claim's label, SPEC's label from the oracle gains, the diagnostic's flag; and the counts."""
    rows = []
    for key, res in results.items():
        spec_labels = hazard_labels(oracle_gains[key], rubric_gain)
        for f in FAMILIES:
            rows.append({"batch": key, "family": f, "corrupted": f in res["spec"], "claim_label": res["hazard"][f],
                         "spec_label": spec_labels[f], "flag": res["flag"][f], "risk": res["risk"][f],
                         "claim_gain": res["gain"][f], "claim_rubric_gain": res["rubric_gain"][f],
                         "oracle_gain": oracle_gains[key][f], "oracle_rubric_gain": rubric_gain[f]})
    n = len(rows)
    return {"pairs": n,
            "labels_agree": sum(r["claim_label"] == r["spec_label"] for r in rows),
            "hazardous_claim": sum(r["claim_label"] for r in rows),
            "hazardous_spec": sum(r["spec_label"] for r in rows),
            "flags_right_by_claim_labels": sum(r["flag"] == r["claim_label"] for r in rows),
            "flags_right_by_spec_labels": sum(r["flag"] == r["spec_label"] for r in rows),
            "rows": rows}


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.stress_labels", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--world", required=True, help="the built world (task/ and oracle/) the certify run audited")
    ap.add_argument("--stress-dir", required=True, help="OUT/.cache/<key>/stress of that certify run")
    ap.add_argument("--seed", type=seed_arg, default=0,
                    help="seed of SPEC's RL runs and their eval prompts (another seed measures the rule's own noise)")
    ap.add_argument("--steps", type=positive_int, default=1500, help="SPEC §3's hazard recipe: 1,500 steps at lr 3e-4")
    ap.add_argument("--batch-prompts", type=positive_int, default=32)
    ap.add_argument("--samples-per-prompt", type=positive_int, default=8)
    ap.add_argument("--n-eval", type=positive_int, default=3000,
                    help="fresh prompts a family for the exact quality changes")
    ap.add_argument("--jobs", type=positive_int, default=2, help="worker processes, one thread each")
    ap.add_argument("--cache-dir", default=None, help="1,500-step gains cache (default WORLD/stress_label_cache)")
    ap.add_argument("--out", default=None, help="also write the comparison here (JSON)")
    a = ap.parse_args(argv)
    world = require_built_world(a.world)
    results = stress_results(Path(a.stress_dir))
    check_out_file(a.out, "the --out file")
    recipe = dataclasses.asdict(strong_recipe(world / "task", a.steps, a.batch_prompts, a.samples_per_prompt, a.seed))
    cache = str(Path(a.cache_dir) if a.cache_dir else world / "stress_label_cache")
    keys = list(results)
    jobs = [(str(world), str(Path(a.stress_dir) / f"rm-{k}"), recipe, a.n_eval, cache) for k in keys]
    jobs.append((str(world), None, recipe, a.n_eval, cache))           # against the true rubric
    print(f"[stress_labels] {len(jobs)} runs of {a.steps} steps ({len(keys)} RMs and the true rubric), "
          f"{a.jobs} at a time; cached in {cache}", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(a.jobs, mp_context=get_context("spawn")) as pool:
        gains = []
        for i, g in enumerate(pool.map(_worker, jobs), 1):
            gains.append(g["gain"])
            print(f"[stress_labels] run {i}/{len(jobs)} done", file=sys.stderr, flush=True)
    res = compare_labels(results, dict(zip(keys, gains)), gains[-1])
    res["config"] = {"world": str(world), "stress_dir": str(a.stress_dir), "recipe": recipe, "n_eval": a.n_eval}
    for r in res["rows"]:
        if r["claim_label"] != r["spec_label"] or r["flag"] != r["spec_label"]:
            print(f"{r['batch'][:8]} {r['family']:6s} claim {r['claim_label']!s:5s} SPEC {r['spec_label']!s:5s} "
                  f"flag {r['flag']!s:5s} risk {r['risk']:.3f}  claim gains {r['claim_gain']:+.3f}/"
                  f"{r['claim_rubric_gain']:+.3f}  oracle gains {r['oracle_gain']:+.3f}/{r['oracle_rubric_gain']:+.3f}")
    n = res["pairs"]
    print(f"{n} pairs: the claim's labels agree with SPEC's on {res['labels_agree']}/{n} (hazardous: claim "
          f"{res['hazardous_claim']}, SPEC {res['hazardous_spec']}); the diagnostic's flags right on "
          f"{res['flags_right_by_claim_labels']}/{n} by the claim's labels, {res['flags_right_by_spec_labels']}/{n} "
          f"by SPEC's")
    if a.out:
        write_json(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.stress_labels"))
