"""Best-of-n against the reward model: for each prompt draw n samples, keep the one the RM scores highest.

python -m rlhf.bon --policy DIR --n 16 --prompts JSONL --reward-model DIR [--limit 200] --out JSONL --seed 0
"""
from __future__ import annotations

import json
import sys

import torch

from .atomic import check_out_file
from .common import progress, setup_torch
from .errors import run_cli
from .data import prompts_tensor, read_jsonl, with_responses, write_jsonl
from .model import load_policy, sample
from .reward_model import load_rm, score
from .cli import Parser, first_paragraph, positive_float, positive_int, seed_arg


def best_of_n(policy, rm, records, n: int, generator, temperature: float = 1.0, batch: int = 64, quiet=False):
    """Returns (chosen records with "response" and "proxy_reward", mean RM score of all samples)."""
    chosen, all_mean = [], []
    for i in progress(range(0, len(records), batch), desc="best-of-n", quiet=quiet):
        recs = records[i:i + batch]
        prompts = prompts_tensor(recs)
        resp = sample(policy, prompts, n, temperature, generator)
        r = score(rm, prompts.repeat_interleave(n, 0), resp).view(len(recs), n)
        all_mean.append(r.mean(1))
        best = r.argmax(1)
        picked = resp.view(len(recs), n, -1)[torch.arange(len(recs)), best]
        for rec, row, val in zip(with_responses(recs, picked), picked, r.max(1).values.tolist()):
            chosen.append({**rec, "proxy_reward": val})
    return chosen, float(torch.cat(all_mean).mean())


def main(argv=None):
    ap = Parser(prog="python -m rlhf.bon", description=first_paragraph(__doc__))
    ap.add_argument("--policy", required=True)
    ap.add_argument("--n", type=positive_int, default=16)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--reward-model", required=True)
    ap.add_argument("--limit", type=positive_int, default=None, help="use only the first LIMIT prompts")
    ap.add_argument("--temperature", type=positive_float, default=1.0)
    ap.add_argument("--out", required=True, help="jsonl of the chosen responses with their proxy reward")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    check_out_file(a.out, "the jsonl output (--out)")
    setup_torch()
    policy, _ = load_policy(a.policy)
    rm, _ = load_rm(a.reward_model)
    records = read_jsonl(a.prompts)[: a.limit]
    gen = torch.Generator().manual_seed(a.seed)
    chosen, mean_all = best_of_n(policy, rm, records, a.n, gen, a.temperature, quiet=a.quiet)
    write_jsonl(a.out, chosen)
    best_mean = sum(c["proxy_reward"] for c in chosen) / len(chosen)
    print(json.dumps({"out": a.out, "n": a.n, "prompts": len(chosen), "proxy_best_mean": round(best_mean, 4),
                      "proxy_sample_mean": round(mean_all, 4), "seed": a.seed}))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.bon"))
