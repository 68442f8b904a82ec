"""Benchmark, side by side in one run: seconds per RL step (batch 32 prompts x 8 samples) for the fast path and
the naive reference path (full recompute per sampled token); then K runs stacked as one model (rlhf/stacked.py)
against K separate runs, per member; then reward-model training (12,000 rows, batch 256, per epoch), one RM
against K stacked, per RM. audit.bench_stress times whole stress batches on a task.

python -m rlhf.bench [--steps 20 --threads 2 --stack 2,4,8 --rm-epochs 1 --policy DIR --reward-model DIR]
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from .common import setup_torch
from .errors import run_cli
from .data import write_jsonl
from .model import Policy, default_config, save_policy
from .reward_model import RewardModel, default_config as rm_default_config, save_rm
from .train_rl import RLConfig, RLTrainer
from .vocab import FAMILIES
from .cli import Parser, first_paragraph, positive_int, seed_arg


def make_fixture(d: Path, seed: int = 0):
    torch.manual_seed(seed)
    save_policy(Policy(), default_config(), d / "policy")
    save_rm(RewardModel(), rm_default_config(), d / "rm")
    g = torch.Generator().manual_seed(seed)
    write_jsonl(d / "prompts.jsonl", [{"id": f"p{i}", "family": FAMILIES[i % 6],
                                       "attrs": torch.randint(8, (4,), generator=g).tolist()} for i in range(600)])
    return str(d / "policy"), str(d / "rm"), str(d / "prompts.jsonl")


def _per_step(trainer, steps: int, warmup: int) -> float:
    """Seconds per trainer.step(), after `warmup` untimed steps."""
    for _ in range(warmup):
        trainer.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    return (time.perf_counter() - t0) / steps


def time_steps(cfg: RLConfig, fast: bool, steps: int, warmup: int = 3) -> float:
    return _per_step(RLTrainer(cfg, fast=fast), steps, warmup)


def time_stacked(cfgs, steps: int, warmup: int = 2) -> float:
    from .train_rl_stacked import StackedRLTrainer
    return _per_step(StackedRLTrainer(cfgs), steps, warmup)


def rm_rows(n: int, seed: int) -> list[dict]:
    from .vocab import CONTENT
    g = torch.Generator().manual_seed(seed)
    attrs = torch.randint(8, (n, 4), generator=g).tolist()
    resp = torch.randint(24, (n, 8), generator=g).tolist()
    y = torch.rand(n, generator=g).tolist()
    return [{"id": f"r{i}", "family": FAMILIES[i % 6], "attrs": a, "response": [CONTENT[t] for t in r], "label": v}
            for i, (a, r, v) in enumerate(zip(attrs, resp, y))]


def time_rm(K: int, epochs: int, rows: int = 12000) -> float:
    """Seconds per RM per epoch: train_rm (K=0) or K RMs stacked (train_rms)."""
    from .train_rm import RMTrainConfig, train_rm, train_rms
    data = [rm_rows(rows, s) for s in range(max(K, 1))]
    t0 = time.perf_counter()
    if K == 0:
        train_rm(data[0], RMTrainConfig(epochs=epochs), quiet=True)
    else:
        train_rms(data, [RMTrainConfig(epochs=epochs, seed=s) for s in range(K)], quiet=True)
    return (time.perf_counter() - t0) / epochs / max(K, 1)


def main(argv=None):
    ap = Parser(prog="python -m rlhf.bench", description=first_paragraph(__doc__))
    ap.add_argument("--steps", type=positive_int, default=20)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--policy")
    ap.add_argument("--reward-model")
    ap.add_argument("--prompts")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--stack", default="2,4,8", help="member counts of the stacked rows ('' = none)")
    ap.add_argument("--rm-epochs", type=int, default=1, help="epochs per RM timing (0 = no RM rows)")
    a = ap.parse_args(argv)
    stack = [int(k) for k in a.stack.split(",") if k.strip()]
    setup_torch(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        pol, rm, prompts = make_fixture(Path(tmp), a.seed)
        cfg = RLConfig(policy_init=a.policy or pol, policy_ref=a.policy or pol, reward_model=a.reward_model or rm,
                       prompt_file=a.prompts or prompts, batch_prompts=32, samples_per_prompt=8, seed=a.seed)
        naive = time_steps(cfg, fast=False, steps=a.steps)
        fast = time_steps(cfg, fast=True, steps=a.steps)
        print(f"RL step, batch 32x8, {a.threads} threads, {a.steps} steps each")
        print(f"  naive (full recompute per token): {naive:.4f} s/step")
        print(f"  fast  (kv-cache decoding)       : {fast:.4f} s/step")
        print(f"  speedup                         : {naive / fast:.2f}x", flush=True)
        res = {"batch": "32x8", "threads": a.threads, "steps": a.steps, "naive_s_per_step": round(naive, 4),
               "fast_s_per_step": round(fast, 4), "speedup": round(naive / fast, 2), "stacked": {}, "rm": {}}
        for K in stack:
            import dataclasses
            per = time_stacked([dataclasses.replace(cfg, seed=a.seed + k) for k in range(K)],
                               max(2, a.steps // K)) / K
            res["stacked"][K] = round(per, 4)
            print(f"  stacked x{K:<2d} (per member)       : {per:.4f} s/step  ({fast / per:.2f}x the single run)",
                  flush=True)
    if a.rm_epochs:
        print(f"RM training, 12,000 rows, batch 256, per RM per epoch ({a.rm_epochs} epoch(s) each)")
        single = time_rm(0, a.rm_epochs)
        res["rm"]["single_s_per_epoch"] = round(single, 3)
        print(f"  one RM (train_rm)               : {single:.3f} s", flush=True)
        for K in stack:
            per = time_rm(K, a.rm_epochs)
            res["rm"][f"stacked_x{K}_s_per_epoch"] = round(per, 3)
            print(f"  stacked x{K:<2d} (per RM)           : {per:.3f} s  ({single / per:.2f}x)", flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.bench"))
