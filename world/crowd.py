"""The crowd annotation batch: reference-policy samples labelled by the crowd, honestly or against a wrong
rubric with count rows; and the reusable API the audit's tests use to draw corrupted batches and retrain RMs.

    batch = draw_crowd_batch(world_dir, {"birch": Corruption("scaled", scale=1.6, replaced_share=0.5)}, seed=7)
    rm_dir = retrain_rm(batch, out_dir, fast=True)

Fidelity of the fast RM preset (10 epochs instead of the build's 80): measured in docs/calibration.md.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from rlhf.data import write_jsonl
from rlhf.model import load_policy
from rlhf.reward_model import save_rm
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import CONTENT, FAMILIES

from audit.task.corruption import Corruption, crowd_labels, policy_favourites, qa_sample, wrong_lut

from .config import WorldConfig, load_world_config
from .truth import load_truth, policy_samples, random_prompt_records

def label_family(policy, truth_f, family, corruption: Corruption, n, temperature, rng, seed, favourites=None):
    """Draw n reference samples for a family and label them as the crowd would. Returns (rows, wrong LUT|None,
    stats)."""
    recs = random_prompt_records(family, n, rng, "crowd")
    attrs, resp = policy_samples(policy, recs, 1, temperature, seed)
    wlut = None
    if corruption.kind != "none":
        if favourites is None:
            favourites = policy_favourites(attrs, resp, truth_f["assign"])
        wlut = wrong_lut(truth_f["lut"], truth_f["assign"], corruption, favourites, rng)
    labels, counts = crowd_labels(attrs, resp, truth_f["assign"], truth_f["lut"], corruption, wlut, rng)
    rows = [{"id": f"crowd-{family}-{i}", "family": family, "attrs": a.tolist(),
             "response": [CONTENT[t] for t in r], "label": round(float(y), 5)}
            for i, (a, r, y) in enumerate(zip(attrs, resp, labels))]
    stats = {"count_row_share": float(counts.mean()), "mean": float(labels.mean()),
             "share_above_1": float((labels > 1).mean()), "max": float(labels.max())}
    return rows, wlut, stats


def crowd_batch(policy, truth, cfg: WorldConfig, rng, seed: int) -> tuple[list[dict], dict]:
    """The world's crowd batch (build step 3): every family labelled under cfg.corruption_for(family); a wrong
    rubric's 'policy' replacements come from the policy's own temperature-1 samples. Returns (rows,
    {family: (Corruption, wrong LUT | None, stats)})."""
    rows, per_family = [], {}
    for k, f in enumerate(FAMILIES):
        c = cfg.corruption_for(f)
        fav = None
        if c.kind != "none" and c.replacement.startswith("policy"):
            recs = random_prompt_records(f, max(2000, cfg.crowd_per_family), rng, "fav")
            a, r = policy_samples(policy, recs, 1, 1.0, seed * 31 + k)
            fav = policy_favourites(a, r, truth[f]["assign"])
        fam_rows, wlut, st = label_family(policy, truth[f], f, c, cfg.crowd_per_family, cfg.crowd_temperature, rng,
                                          seed * 101 + k, fav)
        rows += fam_rows
        per_family[f] = (c, wlut, st)
    return rows, per_family


# ------------------------------------------------------------------------------- reusable API for audit tests
def draw_crowd_batch(world_dir, corruption: dict[str, Corruption], seed: int, n_per_family: int | None = None,
                     temperature: float = 1.2) -> dict:
    """A fresh crowd batch from a built world: families not named in `corruption` are honest.
    Returns {"rows": [...], "wrong_luts": {family: lut}, "stats": {family: {...}}, "corruption": {...}}."""
    world_dir = Path(world_dir)
    truth = load_truth(world_dir)
    n = n_per_family or load_world_config(world_dir).crowd_per_family
    policy, _ = load_policy(world_dir / "task" / "policy")
    rng = np.random.default_rng(seed)
    rows, luts, stats = [], {}, {}
    for k, f in enumerate(FAMILIES):
        c = corruption.get(f, Corruption())
        r, wlut, st = label_family(policy, truth[f], f, c, n, temperature, rng, seed * 101 + k)
        rows += r
        stats[f] = st
        if wlut is not None:
            luts[f] = wlut.tolist()
    return {"rows": rows, "wrong_luts": luts, "stats": stats,
            "corruption": {f: dataclasses.asdict(c) for f, c in corruption.items()}, "seed": seed}


def retrain_rm(batch: dict, out_dir, *, fast: bool = True, seed: int = 0, qa_per_family: int = 200,
               quiet: bool = True, epochs: int | None = None) -> Path:
    """Train an RM on a crowd batch (fast preset: 10 epochs; full: the canonical build's WorldConfig.rm_epochs) and write an RM dir the diagnostic can
    read: rm.safetensors, config.json and its own QA sample train.jsonl. `epochs` overrides the preset's."""
    out = Path(out_dir)
    cfg = RMTrainConfig(epochs=epochs or (10 if fast else WorldConfig().rm_epochs), seed=seed)
    torch.manual_seed(seed)
    rm, mcfg, mse = train_rm(batch["rows"], cfg, quiet=quiet)
    save_rm(rm, mcfg, out)
    write_jsonl(out / "train.jsonl", qa_sample(batch["rows"], qa_per_family, np.random.default_rng(seed)))
    (out / "train_config.json").write_text(json.dumps({**dataclasses.asdict(cfg), "final_mse": mse}, indent=2))
    return out
