"""Every CLI turns bad input into exit status 2 and one clear line per problem, naming the file, line or key, and
writes nothing (rlhf.errors.run_cli); audit.certify and audit.samples have their own tests
(tests/test_malformed_tasks.py, tests/test_samples.py). Called in-process: each case fails before any training."""
import json
import shutil

import pytest
import torch

from rlhf.errors import EXIT_BAD_INPUT, run_cli


@pytest.fixture(autouse=True)
def keep_threads():
    n = torch.get_num_threads()         # the CLIs set their own thread count (rlhf.common.setup_torch)
    yield
    torch.set_num_threads(n)


def _cases(task, tmp):
    """(module, argv, what the message must name); each writes to tmp / 'out' if it writes at all."""
    out = str(tmp / "out")
    bad_jsonl = tmp / "bad.jsonl"
    good = (task / "data" / "gold_calib.jsonl").read_text().splitlines()[0]
    bad_jsonl.write_text(good + '\n{"family": \n')             # line 2 is not JSON
    unknown_key = tmp / "unknown.json"
    unknown_key.write_text(json.dumps({"steps": 2, "stepz": 3}))
    (tmp / "empty_policy").mkdir()
    no_policy = tmp / "no_policy.json"           # every path exists, but the policy dir holds no checkpoint
    no_policy.write_text(json.dumps({"policy_init": str(tmp / "empty_policy"), "policy_ref": str(task / "policy"),
                                     "reward_model": str(task / "reward_model"),
                                     "prompt_file": str(task / "data" / "prompts_train.jsonl"), "steps": 2}))
    prompts = str(task / "data" / "prompts_train.jsonl")
    wide = tmp / "wide_policy"                   # the weights of a d_model 64 policy under a config that says 96
    shutil.copytree(task / "policy", wide)
    wide_cfg = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**wide_cfg, "d_model": 96}))
    return [
        ("rlhf.train_rl", ["--config", str(tmp / "nope.json"), "--out", out], "nope.json: config file not found"),
        ("rlhf.train_rl", ["--config", str(unknown_key), "--out", out], "unknown config keys ['stepz']"),
        ("rlhf.train_rl", ["--config", str(no_policy), "--out", out, "--quiet"], "policy.safetensors: file not found"),
        ("rlhf.train_rm", ["--data", str(tmp / "nope.jsonl"), "--out", out], "nope.jsonl: file not found"),
        ("rlhf.sft", ["--data", str(bad_jsonl), "--out", out], "bad.jsonl:2"),
        ("rlhf.bon", ["--policy", str(wide), "--prompts", prompts, "--reward-model", str(task / "reward_model"),
                      "--out", out], "wide_policy/policy.safetensors"),
        ("rlhf.dev_eval", ["--policy", str(task / "policy"), "--policy-ref", str(task / "policy"), "--reward-model",
                           str(task / "reward_model"), "--prompts", str(tmp / "nope.jsonl"), "--out", out],
         "nope.jsonl: file not found"),
        ("audit.diagnostic", ["--rm-dir", str(tmp / "no_rm"), "--policy-dir", str(task / "policy"), "--prompts",
                              prompts, "--out", out], "no_rm/rm.safetensors: file not found"),
        ("audit.bench_stress", ["--task", str(tmp / "no_task")], "no_task: task directory not found"),
    ]


def test_bad_input_exits_2_with_one_line_per_problem_and_writes_nothing(tiny_world, tmp_path, capsys):
    import importlib
    for module, argv, names in _cases(tiny_world / "task", tmp_path):
        prog = f"python -m {module}"
        rc = run_cli(importlib.import_module(module).main, prog, argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == EXIT_BAD_INPUT, (module, argv, err)
        assert err and all(line.startswith(f"{prog}: error: ") for line in err), (module, err)
        assert names in err[0], (module, names, err)
        assert not (tmp_path / "out").exists(), module


def test_world_build_refuses_an_existing_world(tiny_world, capsys):
    from world.__main__ import main
    before = sorted(p.name for p in tiny_world.iterdir())
    assert run_cli(main, "python -m world", ["build", "--out", str(tiny_world), "--preset", "tiny"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a world is already there" in err[0]
    assert sorted(p.name for p in tiny_world.iterdir()) == before


def test_world_tools_refuse_what_is_not_a_world_or_a_submission(tiny_world, tmp_path, capsys):
    """Before: grade on a mistyped --submission graded the reference for minutes (every part "missing") and then
    wrote grade.json into the typo; the others failed with the OS's "[Errno 2]" text."""
    from world.__main__ import main
    typo = tmp_path / "no_such_out"
    cases = [(["grade", "--world", str(tiny_world), "--submission", str(typo)], "no_such_out: not a directory"),
             (["grade", "--world", str(tmp_path / "nope"), "--submission", str(tmp_path)], "nope: not a built world"),
             (["calibrate", str(tmp_path)], "not a built world (no oracle/truth.json"),
             (["zoo-check", str(tmp_path / "nope")], "nope: not a built world"),
             (["export-samples", str(tmp_path / "nope"), "--out", str(tmp_path / "x")], "nope: not a built world")]
    for argv, names in cases:
        assert run_cli(main, "python -m world", argv) == EXIT_BAD_INPUT, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and names in err[0], (argv, err)
    import importlib
    nope = str(tmp_path / "nope")
    for module, argv in [("world.experiments.decompose", [nope]), ("world.experiments.fidelity", [nope]), ("world.replay", [nope, str(typo)]),
                         ("world.experiments.reward_ablation", [nope]), ("world.experiments.samples_coverage", [nope])]:
        assert run_cli(importlib.import_module(module).main, f"python -m {module}", argv) == EXIT_BAD_INPUT, module
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "nope: not a built world" in err[0], (module, err)
    assert not typo.exists() and not (tmp_path / "x").exists()


def test_internal_failures_keep_their_traceback():
    def broken(argv):
        raise KeyError("a bug, not bad input")
    with pytest.raises(KeyError):
        run_cli(broken, "prog", [])
    assert run_cli(lambda argv: None, "prog", []) == 0 and run_cli(lambda argv: 3, "prog", []) == 3


def test_a_reader_that_goes_away_gets_no_traceback():
    # `python -m audit.compare A B | head`: the reader closes the pipe; the command stops quietly with 141
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys\nfrom rlhf.errors import run_cli\n"
            "def main(argv):\n    for i in range(200000):\n        print('line', i)\n"
            "sys.exit(run_cli(main, 'prog', []))")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=Path(__file__).resolve().parents[1])
    assert p.stdout.readline() == b"line 0\n"
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait() == 141 and err == b"", err.decode()[-2000:]


def test_every_loader_error_is_bad_input():
    from audit.samples.table import TableError
    from audit.task.task_dir import TaskError
    from rlhf.data import DataError
    from rlhf.errors import InputError
    from rlhf.model import CheckpointError
    for cls in (DataError, CheckpointError, TaskError, TableError):
        assert issubclass(cls, InputError) and issubclass(cls, ValueError)   # callers catching ValueError still do
