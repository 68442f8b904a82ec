"""python -m world export-samples WORLD --out DIR: a built world's runs as a samples table (SPEC §4), the ground
truth for the samples front door (python -m audit.samples).

For the reference policy and every shipped run, `--samples` fresh prompts per family (uniform attributes) and one
temperature-1.0 sample each, scored by the task's RM (proxy_reward); a simple random subset of `--gold` rows per
run x family (at most `--samples`, refused beyond it; equal labels every sample) labelled by the world's experts
(the rubric's match fraction + the world's expert noise). The exact true quality of every run x family (the
oracle rubric on `--truth-samples` further fresh samples a family, with its Monte-Carlo standard error; and the
exact mean of the exported rows themselves) is written apart, to DIR/oracle/truth.json: the audit never reads it
(grading only: world/experiments/samples_coverage.py).

    DIR/samples.{jsonl,csv,parquet}   sample_id, run, family, prompt_id, prompt, completion, proxy_reward
    DIR/gold.{jsonl,csv,parquet}      sample_id, gold
    DIR/oracle/truth.json             {"runs": {run: {"per_family": {f: q}, "se": {f: se}, "balanced": q,
                                                      "rows_mean": {f: q}}}, "reference": "reference", ...}
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from rlhf.atomic import atomic_dir
from rlhf.common import setup_torch
from rlhf.data import prompts_tensor
from rlhf.errors import InputError
from rlhf.model import load_policy
from rlhf.reward_model import load_rm, score
from rlhf.vocab import CONTENT, CONTENT0, FAMILIES

from rlhf.cli import Parser, first_paragraph, positive_int, seed_arg
from .config import RUNS, load_world_config
from .truth import (match_fraction, policy_samples, random_prompt_records, read_truth_json, require_built_world,
                    true_quality, truth_from_json)

REFERENCE = "reference"


def write_table(rows: list[dict], path: Path) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return
    import pyarrow as pa
    tab = pa.Table.from_pylist(rows)
    if path.suffix == ".csv":
        import pyarrow.csv as pc
        pc.write_csv(tab, path)
    else:
        import pyarrow.parquet as pq
        pq.write_table(tab, path)


def check_export(world, out, samples: int, gold: int, truth_samples: int) -> None:
    """InputError (exit 2), before any work, for what export would refuse or lose: a world that is not a built
    one, counts below 1, more gold rows than samples (the gold rows are a subset of each cell's samples: --gold
    equal to --samples labels every sample), an --out that is not an export (export replaces it whole)."""
    require_built_world(world)
    for flag, v in (("--samples", samples), ("--gold", gold), ("--truth-samples", truth_samples)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{flag} {v}: expected an integer >= 1")
    if gold > samples:
        raise InputError(f"--gold {gold} exceeds --samples {samples}: the gold rows are a random subset of each run x "
                         "family cell's samples (at most --samples; equal labels every sample)")
    out = Path(out)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / "oracle" / "truth.json").is_file())):
        raise InputError(f"--out {out}: exists and is not an export of python -m world export-samples (no "
                         "oracle/truth.json); export replaces its --out whole: choose a new or empty directory")


def export(world, out, *, samples: int = 1000, gold: int = 100, seed: int = 0, truth_samples: int = 4000,
           fmt: str = "jsonl", runs=None, quiet: bool = False) -> dict:
    setup_torch()
    world, out = Path(world), Path(out)
    task = world / "task"
    check_export(world, out, samples, gold, truth_samples)
    truth_json = read_truth_json(world)         # read once, checked: the rubric and the experts' noise
    truth, noise = truth_from_json(truth_json), float(truth_json["expert_noise_sd"])
    rm, _ = load_rm(task / "reward_model")
    rng = np.random.default_rng(seed)
    names = [REFERENCE] + [r[0] for r in RUNS if (task / "runs" / r[0]).is_dir()]
    if runs:
        names = [n for n in names if n in runs]
    srows, grows, oracle = [], [], {}
    t0 = time.time()
    for k, name in enumerate(names):
        pol, _ = load_policy(task / "policy" if name == REFERENCE else task / "runs" / name)
        rows_mean = {}
        for j, f in enumerate(FAMILIES):
            recs = random_prompt_records(f, samples, rng, f"{name}-{f}")
            attrs, resp = policy_samples(pol, recs, 1, 1.0, seed * 1_000_003 + k * 101 + j)
            proxy = score(rm, prompts_tensor(recs), torch.as_tensor(resp + CONTENT0)).numpy()
            q = match_fraction(truth[f]["assign"], truth[f]["lut"], attrs, resp)
            rows_mean[f] = float(q.mean())
            labelled = set(rng.choice(samples, size=gold, replace=False).tolist())     # gold <= samples
            for i, (rec, rr) in enumerate(zip(recs, resp)):
                sid = f"{name}/{f}/{i}"
                srows.append({"sample_id": sid, "run": name, "family": f, "prompt_id": rec["id"],
                              "prompt": " ".join([f"<{f}>"] + [f"v{a}" for a in rec["attrs"]]),
                              "completion": " ".join(CONTENT[t] for t in rr), "proxy_reward": round(float(proxy[i]), 6)})
                if i in labelled:
                    grows.append({"sample_id": sid, "gold": round(float(q[i] + rng.normal(0, noise)), 5)})
        tq = true_quality(pol, truth, truth_samples, seed=seed * 31 + k + 7)
        oracle[name] = {**tq, "rows_mean": rows_mean}
        if not quiet:
            print(f"[export {time.time() - t0:5.0f}s] {name}: balanced true quality {tq['balanced']:.3f}", flush=True)
    perm = rng.permutation(len(grows))     # gold rows in no particular order
    grows = [grows[i] for i in perm]
    meta = {"world": str(world), "world_variant": load_world_config(world).variant, "seed": seed,
            "samples_per_cell": samples, "gold_per_cell": gold, "truth_samples_per_family": truth_samples,
            "reference": REFERENCE, "expert_noise_sd": noise, "runs": oracle}
    with atomic_dir(out) as tmp:        # replaces an earlier export whole, and only once this one is written
        (tmp / "oracle").mkdir()
        write_table(srows, tmp / f"samples.{fmt}")
        write_table(grows, tmp / f"gold.{fmt}")
        (tmp / "oracle" / "truth.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv=None) -> int:
    ap = Parser(prog="python -m world export-samples", description=first_paragraph(__doc__))
    ap.add_argument("world")
    ap.add_argument("--out", required=True,
                    help="a new or empty directory, or an earlier export (replaced whole, once the new one is done)")
    ap.add_argument("--samples", type=positive_int, default=1000, help="samples per run x family (default 1000)")
    ap.add_argument("--gold", type=positive_int, default=100,
                    help="gold rows per run x family (default 100): a random subset of the cell's --samples, so at "
                         "most --samples (equal: every sample labelled)")
    ap.add_argument("--truth-samples", type=positive_int, default=4000,
                    help="oracle samples per family for the truth")
    ap.add_argument("--format", choices=["jsonl", "csv", "parquet"], default="jsonl")
    ap.add_argument("--seed", type=seed_arg, default=0)
    a = ap.parse_args(argv)
    export(a.world, a.out, samples=a.samples, gold=a.gold, seed=a.seed, truth_samples=a.truth_samples, fmt=a.format)
    print(f"wrote {a.out}/samples.{a.format}, gold.{a.format}, oracle/truth.json")
    return 0
