"""Validate and load a task directory (SPEC §1 layout). The audit reads only this: never a world's oracle.

`validate(task_dir)` returns every problem it finds, one line each, naming the file, the line or the key, and
what was expected; it reads the jsonl files and the checkpoints (headers, then every tensor's finiteness: the
models are small), so it is cheap and runs before anything expensive (`audit.certify` refuses a task with problems: exit 2, nothing written).
`load_task` raises TaskError with those lines (its `problems` attribute) when there are any."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlhf.data import json_error, read_json_object, read_jsonl_lines
from rlhf.errors import InputError
from rlhf.model import POLICY_KEYS, Policy, checkpoint_problems, default_config, load_policy
from rlhf.reward_model import RM_KEYS, RewardModel, default_config as rm_default_config, load_rm
from rlhf.train_rl import RLConfig
from rlhf.vocab import FAMILIES

REQUIRED = ["policy/policy.safetensors", "policy/config.json", "reward_model/rm.safetensors",
            "reward_model/config.json", "reward_model/train.jsonl", "data/prompts_train.jsonl",
            "data/prompts_dev.jsonl", "data/gold_calib.jsonl", "configs/default.json"]
# what the claims cannot do without; log.jsonl (the training curve: claim 5's figure), dev_eval.json (the proxy
# shown beside the gold estimates) and NOTES.md are read when present -- a task from another generator that
# omits them is still audited, not refused
RUN_REQUIRED = ["policy.safetensors", "config.json", "run_config.json"]
# jsonl files: (key, path, required fields, label range or None, minimum rows per family (0: none needed))
# Expert labels are a fraction of 8 positions plus small noise: far outside [0, 1] means a broken file. A
# family needs two labelled rows for any agreement figure, and prompts to be optimised on.
JSONL = [("gold", "data/gold_calib.jsonl", ("response", "label"), (-0.5, 1.5), 2),
         ("qa", "reward_model/train.jsonl", ("response", "label"), (-1.0, None), 2),
         ("prompts_train", "data/prompts_train.jsonl", (), None, 1),
         ("prompts_dev", "data/prompts_dev.jsonl", (), None, 0)]
# run_config.json keys the audit reads (the shipped recipe): name -> (expected type, in words)
RUN_KEYS = {"kl_coef": ((int, float), "a number >= 0"), "steps": (int, "an integer >= 0"), "seed": (int, "an integer")}
MAX_PER_FILE = 10   # problems listed per file; the rest are counted, so a broken 12,000-row file stays readable


class TaskError(InputError):
    def __init__(self, problems):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


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


class _Problems:
    """Problem lines in the order found, at most MAX_PER_FILE per file (then one line with the count)."""

    def __init__(self):
        self.lines: list[str] = []
        self.per_file: Counter = Counter()

    def add(self, file, msg: str) -> None:
        self.per_file[str(file)] += 1
        if self.per_file[str(file)] <= MAX_PER_FILE:
            self.lines.append(msg)

    def reporter(self, file):
        return lambda msg: self.add(file, msg)

    def count(self, file) -> int:
        return self.per_file[str(file)]

    def result(self) -> list[str]:
        more = [f"{f}: ... and {n - MAX_PER_FILE} more problems in this file"
                for f, n in self.per_file.items() if n > MAX_PER_FILE]
        return list(dict.fromkeys(self.lines + more))


def _json_object(path: Path, P: _Problems, what: str):
    """A JSON object from path, or None (the problem reported)."""
    try:
        return read_json_object(path, what)
    except InputError as e:
        P.add(path, str(e))
        return None


def _labelled(root: Path, rel: str, require, label_range, min_per_family, P: _Problems) -> list[dict]:
    path = root / rel
    rows = read_jsonl_lines(path, require, on_error=P.reporter(path), unique_ids=True)
    lo, hi = label_range or (None, None)
    for lineno, r in rows:
        if "label" in r and ((lo is not None and r["label"] < lo) or (hi is not None and r["label"] > hi)):
            P.add(path, f"{path}:{lineno}: field 'label': {r['label']} is outside [{lo}, {hi}]")
    if min_per_family and path.is_file() and not P.count(path):   # on a file with bad lines: no cascade
        counts = Counter(r["family"] for _, r in rows)
        for f in FAMILIES:
            if counts[f] < min_per_family:
                P.add(path, f"{path}: family {f!r} has {counts[f]} rows; expected at least {min_per_family} for "
                            f"each of {', '.join(FAMILIES)}")
    return [r for _, r in rows]


def _run_config_problems(path: Path, cfg: dict, P: _Problems) -> None:
    for key, (types, words) in RUN_KEYS.items():
        v = cfg.get(key)
        if key not in cfg:
            P.add(path, f"{path}: key {key!r} is missing; expected {words}")
        elif isinstance(v, bool) or not isinstance(v, types) or (key != "seed" and v < 0):
            P.add(path, f"{path}: key {key!r} is {v!r}; expected {words}")
    w = cfg.get("family_weights")
    if w is not None and (not isinstance(w, dict) or set(w) - set(FAMILIES) or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 for x in w.values())):
        P.add(path, f"{path}: key 'family_weights' is {w!r}; expected null or an object mapping families "
                    f"({', '.join(FAMILIES)}) to numbers >= 0")


def _log(path: Path, P: _Problems) -> list:
    rows = []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        P.add(path, f"{path}: cannot be read ({getattr(e, 'strerror', None) or 'not UTF-8 text'})")
        return rows
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                P.add(path, f"{path}:{i}: not valid JSON ({json_error(e, line=True)}); expected one JSON object per line")
    return rows


def _checkpoint(directory: Path, P: _Problems, rm: bool = False) -> None:
    args = (RewardModel, directory, "rm.safetensors", RM_KEYS, rm_default_config()) if rm else \
        (Policy, directory, "policy.safetensors", POLICY_KEYS, default_config())
    for msg in checkpoint_problems(*args):
        file = msg.split(":", 1)[0]
        if Path(file).is_file():    # a missing file was reported with the task's (or the run's) layout
            P.add(file, msg)


def proxy_curve(log: list) -> list[dict]:
    """A run's proxy curve [{step, proxy}] from its log.jsonl rows: the rows with a numeric step and proxy_reward
    (ours write both; a log from another trainer may name its fields otherwise, and is then drawn as no curve)."""
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)     # noqa: E731
    return [{"step": r["step"], "proxy": r["proxy_reward"]} for r in log
            if isinstance(r, dict) and num(r.get("step")) and num(r.get("proxy_reward"))]


def run_dirs(root) -> list[Path]:
    """The task's runs: the directories under runs/, sorted, but not dot-directories (what a killed
    `rlhf.train_rl` leaves beside its --out, `.NAME.XXXX.partial`; editors' and notebooks' hidden dirs)."""
    runs = Path(root) / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")) if runs.is_dir() else []


def _inspect(root, check_models: bool = True) -> tuple[list[str], Task | None]:
    root = Path(root)
    if not root.is_dir():
        return [f"{root}: task directory not found" if not root.exists() else f"{root}: not a directory"], None
    P = _Problems()
    for rel in REQUIRED:
        if not (root / rel).is_file():
            what = "is a directory, not a file" if (root / rel).is_dir() else "file not found"
            P.add(root / rel, f"{root / rel}: {what} (the task layout of SPEC §1 needs it)")
    data = {key: _labelled(root, rel, req, rng, k, P) if (root / rel).is_file() else []
            for key, rel, req, rng, k in JSONL}
    default = {}
    if (root / "configs/default.json").is_file():
        default = _json_object(root / "configs/default.json", P, "an RL config object") or {}
        unknown = sorted(set(default) - set(RLConfig.__dataclass_fields__))
        if unknown:
            P.add(root / "configs/default.json", f"{root / 'configs/default.json'}: unknown keys {unknown}; expected "
                                                 f"keys of {sorted(RLConfig.__dataclass_fields__)}")
    runs = {}
    for d in run_dirs(root):
        for f in RUN_REQUIRED:
            if not (d / f).is_file():
                what = "is a directory, not a file" if (d / f).is_dir() else "file not found"
                P.add(d / f, f"{d / f}: {what} (a run dir holds {', '.join(RUN_REQUIRED)})")
        cfg = _json_object(d / "run_config.json", P, "the run's RL config object") \
            if (d / "run_config.json").is_file() else None
        if cfg is not None:
            _run_config_problems(d / "run_config.json", cfg, P)
        dev = _json_object(d / "dev_eval.json", P, "a dev-evaluation object") if (d / "dev_eval.json").is_file() else None
        runs[d.name] = Run(d.name, d, cfg or {}, _log(d / "log.jsonl", P) if (d / "log.jsonl").is_file() else [], dev)
    if check_models:
        _checkpoint(root / "policy", P)
        _checkpoint(root / "reward_model", P, rm=True)
        for r in runs.values():
            _checkpoint(r.dir, P)
    problems = P.result()
    if problems:
        return problems, None
    return [], Task(root, data["gold"], data["qa"], data["prompts_train"], data["prompts_dev"], default, runs)


def validate(root, check_models: bool = True) -> list[str]:
    """Every problem of a task directory, one line each (file, line or key, what was expected); [] = usable."""
    return _inspect(root, check_models)[0]


def load_task(root, check_models: bool = True) -> Task:
    problems, task = _inspect(root, check_models)
    if problems:
        raise TaskError(problems)
    return task
