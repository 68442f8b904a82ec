"""python -m world.experiments.reward_ablation WORLD [--rewards rubric,rm,hybrid] [--rm-families anvil,birch] [--seed 0]

What the audit's own policy would ship under other rewards (docs/results.md, the design argument of
audit/task/train.py). Same recipe as `make certify`'s own training (audit.task.train.OwnTrainConfig), from the task's
reference, every family; only the reward differs:

  rubric   the posterior-expected rubric score (what make certify trains on)
  rm       the task's reward model
  hybrid   the RM on --rm-families (those the audit found safe to optimise: RM agrees with the experts and the
           diagnostic does not flag them), the posterior-expected rubric on the others

Each policy's exact true quality comes from the world's oracle (so this lives in world/, not audit/).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from rlhf.common import setup_torch
from rlhf.data import write_json
from rlhf.errors import run_cli
from rlhf.reward_model import load_rm, score
from rlhf.train_rl import RLTrainer
from rlhf.vocab import FAMILIES

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from ..truth import load_truth, require_built_world, true_quality

REWARDS = ("rubric", "rm", "hybrid")


def reward_fn(kind: str, tables, rm, rm_families: set):
    from audit.task.train import table_reward
    rubric = table_reward(tables)
    if kind == "rubric":
        return rubric

    def fn(records, prompts_rep, responses):
        r_rm = score(rm, prompts_rep, responses)
        if kind == "rm":
            return r_rm
        use_rm = torch.tensor([r["family"] in rm_families for r in records])
        return torch.where(use_rm, r_rm, rubric(records, prompts_rep, responses))
    return fn


def reward_inputs(world: Path, seed: int):
    """What every reward kind is built from, computed once: the posterior-expected rubric tables and the RM."""
    from audit.task.recovery import RecoveryConfig, recover_rubrics
    from audit.task.task_dir import load_task
    from audit.task.train import reward_tables

    task = load_task(world / "task")
    rubrics = recover_rubrics(task, task.load_policy(), RecoveryConfig(seed=seed))
    return reward_tables({f: r.posterior for f, r in rubrics.items()}), load_rm(world / "task" / "reward_model")[0]


def run(world: Path, kind: str, tables, rm, rm_families: set, seed: int, n_eval: int) -> dict:
    from audit.task.train import OwnTrainConfig, rl_config

    cfg = OwnTrainConfig(seed=seed)
    t = time.time()
    tr = RLTrainer(rl_config(world / "task", cfg), reward_fn=reward_fn(kind, tables, rm, rm_families))
    for _ in range(cfg.steps):
        tr.step()
    tr.policy.eval()
    q = true_quality(tr.policy, load_truth(world), n_eval, 12345)
    return {"reward": kind, "rm_families": sorted(rm_families) if kind == "hybrid" else None,
            "exact_balanced": round(q["balanced"], 4),
            "exact_per_family": {f: round(q["per_family"][f], 4) for f in FAMILIES},
            "train_s": round(time.time() - t, 1), "config": dataclasses.asdict(cfg)}


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.reward_ablation", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("world")
    ap.add_argument("--rewards", default=",".join(REWARDS))
    ap.add_argument("--rm-families", default="", help="families rewarded by the RM under 'hybrid'")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--n-eval", type=positive_int, default=3000, help="fresh prompts a family for the exact quality")
    ap.add_argument("--out", default=None, help="JSON with every row")
    a = ap.parse_args(argv)
    world = require_built_world(a.world)       # its oracle too: a corrupt truth.json is refused before training
    check_out_file(a.out, "the --out file")
    kinds = [k for k in a.rewards.split(",") if k]
    fams = {f for f in a.rm_families.split(",") if f}
    if bad := [k for k in kinds if k not in REWARDS] + sorted(fams - set(FAMILIES)):
        ap.error(f"unknown reward or family: {', '.join(bad)} (rewards: {', '.join(REWARDS)})")
    setup_torch()
    tables, rm = reward_inputs(world, a.seed)
    rows = []
    for k in kinds:
        rows.append(run(world, k, tables, rm, fams, a.seed, a.n_eval))
        r = rows[-1]
        print(f"{k:7s} exact {r['exact_balanced']:.4f} min family {min(r['exact_per_family'].values()):.4f} "
              + " ".join(f"{f} {v:.3f}" for f, v in r["exact_per_family"].items()) + f" ({r['train_s']}s)",
              flush=True)
    if a.out:
        write_json(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.reward_ablation"))
