"""TRL end to end (marker trl: `make test-trl`, deselected from make test). A tiny randomly initialised GPT-2 built in
the test (no hub, no network) trained by TRL's GRPOTrainer, its checkpoints logged by the packaged callback
(audit.integrations.trl.SamplesCallback), and audited by `python -m audit.samples`:

* examples/trl: the audit names exactly the two corrupted slices and ships no checkpoint whose true quality fell;
* two processes (`accelerate launch`, CPU, gloo): one samples file, each held-out prompt once per saved
  checkpoint, each process generating half of them, and the rows equal to one process's on the same checkpoints;
  killed (SIGKILL) after a checkpoint, that checkpoint lost, resumed from the one before: the table the audit reads
  equals the uninterrupted run's (bar the re-logged rows' sample ids) and so does the audit's answer.json (bar
  its inputs block);
* a conversational dataset (the tokenizer's chat template applied, reward functions given message lists) with a
  reward model in the reward list;
* a reward list with weights whose functions return None on some rows: training finishes, those rows are logged
  without a proxy, and the audit reports them and certifies their cells from the gold labels.

The generation cost per process is printed (-s shows it), not asserted on time: speed is for benchmarks."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "trl_grpo_run.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RLHF_THREADS": "1",
       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
PER_SLICE, SLICES, BATCH = 20, 4, 8          # tests/trl_grpo_run.py's defaults: 80 held-out prompts, batches of 8


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(out: Path, *args, processes: int = 1, ok: bool = True) -> subprocess.CompletedProcess:
    """tests/trl_grpo_run.py, in one process or under `accelerate launch` (torchrun, gloo on CPU: accelerate's
    --cpu flag alone launches a single process; --multi_gpu with the script's use_cpu=True gives CPU processes)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), *map(str, args)]
    if processes > 1:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_port()), *cmd[1:]]
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    if ok:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def rows_of(path: Path) -> list:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def report(out: Path, rank: int = 0) -> dict:
    return json.loads((out / f"report-{rank}.json").read_text())


def audit(out: Path, per_cell: int, *extra) -> dict:
    """draw-gold, the experts (the toy task's true quality), the audit; its answer.json."""
    sys.path.insert(0, str(ROOT / "examples" / "trl"))
    import toy_task
    samples, gold = out / "samples.jsonl", out / "to_label.jsonl"
    cmd = [sys.executable, "-m", "audit.samples"]
    r = subprocess.run(cmd + ["draw-gold", "--samples", samples, "--per-cell", str(per_cell), "--out", gold,
                              "--seed", "0"], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    gold.write_text("".join(json.dumps({**x, "gold": toy_task.true_quality(x["family"], x["completion"])}) + "\n"
                            for x in rows_of(gold)))
    r = subprocess.run(cmd + ["--samples", samples, "--gold", gold, "--out", out / "audit", "--reference", "step-0",
                              "--seed", "0", "--no-figures", *extra], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads((out / "audit" / "answer.json").read_text())


def in_force(rows: list) -> list:
    """The rows the audit reads, sample_id aside (re-logged rows get new ids), checkpoint paths as their names."""
    return [{k: (Path(v).name if k == "checkpoint" and v else v) for k, v in r.items() if k != "sample_id"}
            for r in rows if not r.get("superseded")]


@pytest.mark.trl
def test_trl_example_names_corrupted_slices(tmp_path):
    r = subprocess.run([sys.executable, "examples/trl/run.py", "--out", str(tmp_path / "trl")], cwd=ROOT, env=ENV,
                       capture_output=True, text=True)
    tail = "\n".join(line for line in r.stdout.splitlines() if line.startswith("[trl]"))
    print(tail)
    assert r.returncode == 0, tail + r.stderr[-3000:]
    assert "flagged slices: delta, gamma (corrupted: gamma, delta)" in tail
    rows = rows_of(tmp_path / "trl" / "samples.jsonl")
    assert [r["checkpoint"] for r in rows if r["prompt_id"] == rows[0]["prompt_id"]] == \
        [None] + [str(tmp_path / "trl" / "trainer" / f"checkpoint-{s}") for s in range(50, 301, 50)]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """A 6-step GRPO run on two processes, a checkpoint saved every 2 steps."""
    out = tmp_path_factory.mktemp("two-processes")
    run(out, processes=2)
    return out


@pytest.mark.trl
def test_two_processes_log_each_prompt_once_per_checkpoint(two_processes, tmp_path):
    out = two_processes
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["samples.jsonl"]        # one file, the main process's
    rows = rows_of(out / "samples.jsonl")
    runs = ["step-0", "step-2", "step-4", "step-6"]
    n = PER_SLICE * SLICES
    assert len(rows) == n * len(runs) and len({r["sample_id"] for r in rows}) == len(rows)
    assert sorted({(r["run"], r["prompt_id"]) for r in rows}) == sorted({(x, r["prompt_id"]) for r in rows for x in runs})
    assert [r["checkpoint"] for r in rows[::n]] == [None] + [str(out / "trainer" / f"checkpoint-{s}") for s in (2, 4, 6)]
    assert all(Path(r["checkpoint"]).is_dir() for r in rows if r["checkpoint"])     # a logged run is a checkpoint
    r0, r1 = report(out, 0), report(out, 1)
    assert r0["logged"] == r1["logged"] == runs and r0["warnings"] == []
    for c in r0["costs"]:          # each process generated half of the prompts (5 of the 10 batches of 8)
        assert [(p["process"], p["prompts"]) for p in c["processes"]] == [(0, n // 2), (1, n // 2)]
    # the same checkpoints logged from disk by two processes and by one: the same rows -- the batches and their
    # seeds do not depend on the number of processes (deterministic CPU generation)
    checkpoints = ["init", *(out / "trainer" / f"checkpoint-{s}" for s in (2, 4, 6))]
    one, both = tmp_path / "one-process", tmp_path / "two-processes"
    run(one, "--log-only", *checkpoints)
    run(both, "--log-only", *checkpoints, processes=2)
    assert rows_of(both / "samples.jsonl") == rows_of(one / "samples.jsonl")
    assert all(len(c["processes"]) == 2 for c in report(both)["costs"])
    # and the rows logged during training: step 0 (the same initial weights) is the same; a trained checkpoint's
    # weights as held in training and as loaded from its files may round a near-tie of two tokens apart (float
    # kernels' bits, not the callback's draws): counted here, not pinned
    logged = rows_of(one / "samples.jsonl")
    assert rows[:n] == logged[:n]
    apart = sum(x != y for x, y in zip(rows[n:], logged[n:]))
    print(f"\n[trl] rows logged in training vs from the checkpoints' files: {apart} of {len(rows) - n} apart")
    assert apart <= len(rows) // 50
    # the cost: today's callback generated every prompt on every process (what one process does here); CPU
    # seconds of the logging call in each process (its wall time depends on what else the machine runs), like
    # for like: the same checkpoints logged from their files by two processes and by one
    def per_checkpoint(costs, key):
        return [max(p[key] for p in c["processes"]) for c in costs]
    lines = []
    for key, what in (("generate_cpu_seconds", "generate calls, CPU s"), ("cpu_seconds", "whole logging call, CPU s"),
                      ("seconds", "whole logging call, wall s")):
        two, single = per_checkpoint(report(both)["costs"], key), per_checkpoint(report(one)["costs"], key)
        lines.append(f"{what}: 2 processes {', '.join(f'{s:.3f}' for s in two)} (the busier); 1 process "
                     f"{', '.join(f'{s:.3f}' for s in single)}; ratio {sum(two) / sum(single):.2f}")
    print(f"\n[trl] per checkpoint, {n} prompts, each of 2 processes generating {n // 2} (today's callback: all "
          f"{n} on every process, as 1 process here):\n[trl]   " + "\n[trl]   ".join(lines))


@pytest.mark.trl
def test_killed_and_resumed_equals_the_uninterrupted_run(two_processes, tmp_path):
    """Killed (SIGKILL) right after checkpoint-4 was logged, checkpoint-4 lost, resumed from checkpoint-2: the rows
    of step 4 are superseded (kept, marked) and logged again; the table the audit reads and the audit itself are
    the uninterrupted run's."""
    out = tmp_path / "resumed"
    killed = run(out, "--kill-after-step", "4", processes=2, ok=False)
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr + killed.stdout
    import shutil
    shutil.rmtree(out / "trainer" / "checkpoint-4")              # the checkpoint was lost: resume from the last one
    run(out, "--resume", processes=2)
    assert report(out)["logged"] == ["step-4", "step-6"]        # step-2 (the resume point) is in the file already
    rows, plain = rows_of(out / "samples.jsonl"), rows_of(two_processes / "samples.jsonl")
    stale = [r for r in rows if r.get("superseded")]
    assert {r["run"] for r in stale} == {"step-4"} and len(stale) == PER_SLICE * SLICES
    assert in_force(rows) == in_force(plain)
    a_plain = audit(two_processes, 10, "--stress-examples", "4")
    a_resumed = audit(out, 10, "--stress-examples", "4")
    assert a_resumed["inputs"].pop("superseded_rows") == len(stale) and a_plain["inputs"].pop("superseded_rows") == 0
    a_plain.pop("inputs"), a_resumed.pop("inputs")               # the file's fingerprint differs: it holds more
    assert a_resumed == a_plain


@pytest.mark.trl
def test_a_conversational_dataset_gets_the_chat_template(tmp_path):
    """Prompts as chat messages: generated from the tokenizer's chat template (as GRPOTrainer applies it), reward
    functions given message lists, a reward model in the list scored as TRL scores it, and a judge that raises on
    one batch: its rows are logged without a proxy, training goes on."""
    out = tmp_path / "chat"
    run(out, "--conversational", "--reward-model", "--rewards", "flaky", "--steps", "2")
    rows = rows_of(out / "samples.jsonl")
    held = {r["prompt_id"] for r in rows}
    assert len(rows) == 2 * len(held) == 2 * PER_SLICE * SLICES
    for r in rows[:5]:        # the template: 'alpha' before a user message, 'gamma' as the generation prompt
        words = r["prompt"].split()
        assert words[0] == "alpha" and words[-1] == "gamma" and words[1] == r["family"], r["prompt"]
    calls = report(out)["calls"]
    assert calls and all(c["prompt"] == "list" and c["completion"] == "list" and c["completion_ids"] == "list"
                         and c["trainer_state"] == "TrainerState" for c in calls)
    rec = json.loads(rows[0]["generation"])
    assert rec["prompts"] == "chat template (the trainer's)" and rec["proxy"]["reward_funcs"] == \
        ["proxy", "flaky", "reward_2"] and rec["proxy"]["reward_weights"] == [1.0, 1.0, 0.5]
    # the flaky judge raised on the batch holding eval-alpha-0 (batches of 8 in the file's order): those rows have
    # no proxy and a warning said so once; the others get TRL's weighted sum, the reward model's part included
    failed = {r["prompt_id"] for r in rows[:BATCH]}
    assert "eval-alpha-0" in failed
    assert report(out)["warnings"] == [
        "SamplesCallback: reward function 'flaky' raised TimeoutError: the judge did not answer; the rows it was to "
        "score are logged without a proxy, training goes on",
        "SamplesCallback: some rows have no proxy (every reward function returned None or NaN for them, or one "
        "failed): logged without one; the audit counts them"]
    for r in rows:
        v = r["rewards"]
        if r["prompt_id"] in failed:
            assert r["proxy_reward"] is None and v["flaky"] is None and v["reward_2"] is not None
        else:
            assert r["proxy_reward"] == pytest.approx(v["proxy"] + v["flaky"] + 0.5 * v["reward_2"], abs=1e-12)


@pytest.mark.trl
def test_a_reward_returning_none_never_stops_training_and_the_audit_counts_it(tmp_path):
    """Two reward functions with weights 1 and 0.1; both return None on delta's prompts with the key k3 (the second
    on all of delta): training finishes, those rows are logged without a proxy (a warning, once), and the audit
    reports them per cell and certifies those cells from the gold labels alone."""
    out = tmp_path / "none"
    run(out, "--rewards", "list", "--steps", "60", "--save-steps", "30", "--per-slice", "60", "--lr", "3e-3",
        "--train-batch", "32", "--generations", "8", "--batch-size", "64")
    rows = rows_of(out / "samples.jsonl")
    none = [r for r in rows if r["proxy_reward"] is None]
    assert none and all(r["family"] == "delta" and "k3" in r["prompt"] for r in none)
    assert all(r["rewards"] == {"proxy": None, "brevity": None} for r in none)
    assert report(out)["logged"] == ["step-0", "step-30", "step-60"]
    assert report(out)["warnings"] == ["SamplesCallback: some rows have no proxy (every reward function returned None "
                                       "or NaN for them, or one failed): logged without one; the audit counts them"]
    for r in rows:
        if r["proxy_reward"] is not None:
            vals = r["rewards"]
            assert r["proxy_reward"] == pytest.approx(vals["proxy"] + 0.1 * (vals["brevity"] or 0.0)
                                                      if vals["proxy"] is not None else 0.1 * vals["brevity"])
    a = audit(out, 30, "--stress-examples", "4")
    per_cell = {}
    for r in none:
        per_cell[r["run"]] = per_cell.get(r["run"], 0) + 1
    assert a["missing_proxy"]["rows"] == len(none)
    assert a["missing_proxy"]["cells"] == {name: {"delta": {"missing": k, "of": 60}} for name, k in per_cell.items()}
    for v in a["runs"].values():
        p = v["per_family"]["delta"]
        assert p["lam"] == 0 and p["ci95"] == p["ci95_gold_only"]        # delta: its gold rows alone
        assert p["n_gold"] == 30
    # 60 steps of an honest proxy (measured: every slice's true quality up by ~0.7): certified, delta from gold
    c = a["certification"]
    print(f"\n[trl] None rewards: {len(none)} of {len(rows)} rows without a proxy; certified {c['run']}: {c['basis']}")
    assert c["run"] in ("step-30", "step-60") and c["improved_over_reference"] and "delta" in c["families_improved"]
    summary = (out / "audit" / "summary.md").read_text()
    assert f"**{len(none)} of {len(rows)} rows have no proxy**" in summary
    record = json.loads(rows[0]["generation"])              # how every run was sampled, shown by the audit
    assert a["generation"] == {"by_run": {name: [record] for name in ("step-0", "step-30", "step-60")},
                               "runs_without": [], "same_for_every_run": True}
    assert "Generation: every run sampled the same way" in summary


@pytest.mark.trl
def test_what_the_callback_cannot_log_is_refused_at_once(tmp_path):
    """Bad held-out prompts and trainers whose rollouts are not single generate calls: a clear error when the
    callback is made, before any training."""
    from types import SimpleNamespace

    from audit.integrations.trl import SamplesCallback
    ok = [{"prompt": "alpha k0", "prompt_id": "a", "slice": "alpha"}]
    with pytest.raises(ValueError, match=r"prompts\[1\]: missing 'slice'; prompt_id 'a' given 2 times"):
        SamplesCallback(SimpleNamespace(), ok + [{"prompt": "beta k1", "prompt_id": "a"}], tmp_path / "s.jsonl",
                        family_key="slice")
    with pytest.raises(ValueError, match="prompts mix plain text and chat messages"):
        SamplesCallback(SimpleNamespace(), ok + [{"prompt": [{"role": "user", "content": "x"}], "prompt_id": "b",
                                                  "slice": "beta"}], tmp_path / "s.jsonl", family_key="slice")
    with pytest.raises(ValueError, match="the trainer has tools: its multi-turn rollouts"):
        SamplesCallback(SimpleNamespace(tools=[print]), ok, tmp_path / "s.jsonl", family_key="slice")
    with pytest.raises(ValueError, match="the trainer has no 'accelerator': expected a TRL GRPOTrainer"):
        SamplesCallback(SimpleNamespace(), ok, tmp_path / "s.jsonl", family_key="slice")
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.trl
def test_a_vllm_trainer_is_sampled_with_generate_and_says_so():
    """A trainer that generates with vLLM: the callback samples with model.generate and the trainer's sampling
    settings, warns, and records the fallback and the vLLM-only generation_kwargs it did not apply (the trainer's
    attributes as GRPOTrainer sets them with use_vllm; no vLLM engine is started here)."""
    from types import SimpleNamespace

    from audit.integrations.trl import SamplesCallback
    sys.path.insert(0, str(ROOT / "examples" / "trl"))
    import run as example
    tok = example.tokenizer()
    trainer = SimpleNamespace(use_vllm=True, vllm_mode="colocate", processing_class=tok, max_completion_length=12,
                              eos_token_ids=[tok.eos_token_id], temperature=0.7, top_p=0.9, top_k=50, min_p=None,
                              repetition_penalty=1.1, args=SimpleNamespace(generation_kwargs={"logprobs": 2}))
    cb = SamplesCallback.__new__(SamplesCallback)
    cb.conversational, cb.seed, cb.batch_size, cb.reward_names, cb.reward_weights = False, 0, 8, ["r"], [1.0]
    cb.eos_ids = [tok.eos_token_id]
    with pytest.warns(RuntimeWarning, match=r"the trainer generates with vLLM \(colocate\); these samples come from "
                                             r"transformers' model.generate"):
        config, record = cb._generation(trainer, {"max_new_tokens": 16})
    rec = json.loads(record)
    assert rec["engine"] == "transformers generate (not the trainer's vLLM engine)"
    assert '{"logprobs": 2}' in rec["vllm_fallback"] and rec["overrides"] == {"max_new_tokens": 16}
    assert rec["sampling"] == {"do_sample": True, "max_new_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 50,
                               "min_p": None, "repetition_penalty": 1.1}
    assert (config.max_new_tokens, config.temperature, config.top_p, config.top_k) == (16, 0.7, 0.9, 50)
