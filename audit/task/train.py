"""Train the policy the audit ships: KL-regularised RL from the task's reference policy against the reward the
audit established, with gold-vs-proxy curves along the way, resumable after a crash.

Reward (every family): the *posterior-expected* rubric score, sum_p P(response[p] is correct | gold, trusted
crowd rows, prior) / 8, from audit.task.posterior. Not the RM: where the RM is corrupted it is the hazard itself,
and where it is honest it is still a far noisier proxy of the rubric than the recovered rubric is (RM-expert
Pearson 0.4-0.6 against the rubric's held-out 0.9+; docs/results.md measures what a hybrid RM/rubric reward
ships). Not the rubric's point estimate either: an uncertain LUT entry is rewarded by its posterior
probability, so the policy is pushed hardest where the audit is surest.

Curves (Gao et al. 2022): every `curve_every` steps, on fixed fresh prompts, the RM's mean score of the
policy's samples (the proxy) and the audit's estimate of their true quality (posterior-mean rubric score),
with the KL from the reference.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlhf.atomic import atomic_write_bytes, atomic_write_text
from rlhf.common import numeric_fingerprint, progress
from rlhf.data import prompts_tensor
from rlhf.model import save_policy
from rlhf.reward_model import score as rm_score
from rlhf.train_rl import RLConfig, RLTrainer
from rlhf.vocab import CONTENT0, FAMILIES

from .recovery import sample_arrays, uniform_prompts


@dataclass
class OwnTrainConfig:
    kl_coef: float = 0.02              # KL penalty towards the reference (per sequence, nats)
    steps: int = 1000                  # RL updates
    batch_prompts: int = 32            # prompts per update (families balanced)
    samples_per_prompt: int = 8        # samples per prompt (group-mean baseline)
    lr: float = 1e-3                   # Adam learning rate
    temperature: float = 1.0           # sampling temperature during training (deployment samples at 1.0)
    max_grad_norm: float = 1.0
    family_weights: dict | None = None  # None = balanced, the deployment mix (SPEC §1)
    curve_every: int = 100             # steps between points of the gold-vs-proxy curve
    curve_prompts_per_family: int = 100
    resume_every: int = 200            # steps between resumable snapshots (policy, optimiser, RNG, logs)
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_prompts", "samples_per_prompt", "curve_every", "resume_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"OwnTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.kl_coef < 0 or self.lr <= 0 or self.temperature <= 0:
            raise ValueError("OwnTrainConfig: kl_coef >= 0, lr > 0 and temperature > 0 required")


def reward_tables(posteriors: dict) -> torch.Tensor:
    """[families, 8, 4, 8, 24] posterior-expected correctness tables (audit.task.posterior.RubricPosterior.table) in
    FAMILIES order; a family without a posterior gets zeros (never rewarded)."""
    return torch.tensor(np.stack([posteriors[f].table() if f in posteriors else np.zeros((8, 4, 8, 24))
                                  for f in FAMILIES]), dtype=torch.float32)


def table_reward(tables: torch.Tensor):
    """reward_fn for rlhf.train_rl: sum_p sum_k T[family, p, k, attrs[k], response[p]] / 8."""
    fam_index = {f: i for i, f in enumerate(FAMILIES)}
    p_idx = torch.arange(8)[None, :, None]
    k_idx = torch.arange(4)[None, None, :]

    def fn(records, prompts_rep, responses):
        fam = torch.tensor([fam_index[r["family"]] for r in records])[:, None, None]
        attrs = torch.tensor([r["attrs"] for r in records])[:, None, :]
        resp = (responses - CONTENT0)[:, :, None]
        return tables[fam, p_idx, k_idx, attrs, resp].sum(-1).mean(-1)
    return fn


def rl_config(task: Path, cfg: OwnTrainConfig) -> RLConfig:
    """The RL run of the own policy: from task/policy, KL towards it, on the task's RL prompts."""
    return RLConfig(policy_init=str(task / "policy"), policy_ref=str(task / "policy"), reward_model=None,
                    prompt_file=str(task / "data" / "prompts_train.jsonl"), family_weights=cfg.family_weights,
                    kl_coef=cfg.kl_coef, steps=cfg.steps, batch_prompts=cfg.batch_prompts,
                    samples_per_prompt=cfg.samples_per_prompt, lr=cfg.lr, temperature=cfg.temperature,
                    seed=cfg.seed, max_grad_norm=cfg.max_grad_norm)


def _curve_point(policy, rm, tables, prompts: dict, step: int, seed: int, kl: float | None) -> dict:
    fn = table_reward(tables)
    row = {"step": step, "kl": kl, "proxy": {}, "estimated_true": {}}
    for k, f in enumerate(FAMILIES):
        A, R = sample_arrays(policy, prompts[f], 1, seed * 131 + k)
        recs = [{"family": f, "attrs": a} for a in A.tolist()]
        resp = torch.from_numpy(R) + CONTENT0
        prompts_t = prompts_tensor(recs)
        row["proxy"][f] = float(rm_score(rm, prompts_t, resp).mean())
        row["estimated_true"][f] = float(fn(recs, prompts_t, resp).mean())
    row["proxy_balanced"] = float(np.mean(list(row["proxy"].values())))
    row["estimated_true_balanced"] = float(np.mean(list(row["estimated_true"].values())))
    return row


def _snapshot(trainer, cfg: OwnTrainConfig, state: dict) -> dict:
    """Everything the rest of the run depends on, so that a resumed run is the uninterrupted one bit for bit by
    construction: weights and optimiser moments, every random stream (the trainer's generator draws the prompt
    batches and the sampling noise; torch's, numpy's and python's global streams are not used by the loop
    today, but a snapshot that keeps them stays right if that changes), the step figures since the last curve
    point, and the config and numeric fingerprint (threads, kernels, MKL mode) it was taken under."""
    return {"policy": trainer.policy.state_dict(), "opt": trainer.opt.state_dict(), "gen": trainer.gen.get_state(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
            "state": state, "config": dataclasses.asdict(cfg), "numeric": numeric_fingerprint()}


def _load_snapshot(path: Path, cfg: OwnTrainConfig, say=None) -> dict | None:
    """The snapshot at `path` if it was taken by this config under this numeric fingerprint; otherwise None (the
    run starts over: continuing another config's or another machine's run would mix two runs' numbers)."""
    if not path.exists():
        return None
    s = torch.load(path, weights_only=False)
    for what, now in (("config", dataclasses.asdict(cfg)), ("numeric", numeric_fingerprint())):
        if s.get(what) != now:
            if say:
                say(f"own policy: snapshot {path.name} was taken under another {what} "
                    f"({s.get(what)} != {now}); starting over")
            return None
    return s


def _restore(trainer, s: dict) -> None:
    trainer.policy.load_state_dict(s["policy"])
    trainer.opt.load_state_dict(s["opt"])
    trainer.gen.set_state(s["gen"])
    torch.set_rng_state(s["torch_rng"])
    np.random.set_state(s["numpy_rng"])
    random.setstate(s["python_rng"])


def _save_atomic(obj, path: Path, staging):
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue(), staging)


def train_own(task, posteriors: dict, cfg: OwnTrainConfig, work_dir, rm=None, quiet: bool = False,
              tables: torch.Tensor | None = None, progress_file=None, staging=None, say=None) -> dict:
    """RL from task/policy against the posterior-expected rubric reward. Writes work_dir/{policy.safetensors,
    config.json, train_log.json} (train_log.json last: its presence means a finished run); snapshots in
    work_dir/resume.pt let a killed run continue where it stopped (same numbers as an uninterrupted run:
    optimiser and RNG state are restored). Every file is written atomically, its temp file in `staging` when
    given. `tables` overrides the reward tables (tests give deliberately wrong rubrics); `say(msg)` is told of
    each snapshot. Returns the log dict."""
    task, work = Path(task), Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    final_log = work / "train_log.json"
    if final_log.exists() and (work / "policy.safetensors").exists():
        return json.loads(final_log.read_text())
    tables = reward_tables(posteriors) if tables is None else tables
    trainer = RLTrainer(rl_config(task, cfg), reward_fn=table_reward(tables))
    rng = np.random.default_rng(cfg.seed + 4242)
    curve_prompts = {f: uniform_prompts(f, cfg.curve_prompts_per_family, rng) for f in FAMILIES}
    if rm is None:
        from rlhf.reward_model import load_rm
        rm = load_rm(task / "reward_model")[0]
    snap = work / "resume.pt"
    state = {"step": 0, "rows": [], "curve": [], "acc": [], "elapsed_s": 0.0}
    s = _load_snapshot(snap, cfg, say)
    if s is not None:
        _restore(trainer, s)
        state = s["state"]
    else:
        trainer.policy.eval()
        state["curve"].append(_curve_point(trainer.policy, rm, tables, curve_prompts, 0, cfg.seed, 0.0))
        trainer.policy.train()
    t0 = time.time() - state["elapsed_s"]
    bar = progress(total=cfg.steps, desc="train own policy", quiet=quiet, file=progress_file)
    bar.update(state["step"])
    acc = state["acc"]      # step figures since the last curve point
    for step in range(state["step"] + 1, cfg.steps + 1):
        acc.append(trainer.step())
        bar.update(1)
        if step % cfg.curve_every == 0 or step == cfg.steps:
            row = {"step": step, **{k: round(float(np.mean([a[k] for a in acc])), 6) for k in acc[0]}}
            state["rows"].append(row)
            trainer.policy.eval()
            state["curve"].append(_curve_point(trainer.policy, rm, tables, curve_prompts, step, cfg.seed, row["kl"]))
            trainer.policy.train()
            bar.set_postfix(reward=f"{row['proxy_reward']:.3f}", kl=f"{row['kl']:.1f}", refresh=False)
            acc = []
        if step % cfg.resume_every == 0 and step != cfg.steps:
            state.update(step=step, acc=acc, elapsed_s=time.time() - t0)
            _save_atomic(_snapshot(trainer, cfg, state), snap, staging)
            if say:
                say(f"own policy: snapshot at step {step}/{cfg.steps}")
    bar.close()
    trainer.policy.eval()
    final = Path(staging or work) / ".own-final"
    shutil.rmtree(final, ignore_errors=True)
    save_policy(trainer.policy, trainer.model_cfg, final)
    for f in ("policy.safetensors", "config.json"):
        os.replace(final / f, work / f)
    shutil.rmtree(final, ignore_errors=True)
    log = {"config": dataclasses.asdict(cfg), "rows": state["rows"], "curve": state["curve"],
           "elapsed_s": round(time.time() - t0, 1)}
    atomic_write_text(final_log, json.dumps(log, indent=2) + "\n", staging)
    snap.unlink(missing_ok=True)
    return log
