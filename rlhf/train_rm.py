"""Train a reward model with MSE on labelled records (Adam, cosine schedule).

python -m rlhf.train_rm --data JSONL --out DIR [--epochs 40 --lr 2e-3 --batch 256 --seed 0]
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass

import torch

from .atomic import check_out_dir
from .common import file_sha256, progress, setup_torch
from .errors import InputError, run_cli
from .data import labels_tensor, prompts_tensor, read_jsonl, responses_tensor, write_json
from .reward_model import RewardModel, default_config, save_rm
from .cli import Parser, first_paragraph, check_fields, positive_float, positive_int, seed_arg


@dataclass
class RMTrainConfig:
    epochs: int = 40
    lr: float = 2e-3
    batch: int = 256
    seed: int = 0

    def check(self, where: str = "RMTrainConfig") -> "RMTrainConfig":
        """Every key's type and range (InputError naming each bad key): the CLI's flags and train_rm's callers."""
        check_fields(self, where, RULES, allow_none=False)
        return self


RULES = {"epochs": positive_int, "lr": positive_float, "batch": positive_int, "seed": seed_arg}   # also the CLI's types


def train_rm(records, cfg: RMTrainConfig = RMTrainConfig(), model_cfg: dict | None = None, quiet: bool = False):
    """Returns (rm, model_cfg, final epoch's mean training MSE)."""
    cfg.check()
    if not records:
        raise InputError("train_rm: no labelled records to train on")
    torch.manual_seed(cfg.seed)
    model_cfg = model_cfg or default_config()
    rm = RewardModel(model_cfg)
    seq = torch.cat([prompts_tensor(records), responses_tensor(records)], 1)
    y = labels_tensor(records)
    n = len(seq)
    total = cfg.epochs * math.ceil(n / cfg.batch)
    opt = torch.optim.Adam(rm.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
    gen = torch.Generator().manual_seed(cfg.seed)
    rm.train()
    bar = progress(total=total, desc="train_rm", quiet=quiet)
    epoch_mse = float("nan")
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen)
        se = 0.0
        for i in range(0, n, cfg.batch):
            idx = perm[i:i + cfg.batch]
            loss = torch.mean((rm(seq[idx]) - y[idx]) ** 2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            se += float(loss.detach()) * len(idx)
            bar.update(1)
        epoch_mse = se / n
        bar.set_postfix(mse=f"{epoch_mse:.4f}", refresh=False)
    bar.close()
    rm.eval()
    return rm, model_cfg, epoch_mse


def train_rms(datasets, cfgs: list[RMTrainConfig], model_cfg: dict | None = None, quiet: bool = False):
    """K reward models trained at once as one stacked model (rlhf/stacked.py): member k is train_rm(datasets[k],
    cfgs[k]) -- the same initial weights (torch.manual_seed(seed) before building it), the same batch order (its
    own generator), the same cosine schedule -- up to float rounding. The datasets must have the same size and
    the configs the same epochs and batch. Returns [(rm, model_cfg, final epoch's mean training MSE)]."""
    from . import stacked as S
    for k, c in enumerate(cfgs):
        c.check(f"RMTrainConfig {k}")
    if not cfgs or len(cfgs) != len(datasets) or not all(datasets):
        raise ValueError("stacked RM training needs one non-empty dataset per config")
    if len({len(d) for d in datasets}) != 1 or len({(c.epochs, c.batch) for c in cfgs}) != 1:
        raise ValueError("stacked RM training needs datasets of one size and configs of one epochs and batch")
    model_cfg = model_cfg or default_config()
    inits = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        inits.append(RewardModel(model_cfg))
    R = {k: v.requires_grad_() for k, v in S.stack(inits).items()}
    seq = torch.stack([torch.cat([prompts_tensor(d), responses_tensor(d)], 1) for d in datasets])
    y = torch.stack([labels_tensor(d) for d in datasets])
    K, n = y.shape
    epochs, batch = cfgs[0].epochs, cfgs[0].batch
    total = epochs * math.ceil(n / batch)
    base = torch.tensor([c.lr for c in cfgs])
    opt = S.StackedAdam(R, base)
    gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    bar = progress(total=total, desc=f"train_rm x{K}", quiet=quiet)
    rows = torch.arange(K)[:, None]
    mse, t = torch.full((K,), float("nan")), 0
    for _ in range(epochs):
        perm = torch.stack([torch.randperm(n, generator=g) for g in gens])
        se = torch.zeros(K)
        for i in range(0, n, batch):
            idx = perm[:, i:i + batch]
            loss = ((S.rm_forward(R, model_cfg["n_heads"], seq[rows, idx]) - y[rows, idx]) ** 2).mean(1)
            opt.zero_grad()
            loss.sum().backward()
            opt.step(base * (1 + math.cos(math.pi * t / total)) / 2)    # CosineAnnealingLR's value at step t
            t += 1
            se += loss.detach() * idx.shape[1]
            bar.update(1)
        mse = se / n
    bar.close()
    out = []
    for k in range(K):
        rm = S.unstack(R, RewardModel(model_cfg), k).eval()
        out.append((rm, model_cfg, float(mse[k])))
    return out


def main(argv=None):
    ap = Parser(prog="python -m rlhf.train_rm", description=first_paragraph(__doc__))
    ap.add_argument("--data", required=True, help="jsonl of labelled records")
    ap.add_argument("--out", required=True)
    for f in dataclasses.fields(RMTrainConfig):
        ap.add_argument(f"--{f.name}", type=RULES[f.name], default=f.default)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    setup_torch()
    cfg = RMTrainConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(RMTrainConfig)}).check()
    check_out_dir(a.out, "a directory for the reward model")
    records = read_jsonl(a.data, require=("response", "label"), unique_ids=True)
    rm, mcfg, mse = train_rm(records, cfg, quiet=a.quiet)
    if not math.isfinite(mse):      # valid settings can still diverge (save_rm refuses NaN weights too)
        raise RuntimeError(f"train_rm: training diverged (final MSE {mse}); nothing was written to {a.out}")
    save_rm(rm, mcfg, a.out)
    write_json(f"{a.out}/train_config.json",
               {**dataclasses.asdict(cfg), "data": a.data, "data_sha256": file_sha256(a.data), "final_mse": mse})
    print(json.dumps({"out": a.out, "final_mse": round(mse, 5), **dataclasses.asdict(cfg)}))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.train_rm"))
