"""Where the gold-free diagnostic's noise comes from, on one RM: its eval sample, its stand-in rubric's draw, or its
RL runs' seed (docs/results.md, "Where one risk's noise comes from").

python -m world.experiments.diagnostic_noise --task TASK --rm-dir DIR [--seeds 0,1,2 --eval-draws 4 --eval-prompts 600,4800]

For seeds s0, s1, ...: the diagnostic's two runs with the stand-in of seed s0 and RL seed s (the RL seed's spread),
and with the stand-in of seed s and RL seed s0 (the stand-in's spread); on (s0, s0), each family's stand-in quality
re-measured on --eval-draws fresh prompt draws of each size (the eval sample's spread). Prints the sd of each
family's kept share (gain under the RM run / gain under the stand-in run) for each source. Uses no gold and no
oracle; it lives in world/ with the other research benches. Each run pair costs one diagnostic (~25 s, 2 threads).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from audit.task import diagnostic as D
from audit.task.recovery import uniform_prompts
from rlhf.common import setup_torch
from rlhf.data import read_jsonl, write_json
from rlhf.errors import run_cli
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, count_list, positive_int, seed_list


def kept(prep, pol_rm, pol_rub, cfg, eval_prompts=None) -> dict:
    """Each family's kept share (the diagnostic's "ratio"), measured on prep's eval prompts or on eval_prompts
    (the reference's stand-in quality re-measured on them too)."""
    if eval_prompts:
        prep = {**prep, "eval_prompts": eval_prompts,
                "q_ref": D._quality(prep["ref"], prep["rubrics"], eval_prompts, cfg.seed)}
    return {f: v["ratio"] for f, v in D._finish(prep, pol_rm, pol_rub, cfg, 0.0)["families"].items()}


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.diagnostic_noise", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--task", required=True, help="a task dir (policy/, data/prompts_train.jsonl)")
    ap.add_argument("--rm-dir", required=True, help="the RM (rm.safetensors, config.json, train.jsonl)")
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--eval-draws", type=positive_int, default=4)
    ap.add_argument("--eval-prompts", type=count_list, default=[600, 4800],
                    help="eval sizes per family to re-measure at")
    ap.add_argument("--out", default=None, help="JSON with every kept share")
    ap.add_argument("--quick", action="store_true", help="tiny settings (tests, smoke runs)")
    a = ap.parse_args(argv)
    seeds, sizes = a.seeds, a.eval_prompts
    check_out_file(a.out, "the --out file")
    if len(seeds) < 2 or a.eval_draws < 2:
        ap.error("need at least two seeds and two eval draws to measure a spread")
    task = Path(a.task)
    policy_dir, prompts = task / "policy", task / "data" / "prompts_train.jsonl"
    for p in (policy_dir / "config.json", prompts, Path(a.rm_dir) / "rm.safetensors"):
        if not p.is_file():
            ap.error(f"{p}: file not found")
    setup_torch()
    ref, _ = load_policy(policy_dir)
    fams = sorted({r["family"] for r in read_jsonl(prompts)}, key=FAMILIES.index)
    small = dict(steps=6, batch_prompts=8, samples_per_prompt=4, prior_samples_per_family=300,
                 eval_prompts_per_family=60) if a.quick else {}
    cfgs = {s: D.DiagnosticConfig(seed=s, **small) for s in seeds}
    preps = {}

    def prep(s):
        if s not in preps:
            preps[s] = {**D._prepare(a.rm_dir, ref, fams, cfgs[s]), "ref": ref}
        return preps[s]

    def runs(p, r):
        print(f"[noise] stand-in seed {p}, RL seed {r}", file=sys.stderr, flush=True)
        c = cfgs[r]
        return (D._short_run(c, policy_dir, prompts, reward_model=str(a.rm_dir)),
                D._short_run(c, policy_dir, prompts, reward_fn=D.rubric_reward(prep(p)["rubrics"])))

    s0 = seeds[0]
    base = runs(s0, s0)
    res = {"rl_seed": {s0: kept(prep(s0), *base, cfgs[s0])}, "stand_in_seed": {}, "eval": {}}
    res["stand_in_seed"][s0] = res["rl_seed"][s0]
    for s in seeds[1:]:
        res["rl_seed"][s] = kept(prep(s0), *runs(s0, s), cfgs[s0])
        res["stand_in_seed"][s] = kept(prep(s), *runs(s, s0), cfgs[s])
    rng = np.random.default_rng(10_000 + s0)
    for n in sizes:
        res["eval"][n] = [kept(prep(s0), *base, dataclasses.replace(cfgs[s0], seed=s0 + 100 + d),
                               {f: uniform_prompts(f, n, rng) for f in fams}) for d in range(a.eval_draws)]
    sd = lambda xs: float(np.std(xs, ddof=1))
    print(f"kept share sd per family: eval draws ({a.eval_draws} each), stand-in seeds, RL seeds ({len(seeds)} each)")
    print(f"{'family':7s} " + " ".join(f"eval {n:>5d}" for n in sizes) + "  stand-in     RL")
    for f in fams:
        print(f"{f:7s} " + " ".join(f"{sd([e[f] for e in res['eval'][n]]):10.3f}" for n in sizes)
              + f" {sd([k[f] for k in res['stand_in_seed'].values()]):9.3f} {sd([k[f] for k in res['rl_seed'].values()]):6.3f}")
    # how far the stand-ins of the other seeds are from seed s0's: positions whose key differs, LUT entries that do
    diffs = {str(s): {f: [int((preps[s]["rubrics"][f].assign != preps[s0]["rubrics"][f].assign).sum()),
                          int((preps[s]["rubrics"][f].lut != preps[s0]["rubrics"][f].lut).sum())] for f in fams}
             for s in seeds[1:]}
    print(f"stand-in vs seed {s0}'s (keys differing of 8, LUT entries of 64): " + "; ".join(
        f"{f} " + ", ".join(f"{d[f][0]}/{d[f][1]}" for d in diffs.values()) for f in fams))
    if a.out:
        write_json(a.out, {"config": vars(a), "stand_in_differences": diffs,
                           **{k: {str(s): v for s, v in d.items()} for k, d in res.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.diagnostic_noise"))
