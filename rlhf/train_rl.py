"""KL-regularised REINFORCE with a per-prompt group-mean baseline.

    shaped reward = reward - kl_coef * sum_t (log pi - log pi_ref)      (per sequence, on the policy's samples)
    loss          = -mean( (shaped - mean over the prompt's samples) * sum_t log pi )

python -m rlhf.train_rl --config configs/default.json --out runs/mine [--override kl_coef=0.02 ...] [--quiet]

Relative paths in the config are resolved against the current directory, then the config file's parent's parent
(a task's root, for a task's configs/default.json), then the config's own directory.

`reward_wrapper` names a Python file defining `transform(records, response_tokens, rewards) -> rewards`;
it is applied to the reward before the KL term. records: one dict per sample (id, family, attrs);
response_tokens: LongTensor [N, 8] of token ids (rlhf.vocab.decode_response turns a row into strings);
rewards: FloatTensor [N]. NOTE: this executes the file as Python code - only use files you trust.

Every key of the config is checked (check_config: types and ranges; family_weights against the families of
prompt_file) before anything is written, by the CLI and by RLTrainer alike. The run is written into a hidden
sibling of --out and moved onto it only when it completed: a refused, failed or interrupted run leaves an existing
--out as it was (and log.jsonl and step_N/ appear in --out at the end, not during the run).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import numbers
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .atomic import atomic_dir, check_out_dir
from .common import config_from_dict, parse_override, progress, setup_torch
from .data import DataError, group_by_family, json_error, prompts_tensor, read_jsonl, sample_prompt_batch, write_json
from .errors import InputError, run_cli
from . import model as model_lib
from .model import (draw_uniforms, load_policy, response_logprobs, response_logprobs_grouped, sample, sample_naive,
                    save_policy)
from .reward_model import load_rm, score
from .vocab import FAMILIES
from .cli import Parser, first_paragraph, check_fields, nonneg_float, nonneg_int, positive_float, positive_int, seed_arg


@dataclass
class RLConfig:
    policy_init: str = "policy"
    policy_ref: str = "policy"
    reward_model: str | None = "reward_model"
    prompt_file: str = "data/prompts_train.jsonl"
    family_weights: dict | None = None       # None = balanced over the families in prompt_file
    kl_coef: float = 0.1
    steps: int = 800
    batch_prompts: int = 16
    samples_per_prompt: int = 8
    lr: float = 3e-4
    temperature: float = 1.0
    seed: int = 0
    log_every: int = 20
    save_every: int = 0                       # 0 = only the final checkpoint
    reward_wrapper: str | None = None
    max_grad_norm: float = 1.0


PATH_KEYS = ("policy_init", "policy_ref", "reward_model", "prompt_file", "reward_wrapper")
OPTIONAL_PATH_KEYS = ("reward_model", "reward_wrapper")      # null: a reward_fn / no wrapper
# the numeric keys and their checks (rlhf.common); max_grad_norm may also be null or 0 (no clipping)
RULES = {"seed": seed_arg, "steps": positive_int, "batch_prompts": positive_int, "samples_per_prompt": positive_int,
         "log_every": positive_int, "lr": positive_float, "temperature": positive_float, "kl_coef": nonneg_float,
         "max_grad_norm": nonneg_float, "save_every": nonneg_int}     # save_every 0: only the final checkpoint


def check_config(cfg: RLConfig, where: str = "RLConfig") -> RLConfig:
    """Refuse a config a run cannot use, naming every bad key (InputError: one line each, exit 2): the types and
    ranges of every key, and family_weights' keys (known families) and values (finite, >= 0, a positive sum).
    The families of prompt_file are checked against the weights once it is read (check_family_weights).
    Used by load_config (the CLI: `where` names the config file) and RLTrainer (every programmatic caller)."""
    bad = []
    for key in PATH_KEYS:
        v = getattr(cfg, key)
        if v is None and key in OPTIONAL_PATH_KEYS:
            continue
        if not isinstance(v, (str, os.PathLike)) or not str(v):
            bad.append(f"key {key!r}: expected a path{' or null' if key in OPTIONAL_PATH_KEYS else ''}, got {v!r}")
    bad += _family_weight_problems(cfg.family_weights)
    lines = [f"{where}: {b}" for b in bad]
    try:
        check_fields(cfg, where, RULES, allow_none=("max_grad_norm",))   # None: no clipping
    except InputError as e:
        lines += str(e).splitlines()
    if lines:
        raise InputError("\n".join(lines))
    return cfg


def _family_weight_problems(weights) -> list[str]:
    if weights is None:
        return []
    if not isinstance(weights, dict):
        return [f"key 'family_weights': expected null or an object {{family: weight}}, got {weights!r}"]
    out = []
    for f, w in weights.items():
        if f not in FAMILIES:
            out.append(f"key 'family_weights': unknown family {f!r}; expected families among {', '.join(FAMILIES)}")
        elif isinstance(w, bool) or not isinstance(w, numbers.Real):
            out.append(f"key 'family_weights': weight of {f!r}: expected a number, got {w!r}")
        else:
            try:
                nonneg_float(w)
            except argparse.ArgumentTypeError as e:
                out.append(f"key 'family_weights': weight of {f!r}: {e}")
    if not out and sum(weights.values()) <= 0:
        out.append(f"key 'family_weights': expected a positive weight for at least one family, got {weights!r}")
    return out


def check_family_weights(cfg: RLConfig, by_family: dict, where: str = "RLConfig") -> None:
    """Every family given a positive weight must have prompts in prompt_file (else its share of every batch
    would silently go to the others, or nothing could be drawn)."""
    if cfg.family_weights is None:
        return
    absent = [f for f, w in cfg.family_weights.items() if w > 0 and f not in by_family]
    if absent:
        raise InputError(f"{where}: key 'family_weights': {', '.join(absent)} ha{'s' if len(absent) == 1 else 've'} "
                         f"a positive weight but {cfg.prompt_file} has no prompts of "
                         f"{'it' if len(absent) == 1 else 'them'}; its families: {', '.join(by_family)}")


def resolve_paths(cfg: RLConfig, config_path: Path | None) -> RLConfig:
    bases = [Path.cwd()]
    if config_path is not None:
        bases += [config_path.resolve().parent.parent, config_path.resolve().parent]
    updates = {}
    for key in PATH_KEYS:
        val = getattr(cfg, key)
        if val is None or Path(val).is_absolute():
            continue
        found = next((b / val for b in bases if (b / val).exists()), None)
        if found is None:
            raise FileNotFoundError(f"config key {key!r}: {val!r} not found relative to {[str(b) for b in bases]}")
        updates[key] = str(found.resolve())
    return dataclasses.replace(cfg, **updates)


def load_reward_wrapper(path: str):
    """The wrapper's transform; a file that is missing, not Python, fails on import or defines no transform is
    bad input naming the file (and the line of a syntax error)."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "file not found"
        raise FileNotFoundError(f"{path}: {what}; expected reward_wrapper to name a Python file")
    spec = importlib.util.spec_from_file_location("reward_wrapper", path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: reward_wrapper is not a Python file (expected a .py file defining transform)")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)  # runs user code, by design (see module docstring)
    except SyntaxError as e:
        raise InputError(f"{path}:{e.lineno}: reward_wrapper is not valid Python ({e.msg})") from None
    except Exception as e:
        raise InputError(f"{path}: reward_wrapper failed on import ({type(e).__name__}: {e})") from None
    if not callable(getattr(mod, "transform", None)):
        raise InputError(f"{path}: reward_wrapper must define transform(records, response_tokens, rewards)")
    return mod.transform


class RLTrainer:
    """Holds the policy, the frozen reference, the reward and the optimiser; `step()` is one RL update."""

    def __init__(self, cfg: RLConfig, reward_fn=None, fast: bool = True):
        """fast=True: kv-cache sampling and shared prompt prefixes; fast=False: the naive reference path."""
        check_config(cfg)
        if reward_fn is None and cfg.reward_model is None:
            raise InputError("RLConfig: key 'reward_model' is null and no reward_fn was given; expected a reward "
                             "model directory")
        self.cfg, self.fast = cfg, fast
        torch.manual_seed(cfg.seed)
        self.policy, self.model_cfg = load_policy(cfg.policy_init)
        self.policy.train()
        self.ref, _ = load_policy(cfg.policy_ref)
        self.ref.requires_grad_(False)
        if reward_fn is None:
            rm, _ = load_rm(cfg.reward_model)
            reward_fn = lambda records, prompts_rep, responses: score(rm, prompts_rep, responses)
        self.reward_fn = reward_fn
        self.wrapper = load_reward_wrapper(cfg.reward_wrapper) if cfg.reward_wrapper else None
        self.by_family = group_by_family(read_jsonl(cfg.prompt_file))
        check_family_weights(cfg, self.by_family)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr)

    def _reward(self, records_rep, prompts_rep, responses):
        reward = torch.as_tensor(self.reward_fn(records_rep, prompts_rep, responses), dtype=torch.float32)
        if self.wrapper is not None:
            reward = torch.as_tensor(self.wrapper(records_rep, responses, reward), dtype=torch.float32)
        if reward.shape != (len(responses),) or not torch.isfinite(reward).all():
            raise ValueError(f"reward must be {len(responses)} finite numbers, got shape {tuple(reward.shape)}")
        return reward

    def _fast_passes(self, prompts, records_rep, uniforms, n):
        """kv-cache decoding; prompt prefixes computed once per prompt; inference mode for what is not
        differentiated (measured: splitting the batch over two threads gained nothing over 2 intra-op threads)."""
        cfg = self.cfg
        responses = sample(self.policy, prompts, n, cfg.temperature, uniforms=uniforms)
        logp, ent = response_logprobs_grouped(self.policy, prompts, responses, n, with_entropy=True,
                                              temperature=cfg.temperature)
        with torch.inference_mode():
            ref_logp = response_logprobs_grouped(self.ref, prompts, responses, n, temperature=cfg.temperature)
            reward = self._reward(records_rep, prompts.repeat_interleave(n, 0), responses)
        return logp, ent, ref_logp, reward

    def _naive_passes(self, prompts, prompts_rep, records_rep, uniforms, n):
        """The naive design the fast path is tested against: full recompute per sampled token, the fused
        attention kernel, every pass on the repeated prompts."""
        cfg = self.cfg
        model_lib.USE_SDPA, model_lib.FIRST_BLOCK_TABLE = True, False
        try:
            responses = sample_naive(self.policy, prompts, n, cfg.temperature, uniforms=uniforms)
            logp, ent = response_logprobs(self.policy, prompts_rep, responses, with_entropy=True,
                                          temperature=cfg.temperature)
            with torch.no_grad():
                ref_logp = response_logprobs(self.ref, prompts_rep, responses, temperature=cfg.temperature)
                reward = self._reward(records_rep, prompts_rep, responses)
        finally:
            model_lib.USE_SDPA, model_lib.FIRST_BLOCK_TABLE = False, True
        return logp, ent, ref_logp, reward

    def step(self) -> dict:
        cfg, n = self.cfg, self.cfg.samples_per_prompt
        records = sample_prompt_batch(self.by_family, cfg.family_weights, cfg.batch_prompts, self.gen)
        prompts = prompts_tensor(records)
        prompts_rep = prompts.repeat_interleave(n, 0)
        records_rep = [records[i // n] for i in range(len(prompts_rep))]
        uniforms = draw_uniforms(len(prompts_rep), self.gen)
        if self.fast:
            logp, ent, ref_logp, reward = self._fast_passes(prompts, records_rep, uniforms, n)
        else:
            logp, ent, ref_logp, reward = self._naive_passes(prompts, prompts_rep, records_rep, uniforms, n)
        kl = (logp.detach() - ref_logp).sum(1)
        shaped = reward - cfg.kl_coef * kl
        grouped = shaped.view(-1, n)
        adv = (grouped - grouped.mean(1, keepdim=True)).flatten()
        loss = -(adv * logp.sum(1)).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.opt.step()
        return {"proxy_reward": float(reward.mean()), "kl": float(kl.mean()), "shaped_reward": float(shaped.mean()),
                "entropy": float(ent.detach().mean()), "loss": float(loss.detach())}


def train_rl(cfg: RLConfig, out_dir, reward_fn=None, quiet: bool = False, fast: bool = True) -> list[dict]:
    """Run cfg.steps updates; out_dir then holds run_config.json, log.jsonl and the checkpoint(s), and nothing
    else (an existing out_dir is replaced as a whole, and only when the run completed: the run is written into a
    hidden sibling `.NAME.XXXX.partial` first, which a failure or an interruption removes; see rlhf.atomic).
    Returns the log rows."""
    out = check_out_dir(out_dir, "a directory for the run")
    if out.is_dir() and any(out.iterdir()) and not (out / "run_config.json").is_file():
        raise InputError(f"{out}: a directory that is not empty and holds no run (no run_config.json); train_rl "
                         "replaces its output directory whole: give a new or empty directory, or a previous run's")
    trainer = RLTrainer(cfg, reward_fn=reward_fn, fast=fast)     # checks and loads every input: writes nothing
    with atomic_dir(out) as work:
        write_json(work / "run_config.json", dataclasses.asdict(cfg))
        rows, acc, t0 = [], [], time.time()
        bar = progress(total=cfg.steps, desc=f"train_rl {out.name}", quiet=quiet)
        with open(work / "log.jsonl", "w") as log_fh:
            for step in range(1, cfg.steps + 1):
                acc.append(trainer.step())
                bar.update(1)
                if step % cfg.log_every == 0 or step == cfg.steps:
                    row = {"step": step, **{k: round(sum(a[k] for a in acc) / len(acc), 6) for k in acc[0]},
                           "elapsed_s": round(time.time() - t0, 3)}
                    rows.append(row)
                    log_fh.write(json.dumps(row) + "\n")
                    log_fh.flush()
                    bar.set_postfix(proxy=f"{row['proxy_reward']:.3f}", kl=f"{row['kl']:.2f}", refresh=False)
                    acc = []
                if cfg.save_every and step % cfg.save_every == 0 and step != cfg.steps:
                    save_policy(trainer.policy, trainer.model_cfg, work / f"step_{step}")
        bar.close()
        trainer.policy.eval()
        save_policy(trainer.policy, trainer.model_cfg, work)   # refuses NaN weights: then out stays as it was
    return rows


def load_config(path, overrides: dict | None = None) -> RLConfig:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: config file not found")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({json_error(e)})") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; expected a JSON object of RL config keys") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of RL config keys, got {type(raw).__name__}")
    raw.update(overrides or {})
    where = f"{path} (with --override {', '.join(sorted(overrides))})" if overrides else str(path)
    cfg = check_config(config_from_dict(RLConfig, raw, str(path)), where)
    return resolve_paths(cfg, path)


def main(argv=None):
    ap = Parser(prog="python -m rlhf.train_rl", description=first_paragraph(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--override", action="append", metavar="KEY=JSON", help="override a config key")
    ap.add_argument("--seed", type=seed_arg, default=None, help="shorthand for --override seed=N")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    setup_torch()
    ov = parse_override(a.override)
    if a.seed is not None:
        ov["seed"] = a.seed
    check_out_dir(a.out, "a directory for the run")
    cfg = load_config(a.config, ov)
    if not a.quiet:
        print(json.dumps(dataclasses.asdict(cfg), indent=2))
    rows = train_rl(cfg, a.out, quiet=a.quiet)
    print(json.dumps({"out": a.out, **rows[-1]}))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m rlhf.train_rl"))
