"""python -m world build --out DIR --seed N [--preset canonical|tiny] [--variant NAME]: a task dir and its oracle."""
from __future__ import annotations

import dataclasses
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from rlhf.common import setup_torch
from rlhf.data import write_json, write_jsonl
from rlhf.dev_eval import dev_eval
from rlhf.model import load_policy, save_policy
from rlhf.reward_model import save_rm
from rlhf.sft import SFTConfig, train_sft
from rlhf.train_rl import RLConfig, train_rl
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import CONTENT, FAMILIES

from . import texts
from .config import RUNS, PILOT_MIX, WorldConfig
from .crowd import crowd_batch, qa_sample
from .truth import demonstrations, make_truth, match_fraction, policy_samples, random_prompt_records, truth_to_json


def log(msg: str, t0: float, quiet: bool = False):
    if not quiet:
        print(f"[world {time.time() - t0:6.1f}s] {msg}", flush=True)


def mix_counts(mix: dict, total: int) -> dict:
    counts = {f: int(round(mix[f] * total)) for f in FAMILIES}
    biggest = max(counts, key=counts.get)
    counts[biggest] += total - sum(counts.values())
    return counts


def run_config(name, kl, steps, weights, seed, cfg: WorldConfig) -> RLConfig:
    return RLConfig(policy_init="policy", policy_ref="policy", reward_model="reward_model",
                    prompt_file="data/prompts_train.jsonl", family_weights=weights, kl_coef=kl,
                    steps=max(2, int(round(steps * cfg.run_steps_scale))), batch_prompts=cfg.run_batch_prompts,
                    samples_per_prompt=cfg.run_samples_per_prompt, lr=3e-4, temperature=1.0, seed=seed,
                    log_every=max(1, min(20, int(round(steps * cfg.run_steps_scale)) // 4)))


def _absolute(rc: RLConfig, task: Path) -> RLConfig:
    return dataclasses.replace(rc, **{k: str(task / getattr(rc, k)) for k in
                                      ("policy_init", "policy_ref", "reward_model", "prompt_file")})


def _train_run(args):
    """Worker: one shipped run (1 thread per worker; two workers share the 2 cores)."""
    task, name, rc_dict, threads = args
    setup_torch(threads)
    task = Path(task)
    rc = RLConfig(**rc_dict)
    out = task / "runs" / name
    t = time.time()
    rows = train_rl(_absolute(rc, task), out, quiet=True)
    write_json(out / "run_config.json", dataclasses.asdict(rc))   # task-relative paths: the task can move
    return name, rows, time.time() - t


def build(out_dir, cfg: WorldConfig, quiet: bool = False) -> dict:
    t0 = time.time()
    setup_torch()
    final = Path(out_dir)
    if final.exists() and not final.is_dir():
        raise FileExistsError(f"{final}: exists and is not a directory; expected a new or empty directory for the "
                              "world")
    if final.exists() and any(final.iterdir()):
        raise FileExistsError(f"{final}: a world is already there (remove it or choose another --out)")
    # build beside the target and rename at the end: an interrupted build never looks like a world
    out = final.parent / f".{final.name}.partial"
    shutil.rmtree(out, ignore_errors=True)
    task, oracle = out / "task", out / "oracle"
    for d in ("policy", "reward_model", "data", "configs", "runs"):
        (task / d).mkdir(parents=True)
    oracle.mkdir(parents=True)
    rng = np.random.default_rng(cfg.seed)
    timings = {}

    # 1. the hidden truth
    truth = make_truth(rng, cfg.distractor, tuple(cfg.distractor_few), cfg.distractor_shared)
    write_json(oracle / "truth.json", truth_to_json(truth, cfg.expert_noise))

    # 2. reference policy: SFT on noisy demonstrations
    demos = []
    for f in FAMILIES:
        attrs, resp = demonstrations(truth, f, cfg.demos_per_family, cfg.p_rubric, cfg.p_distractor, rng)
        demos += [{"id": f"demo-{f}-{i}", "family": f, "attrs": a.tolist(), "response": [CONTENT[t] for t in r]}
                  for i, (a, r) in enumerate(zip(attrs, resp))]
    log(f"SFT on {len(demos)} demonstrations ({cfg.sft_epochs} epochs)", t0, quiet)
    policy, pcfg, nll = train_sft(demos, SFTConfig(epochs=cfg.sft_epochs, lr=cfg.sft_lr, seed=cfg.seed), quiet=quiet)
    save_policy(policy, pcfg, task / "policy")
    timings["sft_s"] = round(time.time() - t0, 1)

    # 3. crowd batch, corrupted per family
    log(f"crowd batch: {cfg.crowd_per_family} rows x {len(FAMILIES)} families", t0, quiet)
    crowd, per_family = crowd_batch(policy, truth, cfg, rng, cfg.seed)
    corruption_out = {f: {**dataclasses.asdict(c), "stats": st,
                          "wrong_lut": None if wlut is None else [[CONTENT[t] for t in row] for row in wlut]}
                      for f, (c, wlut, st) in per_family.items()}
    write_jsonl(oracle / "crowd_full.jsonl", crowd)
    write_json(oracle / "corruption.json", corruption_out)

    # 4. reward model on the full crowd batch; the QA sample ships with it
    log(f"reward model: {len(crowd)} rows, {cfg.rm_epochs} epochs", t0, quiet)
    t = time.time()
    rcfg = RMTrainConfig(epochs=cfg.rm_epochs, lr=cfg.rm_lr, batch=cfg.rm_batch, seed=cfg.seed)
    rm, rmcfg, mse = train_rm(crowd, rcfg, quiet=quiet)
    if not np.isfinite(mse):   # else five RL runs would start from it and fail minutes later on its NaN rewards
        raise RuntimeError(f"reward model training diverged (final MSE {mse}); nothing was written to {final}")
    save_rm(rm, rmcfg, task / "reward_model")
    write_jsonl(task / "reward_model" / "train.jsonl", qa_sample(crowd, cfg.qa_per_family, rng))
    (task / "reward_model" / "TRAINING.md").write_text(texts.rm_training(cfg, len(crowd), mse))
    timings["rm_s"] = round(time.time() - t, 1)

    # 5. prompts and the gold set
    train = [r for f in FAMILIES for r in random_prompt_records(f, cfg.train_per_family, rng, "train")]
    write_jsonl(task / "data" / "prompts_train.jsonl", train)
    dev = []
    for f, n in mix_counts(PILOT_MIX, cfg.dev_prompts).items():
        dev += random_prompt_records(f, n, rng, "dev")
    dev = [dev[i] for i in rng.permutation(len(dev))]
    write_jsonl(task / "data" / "prompts_dev.jsonl", dev)
    gold = []
    for k, f in enumerate(FAMILIES):
        recs = random_prompt_records(f, cfg.gold_per_family, rng, "gold")
        a, r = policy_samples(policy, recs, 1, 1.0, cfg.seed * 977 + k)
        q = match_fraction(truth[f]["assign"], truth[f]["lut"], a, r)
        y = q + rng.normal(0, cfg.expert_noise, len(q))
        gold += [{**rec, "response": [CONTENT[t] for t in rr], "label": round(float(v), 5)}
                 for rec, rr, v in zip(recs, r, y)]
    write_jsonl(task / "data" / "gold_calib.jsonl", gold)
    (task / "data" / "README.md").write_text(texts.data_readme(cfg))

    # 6. the default recipe and the shipped runs
    default = dataclasses.asdict(RLConfig(batch_prompts=16, steps=max(2, int(round(800 * cfg.run_steps_scale)))))
    write_json(task / "configs" / "default.json", default)
    jobs = []
    for name, kl, steps, weights, seed in RUNS:
        rc = run_config(name, kl, steps, weights, seed, cfg)
        jobs.append((str(task), name, dataclasses.asdict(rc), 1 if cfg.workers > 1 else 2))
    log(f"training {len(jobs)} runs on {cfg.workers} worker(s)", t0, quiet)
    t = time.time()
    run_logs = {}
    if cfg.workers > 1:
        with ProcessPoolExecutor(cfg.workers, mp_context=get_context("spawn")) as ex:
            for name, rows, secs in ex.map(_train_run, jobs):
                run_logs[name] = (rows, secs)
                log(f"  run {name} done in {secs:.0f}s (proxy {rows[-1]['proxy_reward']:.3f}, kl {rows[-1]['kl']:.2f})",
                    t0, quiet)
    else:
        for j in jobs:
            name, rows, secs = _train_run(j)
            run_logs[name] = (rows, secs)
    setup_torch()
    timings["runs_s"] = round(time.time() - t, 1)
    log("dev evaluation of each run", t0, quiet)
    ref, _ = load_policy(task / "policy")
    gen_seed = cfg.seed
    for name, kl, steps, weights, seed in RUNS:
        pol, _ = load_policy(task / "runs" / name)
        ev = dev_eval(pol, ref, rm, dev, gold, cfg.dev_eval_n, torch.Generator().manual_seed(gen_seed))
        write_json(task / "runs" / name / "dev_eval.json",
                   {"policy": f"runs/{name}", "prompts": "data/prompts_dev.jsonl", "seed": gen_seed, **ev})
        rows, secs = run_logs[name]
        (task / "runs" / name / "NOTES.md").write_text(texts.run_notes(name, kl, steps, weights, seed, cfg, rows,
                                                                       secs, ev))
    (task / "runs" / "README.md").write_text(texts.runs_readme(cfg))
    timings["total_s"] = round(time.time() - t0, 1)
    crowd_stats = {f: st for f, (_, _, st) in per_family.items()}
    write_json(oracle / "world.json", {"config": dataclasses.asdict(cfg), "seed": cfg.seed, "timings": timings,
                                       "sft_final_nll": nll, "rm_final_mse": mse, "crowd_stats": crowd_stats})
    if final.exists():
        final.rmdir()
    out.rename(final)
    log(f"built {final} in {timings['total_s']:.0f}s", t0, quiet)
    return timings
