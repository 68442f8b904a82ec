"""examples/trl end to end: a tiny randomly initialised GPT-2 trained by TRL's GRPOTrainer against a reward
corrupted on two slices, its checkpoints' samples logged by the packaged callback (audit.integrations.trl), the
rows to label drawn by `python -m audit.samples draw-gold` and labelled with the true function, then
python -m audit.samples. The example exits 0 only when the audit named exactly the corrupted slices and shipped no
checkpoint whose true quality fell on them (examples/trl/run.py). Beside it, the callback on its own and a
GRPOTrainer run stopped and resumed from its checkpoint. Needs .[trl]: `make test-trl` (deselected from make test
by the `trl` marker)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.trl
def test_trl_example_names_corrupted_slices(tmp_path):
    r = subprocess.run([sys.executable, "examples/trl/run.py", "--out", str(tmp_path / "trl")], cwd=ROOT,
                       capture_output=True, text=True)
    tail = "\n".join(line for line in r.stdout.splitlines() if line.startswith("[trl]"))
    assert r.returncode == 0, tail + r.stderr[-3000:]
    assert "flagged slices: delta, gamma (corrupted: gamma, delta)" in tail


def _toy():
    sys.path.insert(0, str(ROOT / "examples" / "trl"))
    import run as example                      # examples/trl/run.py: the tokenizer, the model, the prompts
    import toy_task
    return example, toy_task


@pytest.mark.trl
def test_callback_logs_resumes_and_leaves_the_training_rng_alone(tmp_path):
    """The packaged callback on a tiny GPT-2 with a trainer state of our own: rows in the samples schema on the
    model's device, seeded per checkpoint, the global RNG untouched; a restart on the same file skips what is
    logged already (no doubled row), and the proxy is the reward function's value."""
    import random
    from types import SimpleNamespace

    import torch

    from audit.integrations.trl import SamplesCallback
    example, toy = _toy()
    tok = example.tokenizer()
    lm = example.model(tok, 0)
    held_out = example.prompts(5, random.Random(0), "eval")
    path = tmp_path / "samples.jsonl"
    cb = SamplesCallback(held_out, toy.trl_reward, tok, path, every=2, max_new_tokens=4, family_key="slice")
    state = SimpleNamespace(global_step=0)
    rng = torch.get_rng_state()
    cb.on_train_begin(None, state, None, model=lm)
    assert torch.equal(rng, torch.get_rng_state()) and lm.training      # train mode given back
    for step in (1, 2):
        state.global_step = step
        cb.on_step_end(None, state, None, model=lm)
    assert cb.logged == ["step-0", "step-2"]
    restarted = SamplesCallback(held_out, toy.trl_reward, tok, path, every=2, max_new_tokens=4, family_key="slice")
    assert restarted.runs == ["step-0", "step-2"]
    state.global_step = 2                                        # resumed from checkpoint-2
    restarted.on_train_begin(None, state, None, model=lm)
    for step in (3, 4):
        state.global_step = step
        restarted.on_step_end(None, state, None, model=lm)
    restarted.on_train_end(None, state, None, model=lm)
    assert restarted.logged == ["step-4"]
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 3 * len(held_out) and len({r["sample_id"] for r in rows}) == len(rows)
    assert [r["run"] for r in rows[::len(held_out)]] == ["step-0", "step-2", "step-4"]
    for r in rows:
        assert set(r) == {"sample_id", "run", "family", "prompt_id", "prompt", "completion", "proxy_reward", "step"}
        assert r["proxy_reward"] == toy.trl_reward([r["prompt"]], [r["completion"]], [r["family"]])[0]
    again = SamplesCallback(held_out, toy.trl_reward, tok, tmp_path / "again.jsonl", max_new_tokens=4,
                            family_key="slice")
    again.log_checkpoint(lm, 0)
    assert [json.loads(x)["completion"] for x in (tmp_path / "again.jsonl").read_text().splitlines()] == \
        [r["completion"] for r in rows[:len(held_out)]]          # seeded per checkpoint: the same samples


@pytest.mark.trl
def test_a_grpo_run_stopped_and_resumed_gives_one_samples_file(tmp_path):
    """TRL's GRPOTrainer with the packaged callback, stopped after step 3 (a checkpoint at step 2) and resumed from
    that checkpoint: every logged checkpoint once in the samples file, nothing lost, nothing doubled."""
    import random

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from audit.integrations.trl import SamplesCallback
    example, toy = _toy()
    tok = example.tokenizer()
    rng = random.Random(0)
    train = Dataset.from_list([{k: p[k] for k in ("prompt", "slice")} for p in example.prompts(16, rng, "train")])
    held_out = example.prompts(3, rng, "eval")
    path = tmp_path / "samples.jsonl"

    class StopAt3(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 3:
                control.should_training_stop = True

    def trainer(extra):
        cfg = GRPOConfig(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=8, num_generations=4,
                         max_completion_length=4, learning_rate=1e-3, max_steps=4, save_strategy="steps",
                         save_steps=2, report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
                         dataloader_num_workers=0, logging_steps=10)
        cb = SamplesCallback(held_out, toy.trl_reward, tok, path, every=2, max_new_tokens=4, family_key="slice")
        return GRPOTrainer(model=example.model(tok, 0), reward_funcs=toy.trl_reward, args=cfg, train_dataset=train,
                           processing_class=tok, callbacks=[cb, *extra]), cb

    first, cb1 = trainer([StopAt3()])
    first.train()
    assert cb1.logged == ["step-0", "step-2", "step-3"]
    second, cb2 = trainer([])
    second.train(resume_from_checkpoint=str(tmp_path / "trainer" / "checkpoint-2"))
    assert cb2.logged == ["step-4"]                               # step-2 (the resume point) and step-3 skipped
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    runs = [r["run"] for r in rows]
    assert len({r["sample_id"] for r in rows}) == len(rows) == 4 * len(held_out)
    assert {run: runs.count(run) for run in runs} == {f"step-{s}": len(held_out) for s in (0, 2, 3, 4)}
