"""Replay a built world's crowd batch and RM with other corruption, and see what it does to SPEC §2's crowd, RM
and kl002 rows: the experiment behind docs/calibration.md's "what moves the figures" tables.

    python -m world.replay worlds/canonical out/replay-x --corruption '{"dune": {"replaced_share": 1.0}}'

Keeps the world's truth, reference policy, gold rows and prompts; redraws the crowd batch (2,000 rows a family,
build step 3, each family's corruption = the world's config updated with --corruption), retrains the RM as the
build does (80 epochs), and reports the full batch's crowd figures and calibrate's label and RM figures
(`world.calibrate.rm_agreement`: a 200-row QA sample's mean / share above 1 / max, the RM's Pearson with the
experts on the world's gold rows per family and pooled, its in-sample fit on the QA rows), and (unless
--no-rl) the per-family change of true quality after kl002-s1500 (kl 0.02, 1,500 steps, 32x8, seed 1) against
the new RM. About 165 s on 2 cores (100 s without the RL run). Writes OUT/result.json and OUT/rm/.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from rlhf.common import setup_torch
from rlhf.data import read_jsonl, write_json
from rlhf.errors import InputError, run_cli
from rlhf.model import load_policy
from rlhf.reward_model import save_rm
from rlhf.train_rl import train_rl
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import FAMILIES

from .calibrate import rm_agreement
from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from .config import corruption_from_dict, load_world_config
from .crowd import crowd_batch, qa_sample
from .hazard import strong_recipe
from .truth import load_truth, require_built_world, true_quality


def replay_config(world, out, corruption, rm_epochs: int | None = None):
    """The world's config with --corruption and --rm-epochs applied, or InputError (exit 2) before any work:
    WORLD not a built world, --corruption not {family: {Corruption field: value}}, OUT a file."""
    world, out = require_built_world(world), Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory; expected the directory to write the replay to")
    cfg = load_world_config(world)
    if rm_epochs is not None:
        cfg.rm_epochs = rm_epochs
    if not isinstance(corruption, dict):
        raise InputError("--corruption: expected a JSON object {family: {Corruption field: value}}")
    for f, d in corruption.items():
        if f not in FAMILIES:
            raise InputError(f"--corruption: unknown family {f!r}; expected one of {', '.join(FAMILIES)}")
        if not isinstance(d, dict):
            raise InputError(f"--corruption: key {f!r}: expected an object of Corruption fields, got {d!r}")
        try:
            c = corruption_from_dict({**dataclasses.asdict(cfg.corruption_for(f)), **d}, f"--corruption: key {f!r}")
        except ValueError as e:
            raise InputError(str(e)) from None
        cfg.corruption[f] = dataclasses.asdict(c)
    return cfg


def replay(world, out, corruption: dict, seed: int = 0, rl: bool = True, quiet: bool = True,
           rm_epochs: int | None = None) -> dict:
    world, out = Path(world), Path(out)
    cfg = replay_config(world, out, corruption, rm_epochs)      # every input checked before OUT is touched
    truth = load_truth(world)
    policy, _ = load_policy(world / "task" / "policy")
    rng = np.random.default_rng(seed + 12345)
    t0 = time.time()
    res = {"corruption": {f: dataclasses.asdict(cfg.corruption_for(f)) for f in FAMILIES}, "seed": seed,
           "rm_epochs": cfg.rm_epochs}
    crowd, per_family = crowd_batch(policy, truth, cfg, rng, seed)     # build step 3
    res["crowd_full"] = {f: {k: round(v, 3) for k, v in st.items()} for f, (_, _, st) in per_family.items()}
    qa = qa_sample(crowd, cfg.qa_per_family, rng)
    rm, rmcfg, _ = train_rm(crowd, RMTrainConfig(epochs=cfg.rm_epochs, lr=cfg.rm_lr, batch=cfg.rm_batch, seed=seed),
                            quiet=quiet)
    save_rm(rm, rmcfg, out / "rm")
    res.update(rm_agreement(rm, read_jsonl(world / "task" / "data" / "gold_calib.jsonl"), qa))   # as calibrate
    res["crowd_rm_s"] = round(time.time() - t0, 1)
    if rl:
        recipe = dataclasses.replace(strong_recipe(world / "task", seed=1), reward_model=str(out / "rm"))
        train_rl(recipe, out / "kl002", quiet=quiet)
        pol, _ = load_policy(out / "kl002")
        q_ref = true_quality(policy, truth, 3000, seed=5)
        q = true_quality(pol, truth, 3000, seed=5)
        res["kl002_change"] = {f: round(q["per_family"][f] - q_ref["per_family"][f], 3) for f in FAMILIES}
    res["total_s"] = round(time.time() - t0, 1)
    write_json(out / "result.json", res)
    return res


def main(argv=None):
    ap = Parser(prog="python -m world.replay", description=first_paragraph(__doc__),
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("world")
    ap.add_argument("out")
    ap.add_argument("--corruption", default="{}", help="JSON {family: {Corruption field: value}}")
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--rm-epochs", type=positive_int, default=None,
                    help="default: the world's own (its config's rm_epochs)")
    ap.add_argument("--no-rl", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    try:
        corruption = json.loads(a.corruption)
    except json.JSONDecodeError as e:
        raise InputError(f"--corruption: not valid JSON ({e.msg}); expected {{family: {{Corruption field: value}}}}") \
            from None
    setup_torch()
    print(json.dumps(replay(a.world, a.out, corruption, a.seed, rl=not a.no_rl, quiet=a.quiet,
                                   rm_epochs=a.rm_epochs), indent=1))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.replay"))
