"""K runs of rlhf.train_rl's KL-regularised REINFORCE trained at once, as one stacked model (rlhf/stacked.py).

Each member is the run its RLConfig describes: its own initial policy, reference, reward (an RM, or a reward_fn),
kl_coef, lr, max_grad_norm, family weights, seed and number of steps. Its generator draws the same prompt batches
and sampling uniforms, in the same order, as `train_rl` with that config would, so a member is the separate run
up to float rounding (batched kernels sum in another order; tests compare the two by meaning). Members must share
the batch shape (batch_prompts, samples_per_prompt) and the temperature; a member that has done its steps leaves
the stack (its checkpoint is written then), and the others go on.

    train_rl_stacked([cfg_a, cfg_b], [out_a, out_b])           # two run dirs, as train_rl writes them
    policies = run_stacked([cfg_a, cfg_b], [None, reward_fn])   # in memory: the trained policies
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path

import torch

from .atomic import atomic_dir, check_out_dir
from .common import progress
from .data import group_by_family, prompts_tensor, read_jsonl, sample_prompt_batch, write_json
from .model import Policy, draw_uniforms, load_policy, save_policy
from .reward_model import load_rm
from . import stacked as S
from .train_rl import RLConfig, check_config, check_family_weights

SHARED = ("batch_prompts", "samples_per_prompt", "temperature")


class StackedRLTrainer:
    """K RL runs as one model; `step()` is one update of every member and returns each member's figures."""

    def __init__(self, cfgs: list[RLConfig], reward_fns: list | None = None):
        cfgs = list(cfgs)
        if not cfgs:
            raise ValueError("StackedRLTrainer: no runs given")
        for k, c in enumerate(cfgs):      # as RLTrainer: every key checked before anything is loaded
            check_config(c, f"RLConfig of stacked run {k}")
        for key in SHARED:
            vals = {getattr(c, key) for c in cfgs}
            if len(vals) > 1:
                raise ValueError(f"stacked runs must share {key}; got {sorted(vals)}")
        if any(c.reward_wrapper for c in cfgs):
            raise ValueError("stacked runs do not support reward_wrapper (use rlhf.train_rl)")
        reward_fns = list(reward_fns) if reward_fns is not None else [None] * len(cfgs)
        if len(reward_fns) != len(cfgs):
            raise ValueError(f"{len(cfgs)} configs but {len(reward_fns)} reward functions")
        for c, fn in zip(cfgs, reward_fns):
            if fn is None and c.reward_model is None:
                raise ValueError("no reward: set reward_model in the config or pass a reward_fn")
        loaded, prompts = {}, {}

        def policy(path):
            if path not in loaded:
                loaded[path] = load_policy(path)
            return loaded[path]

        self.model_cfg = policy(cfgs[0].policy_init)[1]
        self.n_heads = self.model_cfg["n_heads"]
        self.P = {k: v.requires_grad_() for k, v in S.stack([policy(c.policy_init)[0] for c in cfgs]).items()}
        self.ref = S.stack([policy(c.policy_ref)[0] for c in cfgs])
        rms = {}
        for c, fn in zip(cfgs, reward_fns):
            if fn is None and c.reward_model not in rms:
                rms[c.reward_model] = load_rm(c.reward_model)
        self.rm_heads = next(iter(rms.values()))[1]["n_heads"] if rms else None
        self.rm_members = [k for k, fn in enumerate(reward_fns) if fn is None]
        self.R = S.stack([rms[cfgs[k].reward_model][0] for k in self.rm_members]) if self.rm_members else None
        for c in cfgs:
            if c.prompt_file not in prompts:
                prompts[c.prompt_file] = group_by_family(read_jsonl(c.prompt_file))
        for k, c in enumerate(cfgs):
            check_family_weights(c, prompts[c.prompt_file], f"RLConfig of stacked run {k}")
        self.by_family = [prompts[c.prompt_file] for c in cfgs]
        self.cfgs, self.reward_fns = cfgs, reward_fns
        self.gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
        self.opt = S.StackedAdam(self.P, [c.lr for c in cfgs])
        self.steps_done = 0

    @property
    def K(self) -> int:
        return len(self.cfgs)

    def _rewards(self, records, prompts, responses):
        K, n = self.K, self.cfgs[0].samples_per_prompt
        prompts_rep = prompts.repeat_interleave(n, 1)
        out = torch.empty(responses.shape[:2])
        if self.rm_members:
            seq = torch.cat([prompts_rep, responses], 2)[self.rm_members]
            out[self.rm_members] = S.rm_score(self.R, self.rm_heads, seq)
        for k in range(K):
            fn = self.reward_fns[k]
            if fn is None:
                continue
            recs = [records[k][i // n] for i in range(responses.shape[1])]
            r = torch.as_tensor(fn(recs, prompts_rep[k], responses[k]), dtype=torch.float32)
            if r.shape != (responses.shape[1],):
                raise ValueError(f"reward must be {responses.shape[1]} numbers, got shape {tuple(r.shape)}")
            out[k] = r
        if not torch.isfinite(out).all():
            bad = sorted({k for k in range(K) if not torch.isfinite(out[k]).all()})
            raise ValueError(f"non-finite rewards for stacked member(s) {bad}")
        return out

    def step(self) -> list[dict]:
        c0 = self.cfgs[0]
        n, B, temp = c0.samples_per_prompt, c0.batch_prompts, c0.temperature
        records, uniforms = [], []
        for k, c in enumerate(self.cfgs):     # each member's draws, in train_rl's order
            records.append(sample_prompt_batch(self.by_family[k], c.family_weights, B, self.gens[k]))
            uniforms.append(draw_uniforms(B * n, self.gens[k]))
        prompts = torch.stack([prompts_tensor(r) for r in records])
        responses = S.sample(self.P, self.n_heads, prompts, n, temp, torch.stack(uniforms))
        logp, ent = S.response_logprobs_grouped(self.P, self.n_heads, prompts, responses, n, with_entropy=True,
                                                temperature=temp)
        with torch.inference_mode():
            ref_logp = S.response_logprobs_grouped(self.ref, self.n_heads, prompts, responses, n, temperature=temp)
            reward = self._rewards(records, prompts, responses)
        kl = (logp.detach() - ref_logp).sum(-1)                                   # [K, B*n]
        shaped = reward - torch.tensor([c.kl_coef for c in self.cfgs])[:, None] * kl
        grouped = shaped.view(self.K, B, n)
        adv = (grouped - grouped.mean(-1, keepdim=True)).view(self.K, -1)
        loss = -(adv * logp.sum(-1)).mean(-1)                                     # [K]: members independent
        self.opt.zero_grad()
        loss.sum().backward()
        self.opt.clip([c.max_grad_norm or 0.0 for c in self.cfgs])
        self.opt.step()
        self.steps_done += 1
        figs = torch.stack([reward.mean(1), kl.mean(1), shaped.mean(1), ent.detach().mean((1, 2)),
                            loss.detach()], 1).tolist()
        return [dict(zip(("proxy_reward", "kl", "shaped_reward", "entropy", "loss"), f)) for f in figs]

    def policy(self, k: int) -> Policy:
        """Member k's current weights as a Policy module (eval mode)."""
        return S.unstack(self.P, Policy(self.model_cfg), k).eval()

    def keep(self, members) -> None:
        """Go on with only the given members (indices into the current stack), in that order."""
        members = list(members)
        self.P = {k: v.detach().requires_grad_() for k, v in S.select(self.P, members).items()}
        self.ref = S.select(self.ref, members)
        rm_pos = {k: i for i, k in enumerate(self.rm_members)}
        kept_rm = [m for m in members if m in rm_pos]
        self.R = S.select(self.R, [rm_pos[m] for m in kept_rm]) if kept_rm else None
        self.rm_members = [i for i, m in enumerate(members) if m in rm_pos]
        self.cfgs = [self.cfgs[m] for m in members]
        self.reward_fns = [self.reward_fns[m] for m in members]
        self.by_family = [self.by_family[m] for m in members]
        self.gens = [self.gens[m] for m in members]
        self.opt.params = self.P
        self.opt.select(members)


def run_stacked(cfgs: list[RLConfig], reward_fns: list | None = None, on_step=None, on_done=None) -> list[Policy]:
    """Train every run for its cfg.steps, stacked; returns the trained policies (eval mode) in cfgs' order.
    on_step(k, step, figures, trainer, pos) after each step of run k (at position pos of the stack) and
    on_done(k, trainer, pos) when run k has done its steps (before it leaves the stack)."""
    trainer = StackedRLTrainer(cfgs, reward_fns)
    alive = list(range(len(cfgs)))
    out = [None] * len(cfgs)
    step = 0
    while alive:
        step += 1
        figs = trainer.step()
        for pos, k in enumerate(alive):
            if on_step:
                on_step(k, step, figs[pos], trainer, pos)
        finished = [pos for pos, k in enumerate(alive) if cfgs[k].steps <= step]
        for pos in finished:
            out[alive[pos]] = trainer.policy(pos)
            if on_done:
                on_done(alive[pos], trainer, pos)
        if finished:
            keep = [pos for pos in range(len(alive)) if pos not in finished]
            alive = [alive[pos] for pos in keep]
            if alive:
                trainer.keep(keep)
    return out


def train_rl_stacked(cfgs: list[RLConfig], out_dirs, reward_fns=None, quiet: bool = False, desc: str = "stacked"
                     ) -> list[list[dict]]:
    """rlhf.train_rl.train_rl for K runs at once: each out dir gets run_config.json, log.jsonl (the same rows:
    figures averaged over log_every steps; elapsed_s counts from the stack's start) and its checkpoint(s).
    As train_rl, each run is written into a hidden sibling of its out dir, and all of them are moved into place
    when the whole stack completed: a failure leaves every existing out dir as it was. Returns each run's log rows."""
    outs = [check_out_dir(d, "a directory for the run") for d in out_dirs]
    if len(outs) != len(cfgs):
        raise ValueError(f"{len(cfgs)} configs but {len(outs)} output dirs")
    for k, c in enumerate(cfgs):
        check_config(c, f"RLConfig of stacked run {k}")
    with contextlib.ExitStack() as stack:
        work = [stack.enter_context(atomic_dir(d)) for d in outs]
        return _train_into(cfgs, work, reward_fns, quiet, desc)


def _train_into(cfgs, outs, reward_fns, quiet, desc) -> list[list[dict]]:
    for c, d in zip(cfgs, outs):
        write_json(d / "run_config.json", dataclasses.asdict(c))
    logs = [open(d / "log.jsonl", "w") for d in outs]
    rows, acc = [[] for _ in cfgs], [[] for _ in cfgs]
    t0 = time.time()
    bar = progress(total=max(c.steps for c in cfgs), desc=f"train_rl {desc} x{len(cfgs)}", quiet=quiet)

    def on_step(k, step, fig, trainer, pos):
        c = cfgs[k]
        acc[k].append(fig)
        if step % c.log_every == 0 or step == c.steps:
            row = {"step": step, **{key: round(sum(a[key] for a in acc[k]) / len(acc[k]), 6) for key in acc[k][0]},
                   "elapsed_s": round(time.time() - t0, 3)}
            rows[k].append(row)
            logs[k].write(json.dumps(row) + "\n")
            logs[k].flush()
            acc[k] = []
        if c.save_every and step % c.save_every == 0 and step != c.steps:
            save_policy(trainer.policy(pos), trainer.model_cfg, outs[k] / f"step_{step}")
        if pos == 0:
            bar.update(1)

    def on_done(k, trainer, pos):
        logs[k].close()
        save_policy(trainer.policy(pos), trainer.model_cfg, outs[k])

    try:
        run_stacked(cfgs, reward_fns, on_step, on_done)
    finally:
        for fh in logs:
            fh.close()
        bar.close()
    return rows
