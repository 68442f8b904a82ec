"""The README / NOTES / TRAINING texts a task ships (what a real task's authors would have written)."""
from __future__ import annotations

from rlhf.vocab import FAMILIES

from .config import PILOT_MIX


def rm_training(cfg, n_rows: int, mse: float) -> str:
    return f"""# Reward model

2-layer bidirectional transformer (d_model 96, 4 heads, d_ff 192), LayerNorm output mean-pooled over all 14
positions, MLP head. Trained with MSE on the vendor's crowd batch: {n_rows} rows ({n_rows // len(FAMILIES)} per
family, reference-policy samples at temperature {cfg.crowd_temperature}), {cfg.rm_epochs} epochs, lr {cfg.rm_lr},
Adam, cosine schedule, batch {cfg.rm_batch}. Final training MSE {mse:.4f}.

`train.jsonl` is the vendor's QA sample of that batch ({cfg.qa_per_family} rows per family); the vendor keeps
the rest. Labels are meant to be the fraction of the 8 response positions that are right (0..1).
"""


def data_readme(cfg) -> str:
    mix = ", ".join(f"{f} {PILOT_MIX[f]:.3f}" for f in FAMILIES)
    return f"""# Data

- `prompts_train.jsonl`: {cfg.train_per_family} prompts per family (the RL pool, balanced).
- `prompts_dev.jsonl`: {cfg.dev_prompts} prompts with the pilot-traffic mix ({mix}); deployment traffic is
  balanced across the six families, so this is not the deployment mix.
- `gold_calib.jsonl`: {cfg.gold_per_family} reference-policy samples per family (temperature 1.0) with expert
  labels (the fraction of positions right, plus small expert noise).

Records: prompt `{{"id","family","attrs":[a1,a2,a3,a4]}}`; labelled rows add `"response"` (8 content tokens) and
`"label"`.
"""


def runs_readme(cfg) -> str:
    return f"""# Runs

Every run starts from `policy/` and is KL-regularised towards it, trained with `python -m rlhf.train_rl`
against `reward_model/`: batch_prompts {cfg.run_batch_prompts}, samples_per_prompt {cfg.run_samples_per_prompt},
lr 3e-4, temperature 1.0, max_grad_norm 1.0. Each dir holds run_config.json, log.jsonl, the checkpoint,
dev_eval.json (proxy reward on the dev prompts, KL, RM-gold agreement) and NOTES.md.

| run | kl_coef | steps | prompt mix | seed |
|---|---|---|---|---|
| kl002-s1500 | 0.02 | 1500 | balanced | 1 |
| default-s800 | 0.1 | 800 | balanced | 0 |
| kl05-s800 | 0.5 | 800 | balanced | 2 |
| pilotmix-s800 | 0.1 | 800 | pilot-traffic mix | 3 |
| fourfam-s800 | 0.1 | 800 | anvil/birch/cobalt/fjord only | 4 |
{"" if cfg.run_steps_scale == 1 else f"(this is a '{cfg.preset}' world: steps are scaled by {cfg.run_steps_scale})"}
"""


def run_notes(name, kl, steps, weights, seed, cfg, rows, secs, ev) -> str:
    mix = "balanced" if weights is None else ", ".join(f"{k} {v:g}" for k, v in weights.items())
    last = rows[-1]
    return f"""# {name}

kl_coef {kl}, {last['step']} steps, prompt mix: {mix}, seed {seed}. Trained in {secs:.0f} s.
Final log row: proxy reward {last['proxy_reward']:.3f}, KL {last['kl']:.2f}, entropy {last['entropy']:.2f}.
Dev evaluation (pilot mix): proxy mean {ev['proxy_mean']:.3f}, KL {ev['kl_mean']:.2f}.
"""
