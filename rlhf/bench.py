"""Benchmark: seconds per RL step (batch 32 prompts x 8 samples) for the fast path and the naive reference
path (full recompute per sampled token), side by side in one run, and their ratio.

python -m rlhf.bench [--steps 20 --threads 2 --policy DIR --reward-model DIR]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from .common import setup_torch
from .data import write_jsonl
from .model import Policy, default_config, save_policy
from .reward_model import RewardModel, default_config as rm_default_config, save_rm
from .train_rl import RLConfig, RLTrainer
from .vocab import FAMILIES


def make_fixture(d: Path, seed: int = 0):
    torch.manual_seed(seed)
    save_policy(Policy(), default_config(), d / "policy")
    save_rm(RewardModel(), rm_default_config(), d / "rm")
    g = torch.Generator().manual_seed(seed)
    write_jsonl(d / "prompts.jsonl", [{"id": f"p{i}", "family": FAMILIES[i % 6],
                                       "attrs": torch.randint(8, (4,), generator=g).tolist()} for i in range(600)])
    return str(d / "policy"), str(d / "rm"), str(d / "prompts.jsonl")


def time_steps(cfg: RLConfig, fast: bool, steps: int, warmup: int = 3) -> float:
    tr = RLTrainer(cfg, fast=fast)
    for _ in range(warmup):
        tr.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        tr.step()
    return (time.perf_counter() - t0) / steps


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rlhf.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy")
    ap.add_argument("--reward-model")
    ap.add_argument("--prompts")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    setup_torch(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        pol, rm, prompts = make_fixture(Path(tmp), a.seed)
        cfg = RLConfig(policy_init=a.policy or pol, policy_ref=a.policy or pol, reward_model=a.reward_model or rm,
                       prompt_file=a.prompts or prompts, batch_prompts=32, samples_per_prompt=8, seed=a.seed)
        naive = time_steps(cfg, fast=False, steps=a.steps)
        fast = time_steps(cfg, fast=True, steps=a.steps)
    res = {"batch": "32x8", "threads": a.threads, "steps": a.steps, "naive_s_per_step": round(naive, 4),
           "fast_s_per_step": round(fast, 4), "speedup": round(naive / fast, 2)}
    print(f"RL step, batch 32x8, {a.threads} threads, {a.steps} steps each")
    print(f"  naive (full recompute per token): {naive:.4f} s/step")
    print(f"  fast  (kv-cache decoding)       : {fast:.4f} s/step")
    print(f"  speedup                         : {naive / fast:.2f}x")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
