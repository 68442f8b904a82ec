"""SamplesCallback: a transformers / TRL TrainerCallback that logs a run's checkpoints into the samples table of
`python -m audit.samples` (needs `pip install rlhf-audit[trl]`).

At the start of training and every `every` optimiser steps (and at the end, unless that step is logged already) it
samples the current policy on held-out prompts of every family (temperature 1.0 by default: the policy as it would
be deployed), scores each completion with the training reward (the proxy) and appends one row per sample through
audit.integrations.writer.SamplesWriter: sample_id (run/prompt_id), run ("step-N"), family, prompt_id, prompt,
completion, proxy_reward, step.

Generic: any causal LM with `generate` and any tokenizer (batches are left-padded, as decoder-only generation
needs), on the model's device (CPU, CUDA, MPS); any reward function with TRL's signature
`reward(prompts, completions, **columns) -> list[float]`, the columns being the held-out prompts' other keys.
Sampling is seeded per checkpoint (seed, step) inside torch.random.fork_rng, so the training's random state is
left as it was. Resume-safe: the file is appended to, never truncated, and a checkpoint already in it (a run
restarted from a checkpoint passes steps it logged before) is skipped, so a resumed run gives one file with no
lost or doubled row. Every process generates (so that sharded models, whose generate is collective, work), only the
main process writes."""
from __future__ import annotations

from pathlib import Path

try:
    import torch
    from transformers import TrainerCallback
except ImportError as e:                                   # pragma: no cover - depends on the environment
    raise ImportError(f"audit.integrations.trl needs torch and transformers ({e}): pip install rlhf-audit[trl]") \
        from e

from .writer import SamplesWriter


class SamplesCallback(TrainerCallback):
    """prompts: [{"prompt": str, "prompt_id": str, <family_key>: str, ...}] held out from training; reward_fn:
    TRL's reward-function signature; out: a samples.jsonl path or a SamplesWriter."""

    def __init__(self, prompts: list[dict], reward_fn, tokenizer, out, *, every: int = 50, max_new_tokens: int = 64,
                 family_key: str = "family", seed: int = 0, temperature: float = 1.0, batch_size: int = 64,
                 log_at_end: bool = True, run_name: str = "step-{step}"):
        missing = [f"prompts[{i}]: missing {k!r}" for i, p in enumerate(prompts)
                   for k in ("prompt", "prompt_id", family_key) if k not in p]
        if not prompts or missing:
            raise ValueError("SamplesCallback: " + ("; ".join(missing[:5]) or "no prompts") +
                             f" (each prompt needs 'prompt', 'prompt_id' and the family key {family_key!r})")
        if every < 1 or batch_size < 1:
            raise ValueError(f"SamplesCallback: every={every}, batch_size={batch_size}: expected integers >= 1")
        self.prompts, self.reward_fn, self.tok = prompts, reward_fn, tokenizer
        self.writer = out if isinstance(out, SamplesWriter) else SamplesWriter(Path(out))
        self.every, self.max_new_tokens, self.family_key, self.seed = every, max_new_tokens, family_key, seed
        self.temperature, self.batch_size = temperature, batch_size
        self.log_at_end, self.run_name = log_at_end, run_name
        self.logged: list[str] = []        # runs logged by this process's callback (the file may hold earlier ones)

    @property
    def runs(self) -> list[str]:
        """Every run in the samples file, those of earlier (interrupted) attempts included."""
        return self.writer.runs

    def _generate(self, model, texts: list[str], step: int) -> list[str]:
        device = next(model.parameters()).device
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        side, self.tok.padding_side = getattr(self.tok, "padding_side", "right"), "left"
        forked = [device.index or 0] if device.type == "cuda" else []
        out = []
        try:
            with torch.random.fork_rng(devices=forked):
                torch.manual_seed(self.seed * 100_003 + step)
                for i in range(0, len(texts), self.batch_size):
                    enc = self.tok(texts[i:i + self.batch_size], return_tensors="pt", padding=True)
                    enc = {k: v.to(device) for k, v in enc.items()}
                    gen = model.generate(**enc, do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0,
                                         max_new_tokens=self.max_new_tokens, pad_token_id=pad)
                    out += self.tok.batch_decode(gen[:, enc["input_ids"].shape[1]:].cpu(), skip_special_tokens=True)
        finally:
            self.tok.padding_side = side
        return out

    @torch.no_grad()
    def log_checkpoint(self, model, step: int) -> bool:
        """Sample, score and append checkpoint `step`; False (nothing done) when the file has it already."""
        run = self.run_name.format(step=step)
        if self.writer.has_run(run):
            return False
        was_training = model.training
        model.eval()
        try:
            texts = [p["prompt"] for p in self.prompts]
            completions = [c.strip() for c in self._generate(model, texts, step)]   # logged as scored
            columns = {k: [p.get(k) for p in self.prompts] for k in self.prompts[0] if k != "prompt"}
            rewards = list(self.reward_fn(prompts=texts, completions=completions, **columns))
        finally:
            if was_training:
                model.train()
        if len(rewards) != len(texts):
            raise ValueError(f"SamplesCallback: the reward function returned {len(rewards)} rewards for "
                             f"{len(texts)} completions")
        rows = [self.writer.row(run, p[self.family_key], p["prompt_id"], c, r, prompt=p["prompt"], step=step)
                for p, c, r in zip(self.prompts, completions, rewards)]
        self.writer.log_many(rows)
        self.logged.append(run)
        return True

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.log_checkpoint(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self.log_checkpoint(model, state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.log_at_end and model is not None:
            self.log_checkpoint(model, state.global_step)
