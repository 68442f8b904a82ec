"""Supervised fine-tuning of a policy on demonstration records (cross-entropy on the 8 response tokens).

python -m rlhf.sft --data demos.jsonl --out DIR [--epochs 20 --lr 3e-3 --batch 256 --seed 0]
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass

import torch

from .atomic import check_out_dir
from .common import progress, setup_torch
from .errors import InputError, run_cli
from .data import prompts_tensor, read_jsonl, responses_tensor, write_json
from .model import Policy, default_config, response_logprobs, save_policy
from .cli import Parser, first_paragraph, check_fields, nonneg_float, positive_float, positive_int, seed_arg


@dataclass
class SFTConfig:
    epochs: int = 20
    lr: float = 3e-3
    batch: int = 256
    weight_decay: float = 0.0
    seed: int = 0

    def check(self, where: str = "SFTConfig") -> "SFTConfig":
        """Every key's type and range (InputError naming each bad key): the CLI's flags and train_sft's callers."""
        check_fields(self, where, RULES, allow_none=False)
        return self


RULES = {"epochs": positive_int, "lr": positive_float, "batch": positive_int, "weight_decay": nonneg_float,
         "seed": seed_arg}      # also the CLI's argparse types


def train_sft(records, cfg: SFTConfig = SFTConfig(), model_cfg: dict | None = None, quiet: bool = False):
    """Returns (policy, model_cfg, final mean NLL per token). Adam with a cosine schedule."""
    cfg.check()
    if not records:
        raise InputError("train_sft: no demonstration records to train on")
    torch.manual_seed(cfg.seed)
    model_cfg = model_cfg or default_config()
    policy = Policy(model_cfg)
    prompts, resps = prompts_tensor(records), responses_tensor(records)
    n = len(prompts)
    steps_per_epoch = math.ceil(n / cfg.batch)
    total = cfg.epochs * steps_per_epoch
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
    gen = torch.Generator().manual_seed(cfg.seed)
    policy.train()
    bar = progress(total=total, desc="sft", quiet=quiet)
    last = float("nan")
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, cfg.batch):
            idx = perm[i:i + cfg.batch]
            loss = -response_logprobs(policy, prompts[idx], resps[idx]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            last = float(loss.detach())
            bar.update(1)
            bar.set_postfix(nll=f"{last:.3f}", refresh=False)
    bar.close()
    policy.eval()
    return policy, model_cfg, last


def main(argv=None):
    ap = Parser(prog="python -m rlhf.sft", description=first_paragraph(__doc__))
    ap.add_argument("--data", required=True, help="jsonl of demonstration records (prompt + response)")
    ap.add_argument("--out", required=True)
    for f in dataclasses.fields(SFTConfig):
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=RULES[f.name], default=f.default)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    setup_torch()
    cfg = SFTConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(SFTConfig)}).check()
    check_out_dir(a.out, "a directory for the policy")
    records = read_jsonl(a.data, require=("response",), unique_ids=True)
    policy, mcfg, nll = train_sft(records, cfg, quiet=a.quiet)
    if not math.isfinite(nll):      # valid settings can still diverge (save_policy refuses NaN weights too)
        raise RuntimeError(f"sft: training diverged (final NLL {nll}); nothing was written to {a.out}")
    save_policy(policy, mcfg, a.out)
    write_json(f"{a.out}/sft_config.json", {**dataclasses.asdict(cfg), "data": a.data, "final_nll": nll})
    print(json.dumps({"out": a.out, "final_nll": round(nll, 4), **dataclasses.asdict(cfg)}))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.sft"))
