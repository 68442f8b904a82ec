"""Load and validate a task directory (SPEC §1 layout). Every problem is a TaskError naming the file, the line
or the key, and what was expected. The audit reads only this: never a world's oracle."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rlhf.data import DataError, read_jsonl
from rlhf.model import load_policy
from rlhf.reward_model import load_rm
from rlhf.train_rl import RLConfig
from rlhf.vocab import FAMILIES

REQUIRED = ["policy/policy.safetensors", "policy/config.json", "reward_model/rm.safetensors",
            "reward_model/config.json", "reward_model/train.jsonl", "data/prompts_train.jsonl",
            "data/prompts_dev.jsonl", "data/gold_calib.jsonl", "configs/default.json"]
RUN_REQUIRED = ["policy.safetensors", "config.json", "run_config.json"]


class TaskError(ValueError):
    pass


@dataclass
class Run:
    name: str
    dir: Path
    config: dict
    log: list = field(default_factory=list)
    dev_eval: dict | None = None


@dataclass
class Task:
    root: Path
    gold: list
    qa: list
    prompts_train: list
    prompts_dev: list
    default_config: dict
    runs: dict

    @property
    def policy_dir(self) -> Path:
        return self.root / "policy"

    @property
    def rm_dir(self) -> Path:
        return self.root / "reward_model"

    def load_policy(self, name: str | None = None):
        return load_policy(self.policy_dir if name in (None, "reference") else self.runs[name].dir)[0]

    def load_rm(self):
        return load_rm(self.rm_dir)[0]


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def _jsonl_log(path: Path) -> list:
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise TaskError(f"{path}:{i}: not valid JSON ({e.msg})") from None
    return rows


def _check_labels(records, path, lo=-1.0, hi=None):
    for i, r in enumerate(records, 1):
        if r["label"] < lo or (hi is not None and r["label"] > hi):
            raise TaskError(f"{path}: record {i} (id {r.get('id')}): label {r['label']} outside [{lo}, {hi}]")


def load_task(root, check_models: bool = True) -> Task:
    root = Path(root)
    if not root.is_dir():
        raise TaskError(f"{root}: task directory not found")
    missing = [f for f in REQUIRED if not (root / f).is_file()]
    if missing:
        raise TaskError(f"{root}: missing task files: {', '.join(missing)}")
    try:
        gold = read_jsonl(root / "data/gold_calib.jsonl", require=("response", "label"))
        qa = read_jsonl(root / "reward_model/train.jsonl", require=("response", "label"))
        train = read_jsonl(root / "data/prompts_train.jsonl")
        dev = read_jsonl(root / "data/prompts_dev.jsonl")
    except DataError as e:
        raise TaskError(str(e)) from None
    # expert labels are a fraction of 8 positions plus small noise: far outside [0, 1] means a broken file
    _check_labels(gold, root / "data/gold_calib.jsonl", lo=-0.5, hi=1.5)
    _check_labels(qa, root / "reward_model/train.jsonl", lo=-1.0)
    for name, recs in (("gold_calib.jsonl", gold), ("prompts_train.jsonl", train)):
        absent = set(FAMILIES) - {r["family"] for r in recs}
        if absent:
            raise TaskError(f"{root / 'data' / name}: no rows for families {sorted(absent)}")
    default = _json(root / "configs/default.json")
    unknown = set(default) - set(RLConfig.__dataclass_fields__)
    if unknown:
        raise TaskError(f"{root / 'configs/default.json'}: unknown keys {sorted(unknown)}")
    runs = {}
    runs_dir = root / "runs"
    for d in sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []:
        miss = [f for f in RUN_REQUIRED if not (d / f).is_file()]
        if miss:
            raise TaskError(f"{d}: run is missing {', '.join(miss)}")
        runs[d.name] = Run(d.name, d, _json(d / "run_config.json"),
                           _jsonl_log(d / "log.jsonl") if (d / "log.jsonl").is_file() else [],
                           _json(d / "dev_eval.json") if (d / "dev_eval.json").is_file() else None)
    if check_models:
        try:
            load_policy(root / "policy")
            load_rm(root / "reward_model")
            for r in runs.values():
                load_policy(r.dir)
        except (ValueError, FileNotFoundError) as e:
            raise TaskError(str(e)) from None
    return Task(root, gold, qa, train, dev, default, runs)
