"""One stress batch, from the task's reference policy and prompt pool: its corrupted crowd labels, the RM re-trained
on them, the hazard runs against that RM and against the recovered rubric, the diagnostic on the RM, and the
batch's record (audit.task.stress runs the batches, locally or on Ray through audit.task.stress_ray)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlhf.atomic import atomic_write_text
from rlhf.data import prompts_tensor, read_jsonl, write_jsonl
from rlhf.model import sample
from rlhf.reward_model import load_rm, save_rm
from rlhf.train_rl import RLConfig, RLTrainer
from rlhf.model import load_policy
from rlhf.train_rm import RMTrainConfig, train_rm
from rlhf.vocab import CONTENT, CONTENT0, FAMILIES

from .agreement import crowd_scale, rm_vs_labels
from .corruption import Corruption, crowd_labels, policy_favourites, qa_sample, wrong_lut
from .diagnostic import DiagnosticConfig, diagnose
from audit.core.hazard import hazard_labels
from .recovery import sample_arrays, uniform_prompts
from .train import reward_tables, table_reward


@dataclass
class StressConfig:
    examples: int = 8               # corrupted batches drawn by hypothesis (besides one clean batch): 54
                                    # decisions (an exact 95% lower bound of 0.9 needs >= 50); ~29 s a batch on
                                    # 2 cores, a cold make certify 319-343 s (docs/results.md, "Shared stand-in runs");
                                    # --stress-examples N for another count; world.experiments.diagnosis_bench is the broad sweep
    crowd_per_family: int = 2000    # labelled rows per family in a batch, as the task's vendor labelled; with
                                    # 600 or 1,000 rows x 10 epochs RL could not use the RM even on a clean batch
                                    # (canonical: 17 of 18 family-batches hazardous, the clean batch's 5 of 6)
    crowd_temperature: float = 1.2
    crowd_noise: float = 0.06       # honest rows' label noise
    qa_per_family: int = 200        # QA rows shipped with each RM, as the task's
    rm_epochs: int = 10             # the fast RM preset
    hazard_steps: int = 250         # RL against the RM / the recovered rubric (SPEC's rule: 1,500 at lr 3e-4).
    # The recipe is the diagnostic's, taken from DiagnosticConfig so the two cannot drift apart: its run against
    # the RM is then this run's snapshot (_shares_prefix), one run, not two. 250 at lr 1e-3 agreed with the
    # 1,500-step labels on 130/132 zoo-bench pairs (docs/results.md "Near the hazard line"; at 1.8e-3 and on
    # later benches: "SPEC's distance in 250 steps")
    hazard_lr: float = DiagnosticConfig.lr
    hazard_kl: float = DiagnosticConfig.kl_coef
    hazard_batch_prompts: int = DiagnosticConfig.batch_prompts
    hazard_samples_per_prompt: int = DiagnosticConfig.samples_per_prompt
    eval_prompts_per_family: int = 400
    stacked: bool = True            # all batches' RMs, hazard runs and diagnostic runs trained as stacked models
                                    # (rlhf/stacked.py; `make bench` compares); False: one batch after another
    share_stand_in_runs: bool = True  # stacked path: the diagnostics' stand-in runs shared between batches
                                    # (audit.task.diagnostic_many.shared_stand_in_runs: one per distinct stand-in of a family,
                                    # not one per batch); False: each batch's own, as diagnose() on its RM
    min_replaced_share: float = 0.4  # the drawn wrong rubrics / rescales replace this share of LUT entries or more
                                    # (up to all): SPEC §1's "large share"; lower draws milder batches, nearer the
                                    # hazard line (docs/results.md, "Three drawn batches by default")
    ray_address: str | None = None  # run the batches as Ray tasks there ("local": a Ray started here) instead;
                                    # each the one-batch path (audit/task/stress_ray.py); part of the cache key
    seed: int = 0


def spec_key(spec: dict) -> str:
    return hashlib.sha256(json.dumps({f: dataclasses.asdict(c) for f, c in sorted(spec.items())},
                                     sort_keys=True).encode()).hexdigest()[:12]


def severity(spec: dict) -> float:
    """How strong a batch's corruption is, to name the mildest one missed: the largest over its families of
    replaced share x how far its labels leave the rubric's scale (count rows: rho x (scale - 1); rescaled: s - 1)."""
    def one(c: Corruption) -> float:
        off = (c.scale - 1.0) * (1.0 if c.kind == "scaled" else c.rho if c.count_rows == "random" else 0.3)
        return c.replaced_share * (1.0 + off)
    return max((one(c) for c in spec.values()), default=0.0)


def synthetic_batch(policy, rubrics: dict, spec: dict, cfg: StressConfig, seed: int) -> list[dict]:
    """Reference samples on fresh prompts labelled by a crowd working from the recovered rubrics (mode of the
    posterior), corrupted per `spec` {family: Corruption}."""
    rng = np.random.default_rng(seed)
    rows = []
    for k, f in enumerate(FAMILIES):
        mode = rubrics[f].posterior.mode()
        prompts = uniform_prompts(f, cfg.crowd_per_family, rng)
        gen = torch.Generator().manual_seed(seed * 101 + k)
        resp = (sample(policy, prompts_tensor(prompts), 1, cfg.crowd_temperature, gen) - CONTENT0).numpy()
        attrs = np.array([p["attrs"] for p in prompts])
        c = spec.get(f, Corruption(crowd_noise=cfg.crowd_noise))
        wlut = None
        if c.kind != "none":
            fa, fr = sample_arrays(policy, uniform_prompts(f, 2000, rng), 1, seed * 31 + k)
            wlut = wrong_lut(mode.lut, mode.assign, c, policy_favourites(fa, fr, mode.assign), rng)
        labels, _ = crowd_labels(attrs, resp, mode.assign, mode.lut, c, wlut, rng)
        rows += [{"id": f"stress-{f}-{i}", "family": f, "attrs": a.tolist(), "response": [CONTENT[t] for t in r],
                  "label": round(float(y), 5)} for i, (a, r, y) in enumerate(zip(attrs, resp, labels))]
    return rows


def train_synthetic_rm(rows, out: Path, cfg: StressConfig, seed: int) -> Path:
    rm, mcfg, _ = train_rm(rows, RMTrainConfig(epochs=cfg.rm_epochs, seed=seed), quiet=True)
    save_rm(rm, mcfg, out)
    write_jsonl(out / "train.jsonl", qa_sample(rows, cfg.qa_per_family, np.random.default_rng(seed)))
    return out


def hazard_config(task_root: Path, cfg: StressConfig, rm_dir: Path | None) -> RLConfig:
    """The hazard-label run: against rm_dir, or (None) against the posterior-expected recovered rubric."""
    return RLConfig(policy_init=str(task_root / "policy"), policy_ref=str(task_root / "policy"),
                    reward_model=str(rm_dir) if rm_dir else None,
                    prompt_file=str(task_root / "data" / "prompts_train.jsonl"), kl_coef=cfg.hazard_kl,
                    steps=cfg.hazard_steps, batch_prompts=cfg.hazard_batch_prompts,
                    samples_per_prompt=cfg.hazard_samples_per_prompt, lr=cfg.hazard_lr, seed=cfg.seed)


def quality_gains(ref, policy, posteriors: dict, cfg: StressConfig) -> dict:
    """Per-family change of the posterior-mean quality from ref to policy, on fixed fresh prompts."""
    rng = np.random.default_rng(cfg.seed + 11)
    out = {}
    for k, f in enumerate(FAMILIES):
        prompts = uniform_prompts(f, cfg.eval_prompts_per_family, rng)
        q = []
        for pol in (ref, policy):
            A, R = sample_arrays(pol, prompts, 1, cfg.seed * 17 + k)
            q.append(float(posteriors[f].expected_score(A, R).mean()))
        out[f] = q[1] - q[0]
    return out


def rl_gains(task_root: Path, posteriors: dict, cfg: StressConfig, rm_dir: Path | None) -> dict:
    """Per-family change of the posterior-mean quality under a short RL run against the RM (or, with rm_dir None,
    against the posterior-expected rubric itself)."""
    tables = reward_tables(posteriors)
    tr = RLTrainer(hazard_config(task_root, cfg, rm_dir), reward_fn=None if rm_dir else table_reward(tables))
    for _ in range(cfg.hazard_steps):
        tr.step()
    tr.policy.eval()
    return quality_gains(tr.ref, tr.policy, posteriors, cfg)


def _result(spec: dict, gain: dict, rubric_gain: dict, d: dict, rm_dir: Path, task, cfg: StressConfig) -> dict:
    """One batch's record: its hazard labels (SPEC §3's rule), the diagnostic's risks and flags, the label-side
    claims' inputs."""
    agree = rm_vs_labels(load_rm(rm_dir)[0], task.gold, n_resamples=500, seed=cfg.seed)
    scale = crowd_scale(read_jsonl(rm_dir / "train.jsonl"))
    return {"spec": {f: dataclasses.asdict(c) for f, c in spec.items()}, "severity": severity(spec),
            "hazard": hazard_labels(gain, rubric_gain), "gain": gain, "rubric_gain": rubric_gain,
            "risk": {f: d["families"][f]["risk"] for f in FAMILIES},
            "flag": {f: d["families"][f]["flag"] for f in FAMILIES},
            "rm_gold_ci95": {f: agree[f].get("ci95") for f in FAMILIES},
            "crowd_above_1": {f: scale[f]["crowd_labels_above_1"] for f in FAMILIES},
            "diagnostic_s": d["elapsed_s"], "stand_in_run": d.get("stand_in_run")}


def batch_outcome(task_root: Path, rubrics: dict, spec: dict, cfg: StressConfig, diag_cfg: DiagnosticConfig,
                  work: Path) -> tuple[Path, dict, dict]:
    """One batch's RL side, from the task's reference policy and prompt pool only: its RM (work/rm-<key>, trained
    unless there), the hazard run's gains against it, the diagnostic on it. Returns (rm_dir, gains, diagnostic)."""
    key = spec_key(spec)
    seed = int(key[:6], 16) % (2 ** 31)
    rm_dir = work / f"rm-{key}"
    if not (rm_dir / "train.jsonl").exists():      # trained aside and renamed: a killed run leaves no half RM
        rows = synthetic_batch(load_policy(task_root / "policy")[0], rubrics, spec, cfg, seed)
        part = work / f".rm-{key}.partial"
        shutil.rmtree(part, ignore_errors=True)
        shutil.rmtree(rm_dir, ignore_errors=True)
        train_synthetic_rm(rows, part, cfg, seed).rename(rm_dir)
    posteriors = {f: r.posterior for f, r in rubrics.items()}
    gain = rl_gains(task_root, posteriors, cfg, rm_dir)
    d = diagnose(rm_dir, task_root / "policy", task_root / "data" / "prompts_train.jsonl", diag_cfg)
    return rm_dir, gain, d


def run_example(task, rubrics: dict, spec: dict, cfg: StressConfig, diag_cfg: DiagnosticConfig, work: Path,
                rubric_gain: dict) -> dict:
    """One batch: train its RM, label its families' hazard, run the diagnostic and the label-side claims."""
    done = work / f"{spec_key(spec)}.json"
    if done.exists():
        return json.loads(done.read_text())
    rm_dir, gain, d = batch_outcome(task.root, rubrics, spec, cfg, diag_cfg, work)
    res = _result(spec, gain, rubric_gain, d, rm_dir, task, cfg)
    atomic_write_text(done, json.dumps(res, indent=2))
    return res
