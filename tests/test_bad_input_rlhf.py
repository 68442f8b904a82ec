"""Bad input to the rlhf CLIs and their config dataclasses: exit status 2 with one line naming the file, line or key
(argparse's own usage error for a bad flag value), before any work, and an existing good output byte-identical
afterwards. A train_rl run is staged beside its --out: a failure midway leaves the old run as it was.
In-process (rlhf.errors.run_cli) on tiny random checkpoints: no world, no subprocess."""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from rlhf.errors import EXIT_BAD_INPUT, InputError, run_cli
from rlhf.vocab import CONTENT, FAMILIES
from tests.helpers import make_checkpoints, random_prompts
from rlhf.data import write_jsonl


@pytest.fixture(autouse=True)
def keep_threads():
    n = torch.get_num_threads()         # the CLIs set their own thread count (rlhf.common.setup_torch)
    yield
    torch.set_num_threads(n)


def snapshot(path: Path) -> dict:
    """Every file under path (or path itself) -> sha256; plus the hidden names beside it (staging debris)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {"files": {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
            "hidden": sorted(p.name for p in path.parent.iterdir() if p.name.startswith("."))}


def labelled(n: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{**p, "response": [CONTENT[int(t)] for t in torch.randint(24, (8,), generator=g)],
             "label": float(torch.rand(1, generator=g))} for p in random_prompts(n, seed)]


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    """Random policy / RM checkpoints, prompts, a config, and a finished train_rl run in run/ (2 tiny steps)."""
    d = tmp_path_factory.mktemp("badinput")
    pol, rm, prompts = make_checkpoints(d)
    write_jsonl(d / "two_families.jsonl", random_prompts(20, families=FAMILIES[:2]))
    write_jsonl(d / "labelled.jsonl", labelled(24))
    cfg = {"policy_init": str(pol), "policy_ref": str(pol), "reward_model": str(rm), "prompt_file": str(prompts),
           "steps": 2, "batch_prompts": 2, "samples_per_prompt": 2, "log_every": 1}
    (d / "c.json").write_text(json.dumps(cfg))
    from rlhf import train_rl
    assert run_cli(train_rl.main, "python -m rlhf.train_rl",
                   ["--config", str(d / "c.json"), "--out", str(d / "run"), "--quiet"]) == 0
    nan_pol = d / "nan_policy"                  # a policy whose head holds a NaN
    shutil.copytree(pol, nan_pol)
    state = load_file(str(nan_pol / "policy.safetensors"))
    state["head.weight"][3, 5] = float("nan")
    save_file(state, str(nan_pol / "policy.safetensors"))
    inf_rm = d / "inf_rm"
    shutil.copytree(rm, inf_rm)
    state = load_file(str(inf_rm / "rm.safetensors"))
    state["head.2.bias"][0] = float("inf")
    save_file(state, str(inf_rm / "rm.safetensors"))
    return d


def refused(module: str, argv, capsys) -> list[str]:
    """Run `python -m module argv` in-process; assert exit 2 and return stderr's lines."""
    import importlib
    prog = f"python -m {module}"
    rc = run_cli(importlib.import_module(module).main, prog, argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_BAD_INPUT, (module, argv, err)
    assert err and all(line.startswith(f"{prog}: error: ") for line in err), err
    return err


def usage_error(module: str, argv, capsys) -> str:
    """A bad flag value: argparse's exit 2, its message naming the flag."""
    import importlib
    with pytest.raises(SystemExit) as e:
        run_cli(importlib.import_module(module).main, f"python -m {module}", argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------------- train_rl
@pytest.mark.parametrize("override, names", [
    ('family_weights={"zinc": 1}', "key 'family_weights': unknown family 'zinc'"),
    ('family_weights={"dune": -1, "anvil": 2}', "weight of 'dune': expected a finite number >= 0, got -1"),
    ('family_weights={"dune": 0}', "expected a positive weight for at least one family"),
    ("kl_coef=abc", "key 'kl_coef': expected a number, got 'abc'"),
    ("kl_coef=NaN", "key 'kl_coef': expected a finite number >= 0, got nan"),
    ("temperature=0", "key 'temperature': expected a finite number > 0, got 0"),
    ("steps=-3", "key 'steps': expected an integer >= 1, got -3"),
    ("batch_prompts=0", "key 'batch_prompts': expected an integer >= 1, got 0"),
    ('seed="1"', "key 'seed': expected an integer, got '1'"),
    ("lr=fast", "key 'lr': expected a number, got 'fast'"),
    ("save_every=-1", "key 'save_every': expected an integer >= 0"),
])
def test_train_rl_refuses_a_bad_config_key_and_keeps_the_good_run(fx, capsys, override, names):
    before = snapshot(fx / "run")
    err = refused("rlhf.train_rl", ["--config", str(fx / "c.json"), "--out", str(fx / "run"), "--quiet",
                                    "--override", override], capsys)
    assert len(err) == 1 and names in err[0] and "c.json" in err[0], err
    assert snapshot(fx / "run") == before


def test_train_rl_refuses_weights_on_families_without_prompts_a_broken_wrapper_and_a_huge_seed(fx, tmp_path, capsys):
    before = snapshot(fx / "run")
    base = ["--config", str(fx / "c.json"), "--out", str(fx / "run"), "--quiet"]
    err = refused("rlhf.train_rl", base + ["--override", f"prompt_file={json.dumps(str(fx / 'two_families.jsonl'))}",
                                           "--override", 'family_weights={"anvil": 1, "dune": 2}'], capsys)
    assert len(err) == 1 and "key 'family_weights': dune" in err[0] and "two_families.jsonl" in err[0], err
    (tmp_path / "wrap.py").write_text("def transform(records, tokens, rewards:\n    return rewards\n")
    err = refused("rlhf.train_rl", base + ["--override", f"reward_wrapper={json.dumps(str(tmp_path / 'wrap.py'))}"],
                  capsys)
    assert len(err) == 1 and f"{tmp_path / 'wrap.py'}:1: reward_wrapper is not valid Python" in err[0], err
    assert "argument --seed" in usage_error("rlhf.train_rl", base + ["--seed", str(2 ** 64)], capsys)
    (tmp_path / "a_file").write_text("x")
    err = refused("rlhf.train_rl", ["--config", str(fx / "c.json"), "--out", str(tmp_path / "a_file"), "--quiet"],
                  capsys)
    assert len(err) == 1 and "a_file: exists and is not a directory" in err[0]
    assert (tmp_path / "a_file").read_text() == "x"
    assert snapshot(fx / "run") == before


def test_a_train_rl_run_failing_midway_leaves_the_old_run_and_no_debris(fx, tmp_path):
    from rlhf.train_rl import RLConfig, train_rl
    out = tmp_path / "run"
    shutil.copytree(fx / "run", out)
    before = snapshot(out)
    cfg = RLConfig(**{**json.loads((fx / "c.json").read_text()), "steps": 3, "save_every": 1})
    calls = []

    def failing(records, prompts_rep, responses):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("reward server went away")
        return torch.zeros(len(responses))

    with pytest.raises(RuntimeError, match="went away"):
        train_rl(cfg, out, reward_fn=failing, quiet=True)
    assert snapshot(out) == before                  # step_1/, step_2/ and log.jsonl went with the staging dir
    rows = train_rl(cfg, out, reward_fn=lambda *a: torch.zeros(len(a[2])), quiet=True)   # a completed run replaces
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "log.jsonl", "policy.safetensors",
                                                     "run_config.json", "step_1", "step_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_train_rl_never_replaces_a_directory_that_holds_no_run(fx, tmp_path, capsys, monkeypatch):
    """train_rl replaces its --out whole: a non-empty directory that is not a previous run (no run_config.json) is
    refused before any work, '.' included; an empty one, or '.' written as a path with '..', is fine."""
    from rlhf.train_rl import RLConfig, train_rl
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "mine.txt").write_text("not a run")
    err = refused("rlhf.train_rl", ["--config", str(fx / "c.json"), "--out", str(keep), "--quiet"], capsys)
    assert err == [f"python -m rlhf.train_rl: error: {keep}: a directory that is not empty and holds no run (no "
                   "run_config.json); train_rl replaces its output directory whole: give a new or empty directory, "
                   "or a previous run's"]
    monkeypatch.chdir(keep)
    refused("rlhf.train_rl", ["--config", str(fx / "c.json"), "--out", ".", "--quiet"], capsys)
    assert sorted(p.name for p in keep.iterdir()) == ["mine.txt"]
    cfg = RLConfig(**{**json.loads((fx / "c.json").read_text()), "steps": 1})
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    train_rl(cfg, Path("x/.."), reward_fn=lambda *a: torch.zeros(len(a[2])), quiet=True)   # the cwd, by a detour
    assert (tmp_path / "empty" / "run_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "notes"]       # no staging debris


def test_rltrainer_checks_every_key_for_programmatic_callers(fx):
    from rlhf.train_rl import RLConfig, RLTrainer, check_config
    good = RLConfig(**json.loads((fx / "c.json").read_text()))
    with pytest.raises(InputError) as e:
        RLTrainer(RLConfig(**{**good.__dict__, "kl_coef": float("nan"), "steps": 0, "family_weights": {"dune": "x"}}))
    lines = str(e.value).splitlines()
    assert all(line.startswith("RLConfig: key ") for line in lines) and len(lines) == 3, lines
    assert {"'kl_coef'", "'steps'", "'family_weights'"} == {line.split()[2].rstrip(':') for line in lines}
    with pytest.raises(InputError, match="key 'reward_model' is null and no reward_fn"):
        RLTrainer(RLConfig(**{**good.__dict__, "reward_model": None}))
    check_config(RLConfig(**{**good.__dict__, "seed": np.int64(3), "lr": np.float32(1e-3), "max_grad_norm": None}))


# -------------------------------------------------------------------------------------------- train_rm, sft
def test_train_rm_refuses_bad_flags_an_out_file_and_duplicate_ids_before_training(fx, tmp_path, capsys):
    good_rm = tmp_path / "rm"
    shutil.copytree(fx / "rm", good_rm)
    before = snapshot(good_rm)
    base = ["--data", str(fx / "labelled.jsonl"), "--out", str(good_rm), "--quiet"]
    for flag, value in [("--epochs", "0"), ("--epochs", "-1"), ("--lr", "nan"), ("--batch", "0"),
                        ("--seed", str(2 ** 64))]:
        assert f"argument {flag}" in usage_error("rlhf.train_rm", base + [flag, value], capsys)
    rows = (fx / "labelled.jsonl").read_text().splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(rows[:5] + [rows[2]]) + "\n")
    err = refused("rlhf.train_rm", ["--data", str(dup), "--out", str(good_rm), "--quiet"], capsys)
    assert len(err) == 1 and f"{dup}:6: field 'id': 'p2' repeats the id of line 3" in err[0], err
    assert snapshot(good_rm) == before
    (tmp_path / "a_file").write_text("x")
    err = refused("rlhf.train_rm", ["--data", str(fx / "labelled.jsonl"), "--out", str(tmp_path / "a_file")], capsys)
    assert len(err) == 1 and "a_file: exists and is not a directory" in err[0]
    from rlhf.train_rm import RMTrainConfig, train_rm
    with pytest.raises(InputError, match="RMTrainConfig: key 'epochs': expected an integer >= 1, got 0"):
        train_rm(labelled(4), RMTrainConfig(epochs=0))


def test_sft_refuses_an_infinite_lr_and_duplicate_ids(fx, tmp_path, capsys):
    rows = [{k: r[k] for k in ("id", "family", "attrs", "response")} for r in labelled(6)]
    write_jsonl(tmp_path / "demos.jsonl", rows + [rows[0]])
    out = tmp_path / "sft"
    shutil.copytree(fx / "policy", out)
    before = snapshot(out)
    assert "argument --lr" in usage_error("rlhf.sft", ["--data", str(tmp_path / "demos.jsonl"), "--out", str(out),
                                                       "--lr", "inf"], capsys)
    err = refused("rlhf.sft", ["--data", str(tmp_path / "demos.jsonl"), "--out", str(out), "--quiet"], capsys)
    assert len(err) == 1 and "demos.jsonl:7: field 'id': 'p0' repeats the id of line 1" in err[0], err
    assert snapshot(out) == before
    from rlhf.sft import SFTConfig, train_sft
    with pytest.raises(InputError, match="SFTConfig: key 'lr': expected a finite number > 0, got inf"):
        train_sft(rows, SFTConfig(lr=float("inf")))


# -------------------------------------------------------------------------------------- bon, dev_eval, loaders
def test_bon_refuses_nan_weights_bad_flags_and_a_directory_out(fx, tmp_path, capsys):
    good = tmp_path / "bon.jsonl"
    good.write_text('{"kept": true}\n')
    base = ["--prompts", str(fx / "prompts.jsonl"), "--reward-model", str(fx / "rm"), "--n", "2", "--quiet"]
    err = refused("rlhf.bon", base + ["--policy", str(fx / "nan_policy"), "--out", str(good)], capsys)
    assert len(err) == 1 and "nan_policy/policy.safetensors: tensor 'head.weight' holds NaN or inf" in err[0], err
    for flag, value in [("--temperature", "nan"), ("--limit", "-1"), ("--limit", "0"), ("--seed", "-1")]:
        assert f"argument {flag}" in usage_error("rlhf.bon", base + ["--policy", str(fx / "policy"), "--out",
                                                                     str(good), flag, value], capsys)
    err = refused("rlhf.bon", base + ["--policy", str(fx / "policy"), "--out", str(tmp_path)], capsys)
    assert len(err) == 1 and f"{tmp_path}: is a directory" in err[0], err
    assert good.read_text() == '{"kept": true}\n'


def test_dev_eval_refuses_bad_n_and_nan_weights(fx, tmp_path, capsys):
    good = tmp_path / "dev.json"
    good.write_text("{}\n")
    base = ["--policy-ref", str(fx / "policy"), "--reward-model", str(fx / "rm"), "--prompts",
            str(fx / "prompts.jsonl"), "--out", str(good)]
    for n in ("0", "-1"):
        assert "argument --n" in usage_error("rlhf.dev_eval", base + ["--policy", str(fx / "policy"), "--n", n],
                                             capsys)
    err = refused("rlhf.dev_eval", base + ["--policy", str(fx / "nan_policy")], capsys)
    assert len(err) == 1 and "tensor 'head.weight' holds NaN or inf" in err[0], err
    err = refused("rlhf.dev_eval", ["--policy", str(fx / "policy"), "--policy-ref", str(fx / "policy"),
                                    "--reward-model", str(fx / "inf_rm"), "--prompts", str(fx / "prompts.jsonl"),
                                    "--out", str(good)], capsys)
    assert len(err) == 1 and "inf_rm/rm.safetensors: tensor 'head.2.bias' holds NaN or inf" in err[0], err
    assert good.read_text() == "{}\n"


def test_checkpoint_loaders_say_what_is_wrong(fx, tmp_path):
    from rlhf.model import CheckpointError, checkpoint_problems, default_config, load_policy, Policy, POLICY_KEYS
    from rlhf.reward_model import load_rm
    with pytest.raises(CheckpointError, match=r"policy.safetensors: tensor 'head.weight' holds NaN or inf"):
        load_policy(fx / "nan_policy")
    with pytest.raises(CheckpointError, match=r"rm.safetensors: tensor 'head.2.bias' holds NaN or inf"):
        load_rm(fx / "inf_rm")
    assert any("holds NaN or inf" in p for p in checkpoint_problems(Policy, fx / "nan_policy", "policy.safetensors",
                                                                    POLICY_KEYS, default_config()))
    d = tmp_path / "pol"
    (d / "policy.safetensors").mkdir(parents=True)
    shutil.copy(fx / "policy" / "config.json", d / "config.json")
    with pytest.raises(CheckpointError, match=r"policy.safetensors: is a directory, not a file"):
        load_policy(d)


def test_no_checkpoint_with_nan_weights_is_ever_written(tmp_path):
    """save_module refuses non-finite weights (a run that diverged from valid settings): the final checkpoint of
    train_rl / sft / train_rm, the step_N snapshots and the stacked runs' all go through it; nothing is written."""
    from rlhf.model import Policy, default_config, save_policy
    pol = Policy()
    with torch.no_grad():
        pol.head.weight[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match=r"policy.safetensors not written .*'head.weight'.* NaN or inf"):
        save_policy(pol, default_config(), tmp_path / "p")
    assert not any((tmp_path / "p").glob("*.safetensors*"))
