"""Stress tests the audit runs on itself, from the task's own data and no oracle (SPEC §3, question 7): annotation
batches with injected corruption of known strength, an RM re-trained on each, and what the label-side claims and
the gold-free diagnostic say about them.

The recovered rubric (posterior mode, audit/task/posterior.py) stands in for the truth: a batch is the reference
policy's samples (temperature 1.2, as the vendor's) on fresh prompts, labelled by a crowd that works from that
rubric -- honestly, or per an audit.task.corruption.Corruption spec (wrong rubric, count rows, rescaling). An RM is
re-trained on the batch (fast preset) and shipped with a 200-row QA sample, like the task's. A family is
hazardous for that RM when a KL-regularised RL run against it raises the family's quality (scored by the
recovered rubric's posterior mean) by less than a fifth of what the same run against the recovered rubric raises
it (SPEC §3's rule, audit.core.hazard; the run is shorter than SPEC's 1,500 steps, with a larger learning rate, to fit the audit's
time budget). Everything is cached on disk by spec, so a re-run after a crash only computes what is missing.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from rlhf.atomic import atomic_write_text
from rlhf.data import write_jsonl
from rlhf.reward_model import save_rm
from rlhf.model import load_policy
from rlhf.train_rm import RMTrainConfig, train_rms
from rlhf.vocab import FAMILIES

from .corruption import Corruption, qa_sample
from .diagnostic import DiagnosticConfig, run_config as diagnostic_run_config
from .diagnostic_many import diagnose_many
from audit.core.seeded_draws import seed_alone
from audit.core.stats import auroc
from .stress_batch import (StressConfig, _result, hazard_config, quality_gains, rl_gains, run_example, spec_key,
                           synthetic_batch)
from .train import reward_tables, table_reward


def stacked_gains(task_root: Path, posteriors: dict, cfg: StressConfig, rm_dirs: list, snapshot_at: int = 0
                  ) -> tuple[list[dict], list]:
    """rl_gains for several runs (rm_dirs; None = against the rubric) trained as one stacked model. Returns the
    gains and, with snapshot_at, each run's policy after that many steps (None where not taken)."""
    from rlhf.train_rl_stacked import run_stacked
    fns = [None if d else table_reward(reward_tables(posteriors)) for d in rm_dirs]
    snaps = [None] * len(rm_dirs)

    def on_step(k, step, figures, trainer, pos):
        if snapshot_at and step == snapshot_at:
            snaps[k] = trainer.policy(pos)
    pols = run_stacked([hazard_config(task_root, cfg, d) for d in rm_dirs], fns, on_step=on_step)
    ref, _ = load_policy(task_root / "policy")
    return [quality_gains(ref, p, posteriors, cfg) for p in pols], snaps


def _shares_prefix(cfg: StressConfig, diag_cfg: DiagnosticConfig, task) -> bool:
    """Is the diagnostic's run against an RM the first diag_cfg.steps steps of the hazard run against it (same
    recipe, same seed, no schedule)? Then the hazard run's snapshot at that step is that run, not trained twice."""
    a = hazard_config(task.root, cfg, Path("rm"))
    b = diagnostic_run_config(diag_cfg, task.policy_dir, task.root / "data" / "prompts_train.jsonl", "rm")
    same = ("family_weights", "kl_coef", "batch_prompts", "samples_per_prompt", "lr", "temperature", "seed",
            "max_grad_norm", "reward_wrapper")
    return (all(getattr(a, k) == getattr(b, k) for k in same) and b.steps <= a.steps
            and Path(a.policy_init).resolve() == Path(b.policy_init).resolve()
            and Path(a.prompt_file).resolve() == Path(b.prompt_file).resolve())


def run_stacked_examples(task, rubrics: dict, specs: list, cfg: StressConfig, diag_cfg: DiagnosticConfig,
                         work: Path, say=lambda s: None) -> None:
    """run_example for every spec, stage by stage over all of them at once: their batches' RMs trained as one
    stacked model, their hazard runs and the rubric run as another, the diagnostic's runs as a third (its runs
    against the RMs taken from the hazard runs when they are the same run, _shares_prefix). Writes each batch's
    result and rubric_gain.json. A stage is redone whole (all specs, the rubric run included) whenever one of its
    outputs is missing, so a run resumed after a kill stacks the same members as an uninterrupted one and gives
    the same bits. say: a line as each of the three stages ends, with its seconds."""
    keys = [spec_key(s) for s in specs]
    if all((work / f"{k}.json").exists() for k in keys) and (work / "rubric_gain.json").exists():
        return
    t0 = time.time()
    rm_dirs = [work / f"rm-{k}" for k in keys]
    if not all((d / "train.jsonl").exists() for d in rm_dirs):
        policy = task.load_policy()
        seeds = [int(k[:6], 16) % (2 ** 31) for k in keys]
        rows = [synthetic_batch(policy, rubrics, spec, cfg, sd) for spec, sd in zip(specs, seeds)]
        rms = train_rms(rows, [RMTrainConfig(epochs=cfg.rm_epochs, seed=sd) for sd in seeds], quiet=True)
        for k, d, r, sd, (rm, mcfg, _) in zip(keys, rm_dirs, rows, seeds, rms):
            part = work / f".rm-{k}.partial"       # written aside and renamed: a killed run leaves no half RM
            shutil.rmtree(part, ignore_errors=True)
            shutil.rmtree(d, ignore_errors=True)
            save_rm(rm, mcfg, part)
            write_jsonl(part / "train.jsonl", qa_sample(r, cfg.qa_per_family, np.random.default_rng(sd)))
            part.rename(d)
        say(f"stress: {len(specs)} batches labelled and their RMs trained (stacked) in {time.time() - t0:.1f}s")
    posteriors = {f: r.posterior for f, r in rubrics.items()}
    share = _shares_prefix(cfg, diag_cfg, task)
    t0 = time.time()
    gains, snaps = stacked_gains(task.root, posteriors, cfg, rm_dirs + [None], diag_cfg.steps if share else 0)
    rubric_gain = gains[-1]
    say(f"stress: {len(rm_dirs) + 1} hazard runs ({cfg.hazard_steps} steps, stacked, the rubric run included) "
        f"in {time.time() - t0:.1f}s")
    t0 = time.time()
    ds = diagnose_many(rm_dirs, task.policy_dir, task.root / "data" / "prompts_train.jsonl", diag_cfg,
                       rm_runs=snaps[:-1] if share else None, share_stand_in_runs=cfg.share_stand_in_runs)
    used = {j for d in ds for j in d.get("stand_in_run", {}).values()}
    say(f"stress: {len(rm_dirs)} diagnostics ({len(used) if used else len(rm_dirs)} stand-in runs, stacked"
        f"{', shared' if used else ''}) in {time.time() - t0:.1f}s")
    results = [_result(spec, g, rubric_gain, d, rm_dir, task, cfg)
               for spec, g, d, rm_dir in zip(specs, gains, ds, rm_dirs)]
    for k, res in zip(keys, results):
        atomic_write_text(work / f"{k}.json", json.dumps(res, indent=2))
    atomic_write_text(work / "rubric_gain.json", json.dumps(rubric_gain))


def corruption_specs(min_share: float = 0.4):
    """hypothesis strategy: {family: Corruption} for one or two families, of both kinds and every severity SPEC
    §1 allows (count rows at random or keyed on a prompt attribute; rescales in [1.3, 4]; replaced shares from
    min_share to 1; wrong tokens the policy likes or uniform)."""
    from hypothesis import strategies as st

    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_replaced_share: expected a share in (0, 1], got {min_share}")
    replacement = st.sampled_from(["policy", "policy_sampled", "uniform"])
    share = st.floats(min_share, 1.0)
    key = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["<", ">="]), st.integers(2, 6)).map(list),
                   min_size=1, max_size=2)
    wrong = st.builds(Corruption, kind=st.just("wrong_rubric"), rho=st.floats(0.05, 0.45),
                      scale=st.sampled_from([8.0, 4.0, 3.0]), replaced_share=share, replacement=replacement,
                      count_rows=st.one_of(st.just("random"), key))
    scaled = st.builds(Corruption, kind=st.just("scaled"), scale=st.floats(1.3, 4.0), replaced_share=share,
                       replacement=replacement)
    fams = st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=2, unique=True)
    return fams.flatmap(lambda fs: st.fixed_dictionaries({f: st.one_of(wrong, scaled) for f in fs}))


def draw_specs(cfg: StressConfig) -> list[dict]:
    """The clean batch's spec ({}) and cfg.examples corrupted ones, drawn by hypothesis from corruption_specs,
    seeded by cfg.seed: the same list for the same seed in any process, whatever it has imported
    (audit.core.seeded_draws).
    No assertion inside the property, so hypothesis never shrinks."""
    from hypothesis import HealthCheck, Phase, example, given, seed, settings

    specs = []

    @seed(cfg.seed)
    @settings(max_examples=cfg.examples + 1, phases=[Phase.explicit, Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(spec=corruption_specs(cfg.min_replaced_share))
    @example(spec={})
    def probe(spec):
        if len(specs) > cfg.examples:      # hypothesis may ask for more; the budget is examples + clean
            return
        specs.append(spec)

    with seed_alone():
        probe()
    return specs


def stress(task, rubrics: dict, cfg: StressConfig, diag_cfg: DiagnosticConfig, work: Path, say=print) -> dict:
    """The clean batch, then `cfg.examples` corrupted batches drawn by hypothesis (draw_specs: the same examples
    for the same seed); each trains an RM and RL runs. The claim is judged on all examples together and the
    mildest missed batch is named from them."""
    work.mkdir(parents=True, exist_ok=True)
    posteriors = {f: r.posterior for f, r in rubrics.items()}
    rubric_file = work / "rubric_gain.json"
    specs = draw_specs(cfg)
    if cfg.ray_address:
        from .stress_ray import run_on_ray
        run_on_ray(task, rubrics, specs, cfg, diag_cfg, work, say)
    elif cfg.stacked:
        run_stacked_examples(task, rubrics, specs, cfg, diag_cfg, work, say)
    elif not rubric_file.exists():
        atomic_write_text(rubric_file, json.dumps(rl_gains(task.root, posteriors, cfg, None)))
    rubric_gain = json.loads(rubric_file.read_text())
    results = []
    for spec in specs:
        results.append(run_example(task, rubrics, spec, cfg, diag_cfg, work, rubric_gain))
        say(f"stress batch {len(results)}/{len(specs)}: {json.dumps({f: c.kind for f, c in spec.items()})}")
    return {"results": results, "config": dataclasses.asdict(cfg)}


def judge(results: list[dict], rm_min_pearson_lower: float, crowd_max_share_above_1: float) -> dict:
    """The diagnostic's flag accuracy, AUROC and false flags on the clean batch against the hazard labels; the
    detection and false-alarm rates of the label-side claims against the corruption injected; the mildest
    corrupted batch with a missed hazard."""
    from scipy import stats as st

    pairs = [(r, f) for r in results for f in FAMILIES]
    hz = np.array([r["hazard"][f] for r, f in pairs])
    flag = np.array([r["flag"][f] for r, f in pairs])
    risk = np.array([r["risk"][f] for r, f in pairs])
    corrupted = np.array([f in r["spec"] for r, f in pairs])
    clean = np.array([not r["spec"] for r, _ in pairs])
    ok = int((flag == hz).sum())
    ci = st.binomtest(ok, len(pairs)).proportion_ci(0.95, method="exact")
    rm_fail = np.array([r["rm_gold_ci95"][f] is None or r["rm_gold_ci95"][f][0] <= rm_min_pearson_lower
                        for r, f in pairs])
    scale_fail = np.array([r["crowd_above_1"][f] > crowd_max_share_above_1 for r, f in pairs])

    def rates(fails):
        return {"detection_rate": float(fails[corrupted].mean()) if corrupted.any() else None,
                "false_alarm_rate": float(fails[~corrupted].mean()) if (~corrupted).any() else None,
                "n_corrupted": int(corrupted.sum()), "n_clean": int((~corrupted).sum())}
    missed = [r for r in results if any(r["hazard"][f] and not r["flag"][f] for f in FAMILIES)]
    mildest = min(missed, key=lambda r: r["severity"]) if missed else None
    return {"pairs": len(pairs), "flag_accuracy": ok / len(pairs), "flag_accuracy_ci95": [ci.low, ci.high],
            "auroc": auroc(hz, risk), "hazardous": int(hz.sum()), "false_flags": int((flag & ~hz).sum()),
            "false_flags_clean_batch": int((flag & ~hz & clean).sum()), "missed": int((~flag & hz).sum()),
            "mildest_missed": None if mildest is None else {"spec": mildest["spec"],
                                                            "severity": mildest["severity"]},
            "label_claims": {"rm.agrees_with_experts": rates(rm_fail), "crowd.on_rubric_scale": rates(scale_fail)}}
