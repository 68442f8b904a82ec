"""jsonl records (SPEC §1) with validation that names the file, the line and the field, and tensors of them.

prompt record:   {"id", "family", "attrs": [a1, a2, a3, a4]}
labelled record: adds "response": [8 content-token strings] and "label": float
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import torch

from .atomic import atomic_write_text
from .errors import InputError
from .vocab import CONTENT_ID, FAMILIES, N_ATTRS, N_VALUES, RESP_LEN, decode_response, encode_prompt


class DataError(InputError):
    """A malformed input file: the message names the file, the line and the field."""


def json_error(e: json.JSONDecodeError, line: bool = False) -> str:
    """'Expecting ',' delimiter at column 40' (line=True: within one jsonl line) or '... at line 3 column 40'."""
    msg = e.msg.removesuffix(" at")     # some of json's messages end in "at" already
    return f"{msg} at column {e.colno}" if line else f"{msg} at line {e.lineno} column {e.colno}"


def read_json_object(path, expected: str = "a JSON object") -> dict:
    """The JSON object in `path` (a task's config, a world's oracle file, a cached result), or DataError naming
    the file and what is wrong with it: missing, unreadable, not JSON (a truncated write), not an object."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found; expected {expected}") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory; expected a file holding {expected}") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; expected {expected}") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); expected {expected}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        what = "the file is empty" if not text.strip() else f"not valid JSON ({json_error(e)})"
        raise DataError(f"{path}: {what}; expected {expected}") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected {expected}, got a JSON {type(obj).__name__}")
    return obj


def _check_record(rec, where: str) -> dict:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "family" not in rec:
        raise DataError(f"{where}: field 'family' is missing")
    if rec["family"] not in FAMILIES:
        raise DataError(f"{where}: field 'family': unknown family {rec['family']!r}; expected one of {', '.join(FAMILIES)}")
    attrs = rec.get("attrs")
    if (not isinstance(attrs, list) or len(attrs) != N_ATTRS
            or any(isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < N_VALUES for a in attrs)):
        raise DataError(f"{where}: field 'attrs': expected {N_ATTRS} integers in 0..{N_VALUES - 1}, got {attrs!r}")
    if "response" in rec:
        resp = rec["response"]
        if not isinstance(resp, list) or len(resp) != RESP_LEN:
            raise DataError(f"{where}: field 'response': expected a list of {RESP_LEN} content tokens, got {resp!r}")
        for p, t in enumerate(resp):
            if t not in CONTENT_ID:
                raise DataError(f"{where}: field 'response[{p}]': {t!r} is not a content token")
    if "label" in rec:
        lab = rec["label"]
        if isinstance(lab, bool) or not isinstance(lab, (int, float)) or not math.isfinite(lab):
            raise DataError(f"{where}: field 'label': expected a finite number, got {lab!r}")
    return rec


def read_jsonl_lines(path, require: tuple[str, ...] = (), on_error=None, unique_ids: bool = False
                     ) -> list[tuple[int, dict]]:
    """(line number, record) of every valid record of a jsonl file of prompt or labelled records. `require` names
    fields every row must have; `unique_ids`: an "id" seen on an earlier line is a problem too.
    Without `on_error` the first problem raises DataError; with it, every problem is passed to on_error(message)
    and the bad line is skipped, so that a caller can report all of them at once."""
    def problem(msg: str) -> None:
        if on_error is None:
            raise DataError(msg)
        on_error(msg)

    path = Path(path)
    if not path.is_file():
        problem(f"{path}: file not found")
        return []
    out, seen, n_lines = [], {}, 0
    try:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                where = f"{path}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    problem(f"{where}: not UTF-8 text; expected one JSON object per line")
                    continue
                if not line.strip():
                    continue
                n_lines += 1
                try:
                    rec = json.loads(line.rstrip("\r\n"))
                    _check_record(rec, where)
                    for key in require:
                        if key not in rec:
                            raise DataError(f"{where}: field {key!r} is missing")
                except json.JSONDecodeError as e:
                    problem(f"{where}: not valid JSON ({json_error(e, line=True)}); expected one JSON object "
                            "per line")
                    continue
                except DataError as e:
                    problem(str(e))
                    continue
                if unique_ids and "id" in rec:
                    key = json.dumps(rec["id"], sort_keys=True)
                    if key in seen:
                        problem(f"{where}: field 'id': {rec['id']!r} repeats the id of line {seen[key]}; "
                                "expected ids unique within the file")
                        continue
                    seen[key] = lineno
                out.append((lineno, rec))
    except OSError as e:
        problem(f"{path}: cannot be read ({e.strerror})")
        return out
    if not n_lines:
        problem(f"{path}: no records (the file is empty); expected one JSON record per line")
    return out


def read_jsonl(path, require: tuple[str, ...] = (), unique_ids: bool = False) -> list[dict]:
    """Read and validate a jsonl file of prompt or labelled records (the first problem raises DataError, naming
    the file, the line and the field). `require` names fields every row must have; `unique_ids`: a repeated
    "id" is a problem too (as the audit's task loader has it for training and labelled data)."""
    return [rec for _, rec in read_jsonl_lines(path, require, unique_ids=unique_ids)]


def write_jsonl(path, records) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def prompts_tensor(records) -> torch.Tensor:
    return torch.tensor([encode_prompt(r["family"], r["attrs"]) for r in records], dtype=torch.long)


def responses_tensor(records) -> torch.Tensor:
    return torch.tensor([[CONTENT_ID[t] for t in r["response"]] for r in records], dtype=torch.long)


def labels_tensor(records) -> torch.Tensor:
    return torch.tensor([float(r["label"]) for r in records], dtype=torch.float32)


def with_responses(records, responses: torch.Tensor, n_per_prompt: int = 1) -> list[dict]:
    """Labelled-style records (without label) for responses sampled n_per_prompt per record."""
    out = []
    for i, resp in enumerate(responses.tolist()):
        r = records[i // n_per_prompt]
        out.append({"id": r.get("id"), "family": r["family"], "attrs": list(r["attrs"]), "response": decode_response(resp)})
    return out


def group_by_family(records) -> dict[str, list[dict]]:
    groups = defaultdict(list)
    for r in records:
        groups[r["family"]].append(r)
    return {f: groups[f] for f in FAMILIES if f in groups}


def sample_prompt_batch(by_family: dict, weights: dict | None, batch: int, generator: torch.Generator) -> list[dict]:
    """Draw `batch` prompts: a family per prompt from `weights` (None = balanced over the families present),
    then a prompt uniformly within it. Families with weight 0 are never drawn."""
    fams = [f for f in by_family if by_family[f]]
    if weights is None:
        w = [1.0] * len(fams)
    else:
        unknown = set(weights) - set(FAMILIES)
        if unknown:
            raise ValueError(f"family_weights: unknown families {sorted(unknown)}")
        w = [float(weights.get(f, 0.0)) for f in fams]
    if not fams or sum(w) <= 0:
        raise ValueError("sample_prompt_batch: no family with positive weight has prompts")
    fam_idx = torch.multinomial(torch.tensor(w), batch, replacement=True, generator=generator)
    out = []
    for k in fam_idx.tolist():
        pool = by_family[fams[k]]
        j = int(torch.randint(len(pool), (1,), generator=generator))
        out.append(pool[j])
    return out
