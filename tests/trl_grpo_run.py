"""A short GRPO run on examples/trl's toy task with audit.integrations.trl.SamplesCallback, for tests/test_trl_example.py
(marker trl). Run by `python` or `accelerate launch --multi_gpu --num_processes 2` (CPU processes: the
script sets use_cpu); nothing is downloaded.

    python tests/trl_grpo_run.py --out DIR [--steps 6 --save-steps 2 --seed 0] [--kill-after-step K] [--resume]
                                 [--conversational] [--rewards single|list|flaky] [--reward-model]
                                 [--log-only init|CHECKPOINT_DIR ...]

DIR/samples.jsonl: the samples file; DIR/trainer: the trainer's checkpoints; DIR/report-<rank>.json: what the
callback logged, its generation cost per process, its warnings, and what the reward functions were called with.
--kill-after-step K: the process kills itself (SIGKILL, no clean-up) right after the callback logged checkpoint K.
--log-only: no training; each checkpoint's weights are loaded and logged by the callback as that step (for
comparing a multi-process run's rows with one process's)."""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "trl"))
sys.path.insert(0, str(ROOT))

CALLS: list = []          # what the reward functions were called with (types and keyword names)
# a chat template of the tiny word-level vocabulary: role words around each message (the toy vocabulary has
# no markup, so the template writes the slice names it knows as role markers: visible in the logged prompt)
CHAT_TEMPLATE = ("{% for m in messages %}{{ 'alpha' if m['role'] == 'user' else 'beta' }} {{ m['content'] }} "
                 "{% endfor %}{% if add_generation_prompt %}gamma {% endif %}")


def rewards(kind: str):
    import toy_task as toy

    def proxy(prompts, completions, slice, trainer_state=None, completion_ids=None, **kw):  # noqa: A002
        CALLS.append({"prompt": type(prompts[0]).__name__, "completion": type(completions[0]).__name__,
                      "completion_ids": type(completion_ids[0]).__name__ if completion_ids else None,
                      "trainer_state": type(trainer_state).__name__, "columns": sorted(kw)})
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        shown = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        if kind == "list":     # not applicable on a quarter of delta's prompts (the key k3): None
            return [None if s == "delta" and "k3" in p else toy.true_quality(s, t) + toy._noise(p + "|" + t)
                    for p, t, s in zip(shown, texts, slice)]
        return [toy.proxy_reward(s, p, t) for p, t, s in zip(shown, texts, slice)]

    def brevity(prompts, completions, slice, **kw):  # noqa: A002
        """A second reward: shorter completions score higher; None on every delta prompt (not applicable)."""
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [None if s == "delta" else 1.0 - len(t.split()) / 6 for t, s in zip(texts, slice)]

    def flaky(prompts, completions, prompt_id=None, **kw):
        """A judge that fails on some calls (never in training here: only when a batch holds the held-out prompt
        eval-alpha-0, which training never sees): the rows it was to score get no proxy, training goes on."""
        if prompt_id is not None and "eval-alpha-0" in prompt_id:
            raise TimeoutError("the judge did not answer")
        return [0.0] * len(prompts)

    if kind == "list":
        return [proxy, brevity], [1.0, 0.1]
    if kind == "flaky":
        return [proxy, flaky], [1.0, 1.0]
    return [proxy], None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--save-steps", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-slice", type=int, default=20, help="held-out prompts per slice")
    ap.add_argument("--batch-size", type=int, default=8, help="the callback's generation batch")
    ap.add_argument("--train-batch", type=int, default=8, help="per_device_train_batch_size")
    ap.add_argument("--generations", type=int, default=4, help="num_generations")
    ap.add_argument("--kill-after-step", type=int, default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--conversational", action="store_true")
    ap.add_argument("--rewards", choices=["single", "list", "flaky"], default="single")
    ap.add_argument("--reward-model", action="store_true", help="a tiny reward model in the list too (weight 0.5)")
    ap.add_argument("--log-only", nargs="*", default=None)
    a = ap.parse_args(argv)

    import torch
    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import run as example
    from audit.integrations.trl import SamplesCallback
    out = Path(a.out)
    tok = example.tokenizer()
    if a.conversational:
        tok.chat_template = CHAT_TEMPLATE
    rng = random.Random(a.seed)

    def as_prompt(p):
        return [{"role": "user", "content": p["prompt"]}] if a.conversational else p["prompt"]

    train = Dataset.from_list([{"prompt": as_prompt(p), "slice": p["slice"]} for p in example.prompts(32, rng, "train")])
    held_out = [{**p, "prompt": as_prompt(p)} for p in example.prompts(a.per_slice, rng, "eval")]
    funcs, weights = rewards(a.rewards)
    classes = None
    if a.reward_model:
        from transformers import GPT2Config, GPT2ForSequenceClassification
        torch.manual_seed(1)
        rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=16, n_layer=1,
                                                      n_head=2, num_labels=1, pad_token_id=tok.pad_token_id))
        funcs, weights, classes = funcs + [rm], (weights or [1.0] * len(funcs)) + [0.5], [None] * len(funcs) + [tok]
    cfg = GRPOConfig(output_dir=str(out / "trainer"), per_device_train_batch_size=a.train_batch,
                     num_generations=a.generations,
                     max_completion_length=6, learning_rate=a.lr, lr_scheduler_type="constant", max_steps=a.steps,
                     save_strategy="steps", save_steps=a.save_steps, report_to="none", use_cpu=True, seed=a.seed,
                     disable_tqdm=True, dataloader_num_workers=0, logging_steps=100, reward_weights=weights)
    lm = example.model(tok, a.seed)
    trainer = GRPOTrainer(model=lm, reward_funcs=funcs, args=cfg, train_dataset=train, processing_class=tok,
                          reward_processing_classes=classes)
    cb = SamplesCallback(trainer, held_out, out / "samples.jsonl", family_key="slice", batch_size=a.batch_size)
    trainer.add_callback(cb)
    rank = trainer.accelerator.process_index

    class KillAfter(TrainerCallback):       # added after the samples callback: runs once it has logged the step
        def on_save(self, args, state, control, **kw):
            if state.global_step == a.kill_after_step:
                _report(out, rank, cb, caught)
                os.kill(os.getpid(), signal.SIGKILL)

    if a.kill_after_step is not None:
        trainer.add_callback(KillAfter())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if a.log_only is not None:
            from transformers import GPT2LMHeadModel
            for ckpt in a.log_only:
                step = int(Path(ckpt).name.split("-")[-1]) if "checkpoint-" in ckpt else 0
                if step:
                    trainer.model.load_state_dict(GPT2LMHeadModel.from_pretrained(ckpt).state_dict())
                trainer.state.global_step = step
                cb.log_checkpoint(trainer.state, ckpt if step else None)
        else:
            trainer.train(resume_from_checkpoint=True if a.resume else None)
    _report(out, rank, cb, caught)
    return 0


def _report(out: Path, rank: int, cb, caught) -> None:
    report = {"logged": cb.logged, "runs": cb.runs, "costs": cb.costs, "calls": CALLS[:3] + CALLS[-3:],
              "warnings": sorted({str(w.message) for w in caught if "SamplesCallback" in str(w.message)})}
    (out / f"report-{rank}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
