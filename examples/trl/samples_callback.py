"""A TRL (transformers) callback that logs a run's samples into the samples table of `python -m audit.samples`.

At the start of training and every `every` steps it samples the current policy on held-out prompts of every
slice (temperature 1.0, the policy as it would be deployed), scores each completion with the training reward
(the proxy) and appends one row per sample: sample_id, run (the checkpoint, "step-N"), family (the slice),
prompt_id, prompt, completion, proxy_reward, step. Generic: any causal LM, any tokenizer, any reward function
with TRL's signature `reward(prompts, completions, **columns) -> list[float]`."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import TrainerCallback


class SamplesTableCallback(TrainerCallback):
    def __init__(self, prompts: list[dict], reward_fn, tokenizer, out_path, *, every: int = 50,
                 max_new_tokens: int = 6, family_key: str = "slice", seed: int = 0):
        self.prompts, self.reward_fn, self.tok = prompts, reward_fn, tokenizer
        self.out_path, self.every, self.max_new_tokens = Path(out_path), every, max_new_tokens
        self.family_key, self.seed = family_key, seed
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self.out_path.write_text("")
        self.runs: list[str] = []

    @torch.no_grad()
    def log_checkpoint(self, model, step: int) -> None:
        run = f"step-{step}"
        was_training = model.training
        model.eval()
        gen = torch.Generator(device="cpu").manual_seed(self.seed * 100_003 + step)
        texts = [p["prompt"] for p in self.prompts]
        enc = self.tok(texts, return_tensors="pt", padding=True)
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=self.max_new_tokens, pad_token_id=self.tok.pad_token_id)
        completions = self.tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        columns = {self.family_key: [p[self.family_key] for p in self.prompts]}
        rewards = self.reward_fn(prompts=texts, completions=completions, **columns)
        with open(self.out_path, "a") as fh:
            for p, c, r in zip(self.prompts, completions, rewards):
                fh.write(json.dumps({"sample_id": f"{run}/{p['prompt_id']}", "run": run,
                                     "family": p[self.family_key], "prompt_id": p["prompt_id"],
                                     "prompt": p["prompt"], "completion": c.strip(), "proxy_reward": float(r),
                                     "step": step}) + "\n")
        self.runs.append(run)
        if was_training:
            model.train()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.log_checkpoint(model, 0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self.log_checkpoint(model, state.global_step)
