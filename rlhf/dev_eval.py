"""Dev evaluation of a policy against the RM: proxy reward of its samples on dev prompts, KL to the reference,
and the RM's agreement with the expert labels of the gold set.

python -m rlhf.dev_eval --policy DIR --policy-ref DIR --reward-model DIR --prompts JSONL --gold JSONL
                        [--n 4 --seed 0] --out JSON
"""
from __future__ import annotations

import json
import math
import sys

import numpy as np
import torch
from scipy import stats

from .atomic import check_out_file
from .common import setup_torch
from .errors import run_cli
from .data import labels_tensor, prompts_tensor, read_jsonl, responses_tensor, write_json
from .model import load_policy, response_logprobs_grouped, sample
from .reward_model import load_rm, score
from .cli import Parser, first_paragraph, positive_int, seed_arg


@torch.inference_mode()
def dev_eval(policy, ref, rm, prompts_records, gold_records, n: int, generator, batch: int = 256) -> dict:
    proxies, kls = [], []
    for i in range(0, len(prompts_records), batch):
        prompts = prompts_tensor(prompts_records[i:i + batch])
        resp = sample(policy, prompts, n, 1.0, generator)
        proxies.append(score(rm, prompts.repeat_interleave(n, 0), resp))
        kl = response_logprobs_grouped(policy, prompts, resp, n) - response_logprobs_grouped(ref, prompts, resp, n)
        kls.append(kl.sum(1))
    proxy, kl = torch.cat(proxies).numpy(), torch.cat(kls).numpy()
    out = {"n_prompts": len(prompts_records), "samples_per_prompt": n,
           "proxy_mean": float(proxy.mean()), "proxy_std": float(proxy.std()),
           "proxy_p50": float(np.percentile(proxy, 50)), "proxy_p90": float(np.percentile(proxy, 90)),
           "kl_mean": float(kl.mean())}
    if gold_records:
        rm_gold = score(rm, prompts_tensor(gold_records), responses_tensor(gold_records)).numpy()
        labels = labels_tensor(gold_records).numpy()
        r = float(stats.pearsonr(rm_gold, labels)[0]) if len(gold_records) >= 2 and labels.std() > 0 \
            and rm_gold.std() > 0 else math.nan
        out["rm_gold_pearson"] = r if math.isfinite(r) else None     # undefined (constant scores or labels): null
    return out


def main(argv=None):
    ap = Parser(prog="python -m rlhf.dev_eval", description=first_paragraph(__doc__))
    ap.add_argument("--policy", required=True)
    ap.add_argument("--policy-ref", required=True)
    ap.add_argument("--reward-model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--gold", default=None)
    ap.add_argument("--n", type=positive_int, default=4)
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.out:
        check_out_file(a.out, "the JSON output (--out)")
    setup_torch()
    policy, _ = load_policy(a.policy)
    ref, _ = load_policy(a.policy_ref)
    rm, _ = load_rm(a.reward_model)
    prompts = read_jsonl(a.prompts)
    gold = read_jsonl(a.gold, require=("response", "label")) if a.gold else []
    res = {"policy": a.policy, "prompts": a.prompts, "seed": a.seed,
           **dev_eval(policy, ref, rm, prompts, gold, a.n, torch.Generator().manual_seed(a.seed))}
    bad = [k for k, v in res.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:     # the checkpoints are finite (their loaders check): an overflow, never written as invalid JSON
        raise RuntimeError(f"dev_eval: {bad} came out NaN or inf; nothing was written")
    print(json.dumps(res, indent=2))
    if a.out:
        write_json(a.out, res)


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.dev_eval"))
