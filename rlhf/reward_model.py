"""The reward model: a bidirectional transformer, LayerNorm output mean-pooled over all 14 positions, MLP head
(head.0: Linear d->d, GELU, head.2: Linear d->1). Same blocks and checkpoint conventions as the policy."""
from __future__ import annotations

import torch
import torch.nn as nn

from .model import Block, first_block_qkv, load_module, save_module
from .vocab import SEQ_LEN, VOCAB_SIZE

RM_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "seq_len")


def default_config() -> dict:
    return dict(vocab_size=VOCAB_SIZE, d_model=96, n_layers=2, n_heads=4, d_ff=192, seq_len=SEQ_LEN)


class RewardModel(nn.Module):
    def __init__(self, cfg: dict | None = None):
        super().__init__()
        self.cfg = cfg = dict(cfg or default_config())
        d = cfg["d_model"]
        self.tok = nn.Embedding(cfg["vocab_size"], d)
        self.pos = nn.Embedding(cfg["seq_len"], d)
        self.blocks = nn.ModuleList(Block(d, cfg["n_heads"], cfg["d_ff"], causal=False) for _ in range(cfg["n_layers"]))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))

    def forward(self, seq):
        positions = torch.arange(seq.shape[1], device=seq.device)
        x = self.tok(seq) + self.pos(positions)
        qkv0 = first_block_qkv(self, seq, positions)
        for i, blk in enumerate(self.blocks):
            x, _ = blk(x, qkv=qkv0 if i == 0 else None)
        return self.head(self.ln(x).mean(1)).squeeze(-1)


def load_rm(directory):
    return load_module(RewardModel, directory, "rm.safetensors", RM_KEYS, default_config())


def save_rm(rm, cfg, directory):
    save_module(rm, cfg, directory, "rm.safetensors", RM_KEYS)


@torch.inference_mode()
def score(rm, prompts_rep, responses, batch: int = 4096) -> torch.Tensor:
    seq = torch.cat([prompts_rep, responses], 1)
    return torch.cat([rm(seq[i:i + batch]) for i in range(0, len(seq), batch)])
