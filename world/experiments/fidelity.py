"""python -m world.experiments.fidelity WORLD [--seed 7]: what the fast RM preset of world.crowd.retrain_rm (10 epochs)
costs against the full one (the build's 80 epochs), on one corrupted crowd batch drawn from WORLD (dune with the canonical
corruption, birch with the stress kind). Prints JSON: per-family Pearson of each RM with the expert labels on
the world's gold rows, in-sample fit on the batch, training time, and the agreement of the two RMs' scores.
Figures in docs/calibration.md."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from rlhf.common import setup_torch
from rlhf.data import labels_tensor, read_jsonl
from rlhf.errors import run_cli
from rlhf.reward_model import load_rm
from rlhf.vocab import FAMILIES

from ..calibrate import pearson, rm_scores
from rlhf.cli import Parser, first_paragraph, seed_arg
from ..config import Corruption, preset
from ..crowd import draw_crowd_batch, retrain_rm
from ..truth import require_built_world


def _pearson(x, y) -> float:
    return round(pearson(x, y), 3)


def fidelity(world: Path, seed: int = 7, full_epochs: int | None = None) -> dict:
    """The fast RM preset against the full one (`full_epochs` overrides the full preset's epochs: tests)."""
    spec = {"dune": Corruption(**preset("canonical").corruption["dune"]),
            "birch": Corruption("scaled", scale=1.6, replaced_share=0.5)}
    batch = draw_crowd_batch(world, spec, seed=seed)
    gold = read_jsonl(world / "task" / "data" / "gold_calib.jsonl")
    crowd = batch["rows"]
    out, scores = {"corruption": {"dune": "canonical wrong_rubric", "birch": "scaled 1.6, 50% replaced"},
                   "seed": seed}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fast in (("fast", True), ("full", False)):
            t = time.time()
            rm, _ = load_rm(retrain_rm(batch, Path(tmp) / name, fast=fast, seed=0,
                                         epochs=None if fast else full_epochs))
            row = {"train_s": round(time.time() - t, 1)}
            for f in FAMILIES:
                g = [r for r in gold if r["family"] == f]
                s = rm_scores(rm, g)
                row[f] = _pearson(s, labels_tensor(g).numpy())
                scores[name, f] = s
            s = rm_scores(rm, crowd)
            row["in_sample_fit"] = _pearson(s, labels_tensor(crowd).numpy())
            out[name] = row
    out["fast_vs_full_score_pearson_on_gold"] = {f: _pearson(scores["fast", f], scores["full", f]) for f in FAMILIES}
    return out


def main(argv=None):
    ap = Parser(prog="python -m world.experiments.fidelity", description=first_paragraph(__doc__))
    ap.add_argument("world", type=Path)
    ap.add_argument("--seed", type=seed_arg, default=7, help="seed of the crowd batch")
    a = ap.parse_args(argv)
    require_built_world(a.world)
    setup_torch()
    print(json.dumps(fidelity(a.world, a.seed), indent=1))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world.experiments.fidelity"))
