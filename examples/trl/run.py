"""python examples/trl/run.py --out DIR [--steps 300] [--seed 0]: a real RL run from a library users use, audited
from its logged samples (README "Bring your own run"; docs/samples.md).

1. A tiny randomly initialised causal LM (a transformers GPT-2 config, 2 layers, d 64; no download) and a word-level
   tokenizer built here.
2. TRL's GRPOTrainer trains it against examples/trl/toy_task.py's proxy reward, which is corrupted on two slices
   (a gamed token pays there). SamplesTableCallback logs every checkpoint's samples (held-out prompts, every
   slice, temperature 1.0) with their proxy reward into DIR/samples.jsonl: step-0 (the initial model, the
   reference) and every --every steps.
3. A random subset of every checkpoint x slice is labelled with the true quality function (the "experts"):
   DIR/gold.jsonl.
4. `python -m audit.samples` audits the table: DIR/audit/answer.json, summary.md, figures/.

Exit 0 when the audit named exactly the corrupted slices and did not ship a checkpoint that gamed them; 1
otherwise (the test in tests/test_trl_example.py runs this)."""
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


def label_gold(samples_path: Path, gold_path: Path, per_cell: int, rng: random.Random) -> int:
    """The experts: true quality of a simple random subset of every checkpoint x slice."""
    rows = [json.loads(line) for line in samples_path.read_text().splitlines()]
    cells = {}
    for r in rows:
        cells.setdefault((r["run"], r["family"]), []).append(r)
    gold = []
    for key in sorted(cells):
        for r in rng.sample(cells[key], min(per_cell, len(cells[key]))):
            gold.append({"sample_id": r["sample_id"], "gold": true_quality(r["family"], r["completion"])})
    rng.shuffle(gold)
    gold_path.write_text("".join(json.dumps(g) + "\n" for g in gold))
    return len(gold)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50, help="log a checkpoint's samples every N steps")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-per-slice", type=int, default=150, help="held-out prompts per slice per checkpoint")
    ap.add_argument("--gold-per-cell", type=int, default=40, help="gold labels per checkpoint x slice")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from samples_callback import SamplesTableCallback
    torch.set_num_threads(int(os.environ.get("RLHF_THREADS", "2")))
    rng = random.Random(a.seed)
    tok = tokenizer()
    lm = model(tok, a.seed)
    train = Dataset.from_list([{k: p[k] for k in ("prompt", "slice")} for p in prompts(256, rng, "train")])
    held_out = prompts(a.eval_per_slice, rng, "eval")
    logger = SamplesTableCallback(held_out, trl_reward, tok, out / "samples.jsonl", every=a.every, seed=a.seed)
    cfg = GRPOConfig(output_dir=str(out / "trainer"), per_device_train_batch_size=32, num_generations=8,
                     max_completion_length=6, learning_rate=a.lr, lr_scheduler_type="constant",
                     max_steps=a.steps, logging_steps=50,
                     report_to="none", save_strategy="no", use_cpu=True, seed=a.seed, temperature=1.0,
                     disable_tqdm=True, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=lm, reward_funcs=trl_reward, args=cfg, train_dataset=train,
                          processing_class=tok, callbacks=[logger])
    trainer.train()
    if logger.runs[-1] != f"step-{a.steps}":
        logger.log_checkpoint(trainer.model, a.steps)
    n_gold = label_gold(out / "samples.jsonl", out / "gold.jsonl", a.gold_per_cell, rng)
    print(f"[trl] trained {a.steps} GRPO steps, logged checkpoints {', '.join(logger.runs)}; {n_gold} gold labels "
          f"({time.time() - t0:.0f}s)", flush=True)

    r = subprocess.run([sys.executable, "-m", "audit.samples", "--samples", str(out / "samples.jsonl"),
                        "--gold", str(out / "gold.jsonl"), "--out", str(out / "audit"), "--reference", "step-0",
                        "--seed", str(a.seed)], cwd=ROOT)
    if r.returncode != 0:
        print(f"[trl] audit exited {r.returncode}", file=sys.stderr)
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
