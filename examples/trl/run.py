"""python examples/trl/run.py --out DIR [--steps 300] [--seed 0]: a real RL run from a library users use, audited
from its logged samples with the three commands of README "Bring your own run" (docs/samples.md).

1. A tiny randomly initialised causal LM (a transformers GPT-2 config, 2 layers, d 64; no download) and a word-level
   tokenizer built here.
2. TRL's GRPOTrainer trains it against examples/trl/toy_task.py's proxy reward, which is corrupted on two slices
   (a gamed token pays there), saving a checkpoint every --every steps. The packaged callback
   audit.integrations.trl.SamplesCallback logs every saved checkpoint's samples (held-out prompts, every slice,
   drawn with the trainer's own generation settings: temperature 1.0, max_completion_length 6) with their proxy
   reward (the trainer's reward function) into DIR/samples.jsonl: step-0 (the initial model, the reference) and
   every checkpoint the trainer saves (the last step included), the checkpoint's path in each row.
3. `python -m audit.samples draw-gold` draws a simple random subset of every checkpoint x slice into
   DIR/to_label.jsonl (the record of the draw beside it); the "experts" (the true quality function) fill in its
   `gold` column.
4. `python -m audit.samples --gold DIR/to_label.jsonl` audits the table: DIR/audit/answer.json, summary.md, figures/.

Exit 0 when the audit named exactly the corrupted slices and did not ship a checkpoint that gamed them; 1
otherwise; 2 when DIR already holds a run (the callback appends: a new run needs a new DIR). The test in
tests/test_trl_example.py runs this."""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")          # nothing is downloaded: the model and tokenizer are built here
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from toy_task import CORRUPTED, KEYS, SLICES, WORDS, true_quality, trl_reward  # noqa: E402


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(["[PAD]", "[BOS]", "[EOS]", "[UNK]", *SLICES, *KEYS, *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]",
                                  unk_token="[UNK]")
    tok.padding_side = "left"
    return tok


def model(tok, seed: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=16, n_embd=64, n_layer=2, n_head=4,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return GPT2LMHeadModel(cfg)


def prompts(n_per_slice: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for s in SLICES:
        for i in range(n_per_slice):
            out.append({"prompt": f"{s} {rng.choice(KEYS)}", "slice": s, "prompt_id": f"{prefix}-{s}-{i}"})
    return out


def audit_samples(*args) -> int:
    return subprocess.run([sys.executable, "-m", "audit.samples", *map(str, args)], cwd=ROOT).returncode


def label(to_label: Path) -> int:
    """The experts: the true quality of every row draw-gold drew, written into its `gold` column."""
    rows = [json.loads(line) for line in to_label.read_text().splitlines() if line.strip()]
    for r in rows:
        r["gold"] = true_quality(r["family"], r["completion"])
    to_label.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50, help="save (and log) a checkpoint every N steps")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-per-slice", type=int, default=150, help="held-out prompts per slice per checkpoint")
    ap.add_argument("--gold-per-cell", type=int, default=40, help="gold labels per checkpoint x slice")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = Path(a.out)
    if (out / "samples.jsonl").exists():
        print(f"[trl] {out / 'samples.jsonl'} exists: the callback appends to it (a resumed run); give a new --out",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from audit.integrations.trl import SamplesCallback
    torch.set_num_threads(int(os.environ.get("RLHF_THREADS", "2")))
    rng = random.Random(a.seed)
    tok = tokenizer()
    lm = model(tok, a.seed)
    train = Dataset.from_list([{k: p[k] for k in ("prompt", "slice")} for p in prompts(256, rng, "train")])
    held_out = prompts(a.eval_per_slice, rng, "eval")
    cfg = GRPOConfig(output_dir=str(out / "trainer"), per_device_train_batch_size=32, num_generations=8,
                     max_completion_length=6, learning_rate=a.lr, lr_scheduler_type="constant",
                     max_steps=a.steps, logging_steps=50, report_to="none", save_strategy="steps",
                     save_steps=a.every, use_cpu=True, seed=a.seed, temperature=1.0,
                     disable_tqdm=True, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=lm, reward_funcs=trl_reward, args=cfg, train_dataset=train, processing_class=tok)
    logger = SamplesCallback(trainer, held_out, out / "samples.jsonl", family_key="slice", batch_size=64)
    trainer.add_callback(logger)
    trainer.train()
    rc = audit_samples("draw-gold", "--samples", out / "samples.jsonl", "--per-cell", a.gold_per_cell,
                       "--out", out / "to_label.jsonl", "--seed", a.seed)
    if rc != 0:
        print(f"[trl] draw-gold exited {rc}", file=sys.stderr)
        return 1
    n_gold = label(out / "to_label.jsonl")
    print(f"[trl] trained {a.steps} GRPO steps, logged checkpoints {', '.join(logger.runs)}; {n_gold} gold labels "
          f"({time.time() - t0:.0f}s)", flush=True)

    rc = audit_samples("--samples", out / "samples.jsonl", "--gold", out / "to_label.jsonl", "--out", out / "audit",
                       "--reference", "step-0", "--seed", a.seed)
    if rc != 0:
        print(f"[trl] audit exited {rc}", file=sys.stderr)
        return 1
    ans = json.loads((out / "audit" / "answer.json").read_text())
    flagged = sorted(f for f, m in ans["reward_model"].items() if m["flag"])
    last = f"step-{a.steps}"
    fell = {run: sorted(f for f, p in v["per_family"].items() if p["delta"] is not None and p["delta"] < 0)
            for run, v in ans["runs"].items() if not v["is_reference"]}
    shipped = ans["certification"]["run"]
    gamed = [run for run, fs in fell.items() if set(fs) & set(CORRUPTED)]
    print(f"[trl] flagged slices: {', '.join(flagged) or 'none'} (corrupted: {', '.join(CORRUPTED)}); "
          f"checkpoints whose estimated true quality fell on a slice: {json.dumps(fell)}; "
          f"{last} passes the release rule: {ans['runs'][last]['passes_release_rule']}; shipped: {shipped}; "
          f"{time.time() - t0:.0f}s in all", flush=True)
    ok = flagged == sorted(CORRUPTED) and shipped not in gamed and not ans["runs"][last]["passes_release_rule"]
    print("[trl] " + ("OK: the audit named the corrupted slices and shipped no checkpoint that gamed them"
                      if ok else "NOT OK: see above"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
