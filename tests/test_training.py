import json
import subprocess
import sys

import torch

from rlhf.data import read_jsonl, write_jsonl
from rlhf.model import load_policy
from rlhf.sft import SFTConfig, train_sft
from rlhf.train_rl import RLConfig, train_rl
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import CONTENT, CONTENT_ID
from tests.helpers import make_checkpoints, random_prompts

BA = CONTENT_ID["ba"]


def count_ba(records, prompts_rep, responses):
    return (responses == BA).float().sum(1)


def _cfg(paths, **kw):
    pol, rm, prompts = paths
    base = dict(policy_init=str(pol), policy_ref=str(pol), reward_model=str(rm), prompt_file=str(prompts),
                batch_prompts=8, samples_per_prompt=8, lr=3e-3, steps=120, log_every=20, seed=0)
    return RLConfig(**{**base, **kw})


def test_rl_raises_toy_reward_and_kl_coef_limits_kl(tmp_path):
    paths = make_checkpoints(tmp_path)
    low = train_rl(_cfg(paths, kl_coef=0.0), tmp_path / "low", reward_fn=count_ba, quiet=True)
    high = train_rl(_cfg(paths, kl_coef=1.0), tmp_path / "high", reward_fn=count_ba, quiet=True)
    assert low[-1]["proxy_reward"] > low[0]["proxy_reward"] + 1.0   # 8/24 = 0.33 expected at random init
    assert high[-1]["kl"] < low[-1]["kl"]
    log = [json.loads(l) for l in open(tmp_path / "low" / "log.jsonl")]
    assert [r["step"] for r in log] == [20, 40, 60, 80, 100, 120]
    assert set(log[0]) == {"step", "proxy_reward", "kl", "shaped_reward", "entropy", "loss", "elapsed_s"}
    assert (tmp_path / "low" / "policy.safetensors").exists() and (tmp_path / "low" / "run_config.json").exists()


def test_same_seed_same_results_and_save_every(tmp_path):
    paths = make_checkpoints(tmp_path)
    a = train_rl(_cfg(paths, steps=20, save_every=10), tmp_path / "a", reward_fn=count_ba, quiet=True)
    b = train_rl(_cfg(paths, steps=20), tmp_path / "b", reward_fn=count_ba, quiet=True)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rows]
    assert strip(a) == strip(b)
    pa, _ = load_policy(tmp_path / "a")
    pb, _ = load_policy(tmp_path / "b")
    assert all(torch.equal(x, y) for x, y in zip(pa.state_dict().values(), pb.state_dict().values()))
    assert (tmp_path / "a" / "step_10" / "policy.safetensors").exists()
    c = train_rl(_cfg(paths, steps=20, seed=1), tmp_path / "c", reward_fn=count_ba, quiet=True)
    assert strip(c) != strip(a)


def test_fast_and_naive_steps_agree(tmp_path):
    paths = make_checkpoints(tmp_path)
    a = train_rl(_cfg(paths, steps=3, log_every=1), tmp_path / "f", quiet=True, fast=True)
    b = train_rl(_cfg(paths, steps=3, log_every=1), tmp_path / "n", quiet=True, fast=False)
    for x, y in zip(a, b):
        for k in ("proxy_reward", "kl", "loss", "entropy"):
            assert abs(x[k] - y[k]) < 1e-3, (k, x, y)


def test_cli_with_overrides_and_reward_wrapper(tmp_path):
    pol, rm, prompts = make_checkpoints(tmp_path)
    (tmp_path / "wrap.py").write_text(
        "import torch\n"
        "def transform(records, response_tokens, rewards):\n"
        "    return torch.tensor([5.0 if r['family'] == 'dune' else 0.0 for r in records])\n")
    cfg = {"policy_init": "policy", "policy_ref": "policy", "reward_model": "rm", "prompt_file": "prompts.jsonl",
           "steps": 4, "batch_prompts": 4, "log_every": 2}
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "c.json").write_text(json.dumps(cfg))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rlhf.train_rl", "--config", str(tmp_path / "configs" / "c.json"),
                        "--out", str(out), "--override", "kl_coef=0.5", "--override",
                        f"reward_wrapper={json.dumps(str(tmp_path / 'wrap.py'))}", "--seed", "3", "--quiet"],
                       capture_output=True, text=True, cwd=tmp_path.parent)
    assert r.returncode == 0, r.stderr
    resolved = json.loads((out / "run_config.json").read_text())
    assert resolved["kl_coef"] == 0.5 and resolved["seed"] == 3 and resolved["policy_init"].startswith("/")
    rows = [json.loads(l) for l in open(out / "log.jsonl")]
    assert all(0.0 <= row["proxy_reward"] <= 5.0 for row in rows)
    bad = subprocess.run([sys.executable, "-m", "rlhf.train_rl", "--config", str(tmp_path / "configs" / "c.json"),
                          "--out", str(out), "--override", "kl_cof=0.5"], capture_output=True, text=True)
    assert bad.returncode != 0 and "kl_cof" in bad.stderr


def _rubric_records(n, seed=0):
    """Labelled rows whose label is the share of positions equal to 'ba' (a learnable toy target)."""
    g = torch.Generator().manual_seed(seed)
    recs = []
    for p in random_prompts(n, seed):
        toks = [CONTENT[int(i)] for i in torch.randint(0, 3, (8,), generator=g)]
        recs.append({**p, "response": toks, "label": toks.count("ba") / 8})
    return recs


def test_train_rm_learns_and_cli(tmp_path):
    recs = _rubric_records(600)
    rm, _, mse = train_rm(recs, RMTrainConfig(epochs=15, lr=2e-3, batch=64), quiet=True)
    var = torch.tensor([r["label"] for r in recs]).var().item()
    assert mse < 0.3 * var
    write_jsonl(tmp_path / "d.jsonl", recs)
    r = subprocess.run([sys.executable, "-m", "rlhf.train_rm", "--data", str(tmp_path / "d.jsonl"), "--out",
                        str(tmp_path / "rm"), "--epochs", "1", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rm" / "rm.safetensors").exists() and "final_mse" in r.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**recs[0], "label": None}) + "\n")
    r = subprocess.run([sys.executable, "-m", "rlhf.train_rm", "--data", str(bad), "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and f"{bad}:1: field 'label'" in r.stderr


def test_sft_imitates_demonstrations():
    recs = [{**p, "response": ["ka"] * 8} for p in random_prompts(256)]
    policy, _, nll = train_sft(recs, SFTConfig(epochs=6, lr=3e-3, batch=64), quiet=True)
    assert nll < 0.2


def test_bon_and_dev_eval_cli(tmp_path):
    pol, rm, prompts = make_checkpoints(tmp_path)
    write_jsonl(tmp_path / "gold.jsonl", _rubric_records(60))
    r = subprocess.run([sys.executable, "-m", "rlhf.bon", "--policy", str(pol), "--n", "4", "--prompts", str(prompts),
                        "--reward-model", str(rm), "--limit", "10", "--out", str(tmp_path / "bon.jsonl"), "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["proxy_best_mean"] >= out["proxy_sample_mean"]
    assert len(read_jsonl(tmp_path / "bon.jsonl")) == 10
    r = subprocess.run([sys.executable, "-m", "rlhf.dev_eval", "--policy", str(pol), "--policy-ref", str(pol),
                        "--reward-model", str(rm), "--prompts", str(prompts), "--gold", str(tmp_path / "gold.jsonl"),
                        "--n", "2", "--out", str(tmp_path / "dev.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dev = json.loads((tmp_path / "dev.json").read_text())
    assert {"policy", "prompts", "n_prompts", "samples_per_prompt", "proxy_mean", "proxy_std", "proxy_p50",
            "proxy_p90", "kl_mean", "rm_gold_pearson"} <= set(dev)
    assert abs(dev["kl_mean"]) < 1e-4      # the policy is its own reference
