"""A corpus of malformed tasks, generated from a good one: each case copies the task and applies one mutation.

    python -m tests.malformed TASK_DIR OUT_DIR     # writes OUT_DIR/<case>/ for every case (to try them by hand)

A case is (id, mutation, expected): the mutation edits the copy in place; `expected` is a regex that one line of
`audit.certify`'s stderr must match (after "error: <task>/"), and `n` the number of problem lines the mutation
causes (one, unless the case says otherwise). tests/test_malformed_tasks.py runs them all."""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

GOLD, QA = "data/gold_calib.jsonl", "reward_model/train.jsonl"
TRAIN, DEV = "data/prompts_train.jsonl", "data/prompts_dev.jsonl"
RUN = "runs/kl05-s800"


@dataclass(frozen=True)
class Case:
    id: str
    mutate: Callable[[Path], None]
    expected: str
    n: int = 1


# ------------------------------------------------------------------------------------------------ mutations
def _lines(task: Path, rel: str) -> list[str]:
    return (task / rel).read_text().splitlines()


def _write_lines(task: Path, rel: str, lines: list[str]) -> None:
    (task / rel).write_text("".join(line + "\n" for line in lines))


def edit_line(rel: str, lineno: int, fn) -> Callable[[Path], None]:
    """Replace line `lineno` (1-based) of a jsonl file by fn(its text)."""
    def mutate(task: Path):
        lines = _lines(task, rel)
        lines[lineno - 1] = fn(lines[lineno - 1])
        _write_lines(task, rel, lines)
    return mutate


def append_bytes(rel: str, lineno: int, data: bytes) -> Callable[[Path], None]:
    """Bytes appended to line `lineno` (e.g. one that is not UTF-8)."""
    def mutate(task: Path):
        lines = (task / rel).read_bytes().split(b"\n")
        lines[lineno - 1] += data
        (task / rel).write_bytes(b"\n".join(lines))
    return mutate


def edit_record(rel: str, lineno: int, **changes) -> Callable[[Path], None]:
    """Set fields of the record on line `lineno` (a value of DELETE removes the field)."""
    def fn(line: str) -> str:
        rec = json.loads(line)
        for k, v in changes.items():
            if v is DELETE:
                rec.pop(k, None)
            else:
                rec[k] = v
        return json.dumps(rec)
    return edit_line(rel, lineno, fn)


DELETE = object()


def raw_label(rel: str, lineno: int, text: str) -> Callable[[Path], None]:
    """The label of a line replaced by raw JSON text (NaN is not valid JSON for json.dumps, but Python reads it)."""
    def fn(line: str) -> str:
        rec = json.loads(line)
        rec["label"] = "@@"
        return json.dumps(rec).replace('"@@"', text)
    return edit_line(rel, lineno, fn)


def copy_id(rel: str, src: int, dst: int) -> Callable[[Path], None]:
    def mutate(task: Path):
        lines = _lines(task, rel)
        rec = json.loads(lines[dst - 1])
        rec["id"] = json.loads(lines[src - 1])["id"]
        lines[dst - 1] = json.dumps(rec)
        _write_lines(task, rel, lines)
    return mutate


def keep_rows(rel: str, keep) -> Callable[[Path], None]:
    """Keep only the records for which keep(record, index among its family) is true."""
    def mutate(task: Path):
        seen: dict[str, int] = {}
        out = []
        for line in _lines(task, rel):
            rec = json.loads(line)
            k = seen.get(rec["family"], 0)
            seen[rec["family"]] = k + 1
            if keep(rec, k):
                out.append(line)
        _write_lines(task, rel, out)
    return mutate


def delete(rel: str) -> Callable[[Path], None]:
    return lambda task: (task / rel).unlink()


def empty(rel: str) -> Callable[[Path], None]:
    return lambda task: (task / rel).write_bytes(b"")


def truncate(rel: str, keep: float | int) -> Callable[[Path], None]:
    """Keep the first `keep` bytes (an int) or that share of them (a float)."""
    def mutate(task: Path):
        data = (task / rel).read_bytes()
        (task / rel).write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    return mutate


def edit_json(rel: str, **changes) -> Callable[[Path], None]:
    def mutate(task: Path):
        obj = json.loads((task / rel).read_text())
        for k, v in changes.items():
            if v is DELETE:
                obj.pop(k, None)
            else:
                obj[k] = v
        (task / rel).write_text(json.dumps(obj, indent=2))
    return mutate


def edit_tensor(rel: str, key: str, fn) -> Callable[[Path], None]:
    """Replace one tensor of a safetensors file by fn(tensor)."""
    def mutate(task: Path):
        from safetensors.torch import load_file, save_file
        state = load_file(str(task / rel))
        state[key] = fn(state[key]).contiguous()
        save_file(state, str(task / rel))
    return mutate


def _wider_vocab(t):
    import torch
    return torch.cat([t, t[:1]], 0)


# ------------------------------------------------------------------------------------------------ the corpus
CASES = [
    # the eight
    Case("gold-truncated-line", edit_line(GOLD, 4, lambda s: s[:len(s) // 2]), r"gold_calib\.jsonl:4: not valid JSON"),
    Case("gold-nan-label", raw_label(GOLD, 7, "NaN"), r"gold_calib\.jsonl:7: field 'label': expected a finite number, got nan"),
    Case("run-without-policy", delete(f"{RUN}/policy.safetensors"), r"runs/kl05-s800/policy\.safetensors: file not found"),
    Case("rm-truncated", truncate("reward_model/rm.safetensors", 0.5),
         r"reward_model/rm\.safetensors: not a valid safetensors file \(incomplete metadata"),
    Case("unknown-family", edit_record(DEV, 3, family="zinc"), r"prompts_dev\.jsonl:3: field 'family': unknown family 'zinc'"),
    Case("qa-5-token-response", edit_record(QA, 5, response=["ba"] * 5),
         r"reward_model/train\.jsonl:5: field 'response': expected a list of 8 content tokens"),
    Case("gold-empty", empty(GOLD), r"gold_calib\.jsonl: no records \(the file is empty\)"),
    Case("policy-config-not-its-weights", edit_json("policy/config.json", d_ff=64),
         r"policy/policy\.safetensors: 6 keys have shapes other than config\.json's: 'blocks\.0\.ff\.0\.weight' has "
         r"\(128, 64\), expected \(64, 64\)"),
    # missing and empty files
    Case("missing-gold", delete(GOLD), r"data/gold_calib\.jsonl: file not found"),
    Case("missing-prompts-train", delete(TRAIN), r"data/prompts_train\.jsonl: file not found"),
    Case("missing-default-config", delete("configs/default.json"), r"configs/default\.json: file not found"),
    Case("missing-rm-weights", delete("reward_model/rm.safetensors"), r"reward_model/rm\.safetensors: file not found"),
    Case("empty-prompts-train", empty(TRAIN), r"prompts_train\.jsonl: no records \(the file is empty\)"),
    Case("empty-qa", empty(QA), r"reward_model/train\.jsonl: no records \(the file is empty\)"),
    Case("empty-rm-weights", empty("reward_model/rm.safetensors"),
         r"reward_model/rm\.safetensors: not a valid safetensors file \(header too small\)"),
    # duplicate ids, attributes, labels, tokens
    Case("gold-duplicate-id", copy_id(GOLD, 2, 10), r"gold_calib\.jsonl:10: field 'id': .* repeats the id of line 2"),
    Case("prompts-duplicate-id", copy_id(TRAIN, 1, 3), r"prompts_train\.jsonl:3: field 'id': .* repeats the id of line 1"),
    Case("attr-8", edit_record(TRAIN, 2, attrs=[0, 8, 1, 1]), r"prompts_train\.jsonl:2: field 'attrs': expected 4 integers in 0\.\.7"),
    Case("attr-negative", edit_record(GOLD, 5, attrs=[-1, 0, 0, 0]), r"gold_calib\.jsonl:5: field 'attrs': expected 4 integers in 0\.\.7"),
    Case("prompt-wrong-length", edit_record(TRAIN, 4, attrs=[1, 2, 3]), r"prompts_train\.jsonl:4: field 'attrs': expected 4 integers"),
    Case("label-string", edit_record(GOLD, 3, label="0.5"), r"gold_calib\.jsonl:3: field 'label': expected a finite number, got '0\.5'"),
    Case("label-bool", edit_record(QA, 8, label=True), r"reward_model/train\.jsonl:8: field 'label': expected a finite number, got True"),
    Case("label-missing", edit_record(QA, 2, label=DELETE), r"reward_model/train\.jsonl:2: field 'label' is missing"),
    Case("gold-label-out-of-range", edit_record(GOLD, 6, label=7.5), r"gold_calib\.jsonl:6: field 'label': 7\.5 is outside \[-0\.5, 1\.5\]"),
    Case("non-content-token", edit_record(GOLD, 9, response=["ba", "da", "<sep>", "ba", "ba", "ba", "ba", "ba"]),
         r"gold_calib\.jsonl:9: field 'response\[2\]': '<sep>' is not a content token"),
    Case("record-not-an-object", edit_line(DEV, 2, lambda s: "[1, 2, 3]"), r"prompts_dev\.jsonl:2: expected a JSON object, got list"),
    Case("family-missing", edit_record(DEV, 6, family=DELETE), r"prompts_dev\.jsonl:6: field 'family' is missing"),
    Case("gold-not-utf8", append_bytes(GOLD, 11, b"\xff"), r"gold_calib\.jsonl:11: not UTF-8 text"),
    # coverage of the families
    Case("gold-missing-a-family", keep_rows(GOLD, lambda r, k: r["family"] != "dune"),
         r"gold_calib\.jsonl: family 'dune' has 0 rows; expected at least 2"),
    Case("qa-one-row-for-a-family", keep_rows(QA, lambda r, k: r["family"] != "ember" or k == 0),
         r"reward_model/train\.jsonl: family 'ember' has 1 rows; expected at least 2"),
    Case("prompts-missing-a-family", keep_rows(TRAIN, lambda r, k: r["family"] != "birch"),
         r"prompts_train\.jsonl: family 'birch' has 0 rows; expected at least 1"),
    # runs
    Case("run-without-config", delete(f"{RUN}/config.json"), r"runs/kl05-s800/config\.json: file not found"),
    Case("run-without-run-config", delete(f"{RUN}/run_config.json"), r"runs/kl05-s800/run_config\.json: file not found"),
    Case("run-config-missing-kl", edit_json(f"{RUN}/run_config.json", kl_coef=DELETE),
         r"runs/kl05-s800/run_config\.json: key 'kl_coef' is missing; expected a number >= 0"),
    Case("run-config-bad-weights", edit_json(f"{RUN}/run_config.json", family_weights={"zinc": 1.0}),
         r"runs/kl05-s800/run_config\.json: key 'family_weights' is \{'zinc': 1\.0\}; expected null or an object"),
    Case("run-log-bad-line", edit_line(f"{RUN}/log.jsonl", 2, lambda s: s[:-3]), r"runs/kl05-s800/log\.jsonl:2: not valid JSON"),
    # configs and checkpoints
    Case("default-config-not-json", truncate("configs/default.json", 40), r"configs/default\.json: not valid JSON"),
    Case("default-config-unknown-key", edit_json("configs/default.json", kl_coeff=0.1), r"configs/default\.json: unknown keys \['kl_coeff'\]"),
    Case("policy-config-missing-key", edit_json("policy/config.json", d_ff=DELETE),
         r"policy/config\.json: keys \['d_ff'\] are missing"),
    Case("rm-config-missing-key", edit_json("reward_model/config.json", n_heads=DELETE),
         r"reward_model/config\.json: keys \['n_heads'\] are missing"),
    Case("rm-config-wrong-vocab", edit_json("reward_model/config.json", vocab_size=41),
         r"reward_model/config\.json: key 'vocab_size' is 41; expected 40"),
    Case("policy-weights-wrong-vocab", edit_tensor("policy/policy.safetensors", "tok.weight", _wider_vocab),
         r"policy/policy\.safetensors: 1 key has a shape other than config\.json's: 'tok\.weight' has \(41, 64\), "
         r"expected \(40, 64\)"),
    Case("rm-weights-wrong-dtype", edit_tensor("reward_model/rm.safetensors", "ln.weight", lambda t: t.long()),
         r"reward_model/rm\.safetensors: key 'ln\.weight' has dtype I64; expected a floating-point dtype"),
    Case("run-weights-truncated-header", truncate(f"{RUN}/policy.safetensors", 100),
         r"runs/kl05-s800/policy\.safetensors: not a valid safetensors file \(invalid header length\)"),
]


def make_case(task: Path, dest: Path, case: Case) -> Path:
    """dest/<case.id>/: a copy of the task with the case's mutation applied."""
    out = Path(dest) / case.id
    shutil.copytree(task, out)
    case.mutate(out)
    return out


if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    for c in CASES:
        print(make_case(src, dst, c))
