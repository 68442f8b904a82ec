"""Fixtures shared by tests: a random policy/RM checkpoint and prompt files in a temp dir."""
import torch

from rlhf.data import write_jsonl
from rlhf.model import Policy, default_config, save_policy
from rlhf.reward_model import RewardModel, default_config as rm_default_config, save_rm
from rlhf.vocab import FAMILIES


def random_prompts(n: int, seed: int = 0, families=FAMILIES):
    g = torch.Generator().manual_seed(seed)
    return [{"id": f"p{i}", "family": families[i % len(families)],
             "attrs": torch.randint(8, (4,), generator=g).tolist()} for i in range(n)]


def make_checkpoints(tmp_path, seed: int = 0):
    torch.manual_seed(seed)
    save_policy(Policy(), default_config(), tmp_path / "policy")
    save_rm(RewardModel(), rm_default_config(), tmp_path / "rm")
    write_jsonl(tmp_path / "prompts.jsonl", random_prompts(240, seed))
    return tmp_path / "policy", tmp_path / "rm", tmp_path / "prompts.jsonl"


def certify_cmd(task, out, *extra) -> list[str]:
    """`python -m audit.certify` on a task, small preset, seed 0 (as the end-to-end tests run it)."""
    import sys
    return [sys.executable, "-m", "audit.certify", "--task", str(task), "--out", str(out), "--preset", "small",
            "--seed", "0", *extra]


def run_certify(task, out, *extra):
    import subprocess
    from pathlib import Path
    return subprocess.run(certify_cmd(task, out, *extra), capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
