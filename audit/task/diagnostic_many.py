"""The gold-free diagnostic on several RMs of one task at once (audit.task.diagnostic.diagnose on each): their short
runs trained as one stacked model (rlhf.train_rl_stacked), the stand-in runs optionally shared between RMs. The
stress claim (audit.task.stress) and the bench (world.experiments.diagnosis_bench) diagnose many RMs this way."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from rlhf.data import read_jsonl
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from .diagnostic import (DiagnosticConfig, _finish, _prepare, _quality_one, _stacked_runs, check_config, check_rm_dir,
                         run_config, rubric_reward, stand_in_prior)
from .rubric import Rubric


def shared_stand_in_runs(preps: list[dict]) -> tuple[list[dict], list[dict]]:
    """Fewer stand-in runs for several RMs of one task. An RM's stand-in for a family depends only on that family's
    QA labels, so RMs whose batches differ in one or two families share the rest: on canonical's nine stress
    batches each family had 2-4 distinct stand-ins, no two RMs the same six. A family's denominator (its stand-in
    gain under the stand-in run) needs a run that optimises *its* stand-in; the other families' stand-ins in that
    run only reach it through the shared policy. So: run j optimises, for each family, its j-th distinct stand-in
    (the most used first; its most used where it has fewer than j + 1), and an RM's family takes the run holding
    its stand-in -- max over families of the distinct counts runs instead of one per RM. An RM whose six
    stand-ins are one run's takes that run whole: exactly the run diagnose() trains.
    Returns (runs: [{family: Rubric}], use: per prep {family: run index})."""
    if not preps:
        return [], []
    fams = list(preps[0]["rubrics"])

    def key(r: Rubric) -> bytes:
        return np.asarray(r.assign).tobytes() + np.asarray(r.lut).tobytes()
    distinct = {}
    for f in fams:
        seen: dict[bytes, list] = {}
        for p in preps:
            seen.setdefault(key(p["rubrics"][f]), [0, p["rubrics"][f]])[0] += 1
        # most used first; among equals the first seen (dicts keep insertion order, sorted is stable)
        distinct[f] = [r for _, r in sorted(seen.values(), key=lambda v: -v[0])]
    n = max(len(v) for v in distinct.values())
    runs = [{f: distinct[f][j] if j < len(distinct[f]) else distinct[f][0] for f in fams} for j in range(n)]
    run_keys = [{f: key(r) for f, r in run.items()} for run in runs]
    use = []
    for p in preps:
        mine = {f: key(p["rubrics"][f]) for f in fams}
        whole = next((j for j, rk in enumerate(run_keys) if rk == mine), None)
        use.append({f: whole if whole is not None else next(j for j, rk in enumerate(run_keys) if rk[f] == mine[f])
                    for f in fams})
    return runs, use


def diagnose_many(rm_dirs, policy_dir, prompts_file, cfg: DiagnosticConfig = DiagnosticConfig(),
                  rm_runs: list | None = None, share_stand_in_runs: bool = False) -> list[dict]:
    """diagnose() on several RMs at once: their short runs trained as one stacked model (rlhf.train_rl_stacked;
    each member is the run diagnose() trains, up to float rounding). rm_runs: policies already trained by
    run_config(cfg, policy_dir, prompts_file, rm_dir) (the same run, e.g. a longer run's snapshot at cfg.steps),
    used instead of training the RM runs again. share_stand_in_runs: the stand-in runs shared between the RMs
    (shared_stand_in_runs; an approximation where an RM's six stand-ins are no run's, measured in
    docs/results.md). elapsed_s is each RM's equal share of the whole."""
    if cfg.replicates != 1:
        raise ValueError(f"diagnose_many runs one replicate per RM (cfg.replicates {cfg.replicates}); use diagnose")
    check_config(cfg)
    for d in rm_dirs:
        check_rm_dir(d)
    t0 = time.time()
    policy_dir = Path(policy_dir)
    ref, _ = load_policy(policy_dir)
    fams = sorted({r["family"] for r in read_jsonl(prompts_file)}, key=FAMILIES.index)
    priors = {f: stand_in_prior(ref, f, cfg) for f in fams}      # the same for every RM: drawn once
    preps = [_prepare(d, ref, fams, cfg, priors) for d in rm_dirs]
    if share_stand_in_runs:
        out = _diagnose_shared(preps, policy_dir, prompts_file, cfg, rm_runs)
    else:
        pairs = _stacked_runs([(prep, cfg) for prep in preps], policy_dir, prompts_file, rm_runs)
        out = [_finish(prep, *pair, cfg, 0.0) for prep, pair in zip(preps, pairs)]
    for r in out:
        r["elapsed_s"] = round((time.time() - t0) / max(len(out), 1), 1)
    return out


def _diagnose_shared(preps, policy_dir, prompts_file, cfg: DiagnosticConfig, rm_runs: list | None) -> list[dict]:
    """diagnose_many's work with the stand-in runs shared (shared_stand_in_runs): the RMs' runs (unless given) and
    the shared stand-in runs as one stacked model; each family's stand-in quality under the run it takes,
    evaluated once per run and family as _quality would (same prompts, same seed)."""
    from rlhf.train_rl_stacked import run_stacked
    runs, use = shared_stand_in_runs(preps)
    cfgs = [] if rm_runs is not None else [run_config(cfg, policy_dir, prompts_file, str(p["rm_dir"])) for p in preps]
    fns = [None] * len(cfgs)
    cfgs += [run_config(cfg, policy_dir, prompts_file) for _ in runs]
    fns += [rubric_reward(run) for run in runs]
    pols = run_stacked(cfgs, fns)
    pol_rms = rm_runs if rm_runs is not None else pols[:len(preps)]
    pol_runs = pols[len(pols) - len(runs):]
    fams = list(preps[0]["rubrics"])
    eval_prompts = preps[0]["eval_prompts"]     # _prepare draws the same ones for every RM (seed cfg.seed + 5)
    q_runs: dict[tuple, np.ndarray] = {}
    out = []
    for prep, pol_rm, u in zip(preps, pol_rms, use):
        for k, f in enumerate(fams):
            if (u[f], f) not in q_runs:
                q_runs[(u[f], f)] = _quality_one(pol_runs[u[f]], runs[u[f]][f], eval_prompts[f], cfg.seed + k)
        res = _finish(prep, pol_rm, None, cfg, 0.0, q_rub={f: q_runs[(u[f], f)] for f in fams})
        res["stand_in_run"] = {f: u[f] for f in fams}
        out.append(res)
    return out
