"""What a world build draws, split by whether a float kernel can change it (tests/test_zoo.py compares a fresh
tiny build with these pins; `python -m tests.pins WORLD > tests/data/tiny_seed0_pins.json` writes them after a
deliberate change to the generator).

* Seed-only: drawn by numpy's PCG64 from the world seed, with no float result of torch in between. truth.json and
  the two prompt files are pinned by sha256: the generator draws the same count of numbers before them on every
  CPU (policy sampling uses seeded torch generators of its own, never the world's numpy stream, and every numpy
  draw before them has a size fixed by the config), and PCG64 is integer arithmetic. The seed-only *parts* of
  the policy-sampled files (row ids, families, attributes, which crowd rows the QA sample keeps, the corruption's
  parameters) are pinned by sha256 of their canonical JSON, for the same reason.
* Policy-sampled: responses drawn from the SFT reference policy (gold set, crowd batch), the wrong LUT built from
  the tokens it favours, and labels computed from responses. The policy's weights come out of float kernels,
  which round differently on other CPUs (AVX2 vs AVX-512 vs ATEN_CPU_CAPABILITY=default), so a sampled token
  flips wherever two perturbed logits tie within that rounding. These are compared by meaning: the share of
  tokens equal to the pinned ones, and exact labels wherever a row's tokens are equal (a label is a function of
  the tokens and of seed-only noise, rounded to 5 decimals) -- except a wrong-rubric family's crowd rows where its
  wrong LUT moved, since those labels score the tokens against that LUT.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from rlhf.vocab import CONTENT

SEED_ONLY_FILES = ("oracle/truth.json", "task/data/prompts_train.jsonl", "task/data/prompts_dev.jsonl")
SAMPLED_FILES = {"gold": "task/data/gold_calib.jsonl", "crowd": "oracle/crowd_full.jsonl"}
_LETTER = {t: chr(ord("a") + i) for i, t in enumerate(CONTENT)}     # one letter per content token


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compact(response: list[str]) -> str:
    return "".join(_LETTER[t] for t in response)


def pins(world) -> dict:
    w = Path(world)
    out = {"seed_only_sha256": {f: hashlib.sha256((w / f).read_bytes()).hexdigest() for f in SEED_ONLY_FILES}}
    for name, f in SAMPLED_FILES.items():
        rows = _rows(w / f)
        out[f"{name}_keys_sha256"] = _sha([[r["id"], r["family"], r["attrs"]] for r in rows])
        out[f"{name}_rows"] = {r["id"]: [compact(r["response"]), r["label"]] for r in rows}
    out["qa_ids_sha256"] = _sha([r["id"] for r in _rows(w / "task/reward_model/train.jsonl")])
    corr = json.loads((w / "oracle/corruption.json").read_text())
    out["corruption_params_sha256"] = _sha({f: {k: v for k, v in c.items() if k not in ("stats", "wrong_lut")}
                                            for f, c in corr.items()})
    out["wrong_lut"] = {f: c["wrong_lut"] for f, c in corr.items()}
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.pins WORLD_DIR > tests/data/tiny_seed0_pins.json")
    print(json.dumps(pins(sys.argv[1]), sort_keys=True, separators=(",", ":")))
