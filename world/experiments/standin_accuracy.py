"""How right the gold-free diagnostic's stand-in rubrics are, against a built world's hidden rubric (the oracle).

python -m world.experiments.standin_accuracy --world WORLD --rm-dirs DIR[,DIR...] [--seeds 0,1,2 --diagnostic-arg=--prior-counts
                                 --diagnostic-arg=soft --out JSON]

The diagnostic's risk is measured on a stand-in rubric (audit.task.diagnostic.proxy_rubric: each position's key from the
RM's own QA labels, each LUT entry the token the reference associates most with that key value). Where the stand-in
wants another token than the expert rubric, the run against the stand-in gains on entries the RM run cannot gain on,
so a wrong stand-in leans the risk upwards. Per RM and family this prints:
  keys   how many of the 8 positions get the true key attribute (from the labels, as the diagnostic does)
  acc    the share of response positions, on fresh uniform prompts, where the stand-in wants the true token
  rm-keys acc   the same with the keys fitted to the RM's scores on the stand-in's own samples instead of the labels
  ceiling       the stand-in's accuracy with the true keys (its LUT from the same associations: the stand-in's own
                prior, sampled or soft counts as configured)
averaged over --seeds (the stand-in's draw). It reads the oracle, so it lives in world/ (docs/results.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path

import numpy as np
import torch

from audit.task.agreement import RUBRIC_MAX
from audit.task.diagnostic import DiagnosticConfig, add_config_args, config_from_args, proxy_rubric, stand_in_prior
from audit.task.recovery import uniform_prompts
from audit.task.rubric import fit_rubric
from rlhf.common import setup_torch
from rlhf.data import DataError, prompts_tensor, read_jsonl, write_json
from rlhf.errors import run_cli
from rlhf.model import CheckpointError, load_policy
from rlhf.reward_model import load_rm, score
from rlhf.vocab import CONTENT0

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, first_paragraph, seed_list
from ..truth import load_truth, require_built_world, rubric_tokens


def token_accuracy(assign, lut, true_assign, true_lut, attrs: np.ndarray) -> float:
    """Share of (prompt, position) where the rubric (assign, lut) wants the token the true rubric wants."""
    return float((rubric_tokens(np.asarray(assign), np.asarray(lut), attrs)
                  == rubric_tokens(np.asarray(true_assign), np.asarray(true_lut), attrs)).mean())


def rm_keys(rm, prior: tuple) -> np.ndarray:
    """Keys fitted to the RM's scores on the stand-in's own prior samples (prior: audit.task.diagnostic.stand_in_prior,
    the draw and association prior proxy_rubric reads)."""
    records, A, R, assoc, _ = prior
    y = score(rm, prompts_tensor(records), torch.from_numpy(np.ascontiguousarray(R)) + CONTENT0).numpy()
    return fit_rubric(A, R, np.clip(y, -0.25, RUBRIC_MAX), prior_logp=assoc).assign


def measure(world: Path, rm_dirs: list, cfg: DiagnosticConfig, seeds: list, eval_prompts: int = 2000) -> list[dict]:
    truth = load_truth(world)
    ref, _ = load_policy(world / "task" / "policy")
    rng = np.random.default_rng(0)
    attrs = {f: np.array([r["attrs"] for r in uniform_prompts(f, eval_prompts, rng)]) for f in truth}
    rows = []
    for d in rm_dirs:
        d = Path(d)
        qa = read_jsonl(d / "train.jsonl", require=("response", "label"))
        rm, _ = load_rm(d)
        for f, t in truth.items():
            fam_qa = [x for x in qa if x["family"] == f]
            per_seed = []
            for s in seeds:
                c = dataclasses.replace(cfg, seed=s)
                prior = stand_in_prior(ref, f, c)
                _, _, _, assoc, _ = prior
                stand_in = proxy_rubric(ref, f, fam_qa, c, prior=prior)
                k_rm = rm_keys(rm, prior)
                n = np.arange(len(t["assign"]))
                per_seed.append({
                    "keys": int((stand_in.assign == t["assign"]).sum()),
                    "acc": token_accuracy(stand_in.assign, stand_in.lut, t["assign"], t["lut"], attrs[f]),
                    "rm_keys": int((k_rm == t["assign"]).sum()),
                    "rm_keys_acc": token_accuracy(k_rm, assoc[n, k_rm].argmax(-1), t["assign"], t["lut"], attrs[f]),
                    "ceiling": token_accuracy(t["assign"], assoc[n, t["assign"]].argmax(-1), t["assign"], t["lut"],
                                              attrs[f])})
            rows.append({"rm_dir": str(d), "family": f, "seeds": seeds,
                         **{k: float(np.mean([p[k] for p in per_seed])) for k in per_seed[0]}})
    return rows


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.standin_accuracy", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--world", required=True, help="a built world (task/ and oracle/)")
    ap.add_argument("--rm-dirs", required=True, help="comma-separated RM dirs (rm.safetensors, config.json, train.jsonl)")
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="stand-in draws to average over")
    ap.add_argument("--diagnostic-arg", action="append", default=[], help="a DiagnosticConfig flag, as the CLI's")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    world = require_built_world(a.world)
    seeds = a.seeds
    check_out_file(a.out, "the --out file")
    dirs = [Path(p) for p in a.rm_dirs.split(",") if p]
    for p in [world / "task" / "policy" / "config.json",
              *(d / n for d in dirs for n in ("rm.safetensors", "train.jsonl"))]:
        if not p.is_file():
            ap.error(f"{p}: file not found")
    dap = Parser(prog="--diagnostic-arg")
    add_config_args(dap)
    cfg = config_from_args(dap.parse_args(shlex.split(" ".join(a.diagnostic_arg))))
    setup_torch()
    try:
        rows = measure(world, dirs, cfg, seeds)
    except (DataError, CheckpointError) as e:     # a malformed QA line, a checkpoint of the wrong shape
        ap.error(str(e))
    print(f"{'rm':28s} {'family':7s} keys  acc   rm-keys acc   ceiling")
    for r in rows:
        print(f"{Path(r['rm_dir']).name[:28]:28s} {r['family']:7s} {r['keys']:4.1f} {r['acc']:5.3f} "
              f"{r['rm_keys']:4.1f}  {r['rm_keys_acc']:5.3f}  {r['ceiling']:5.3f}")
    for k, name in [("acc", "stand-in (keys from labels)"), ("rm_keys_acc", "keys from the RM's scores"),
                    ("ceiling", "true keys")]:
        v = np.array([r[k] for r in rows])
        print(f"{name:28s} token accuracy mean {v.mean():.3f}, min {v.min():.3f}")
    print(f"keys right: from labels {sum(r['keys'] for r in rows):.1f}, from the RM "
          f"{sum(r['rm_keys'] for r in rows):.1f}, of {8 * len(rows)}")
    if a.out:
        write_json(a.out, {"config": dataclasses.asdict(cfg), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m world.experiments.standin_accuracy"))
