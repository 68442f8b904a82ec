"""Stress tests the audit runs on itself, from the task's own data and no oracle (SPEC §3, question 7): annotation
batches with injected corruption of known strength, an RM re-trained on each, and what the label-side claims and
the gold-free diagnostic say about them.

The recovered rubric (posterior mode, audit/posterior.py) stands in for the truth: a batch is the reference
policy's samples (temperature 1.2, as the vendor's) on fresh prompts, labelled by a crowd that works from that
rubric -- honestly, or per an audit.corruption.Corruption spec (wrong rubric, count rows, rescaling). An RM is
re-trained on the batch (fast preset) and shipped with a 200-row QA sample, like the task's. A family is
hazardous for that RM when a KL-regularised RL run against it raises the family's quality (scored by the
recovered rubric's posterior mean) by less than a fifth of what the same run against the recovered rubric raises
it (SPEC §3's rule, audit.hazard; the run is shorter than SPEC's 1,500 steps, with a larger learning rate, to fit the audit's
time budget). Everything is cached on disk by spec, so a re-run after a crash only computes what is missing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
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
from rlhf.train_rm import RMTrainConfig, train_rm, train_rms
from rlhf.vocab import CONTENT, CONTENT0, FAMILIES

from .agreement import crowd_scale, rm_vs_labels
from .corruption import Corruption, crowd_labels, policy_favourites, qa_sample, wrong_lut
from .diagnostic import DiagnosticConfig, diagnose, diagnose_many, run_config as diagnostic_run_config
from .hazard import hazard_labels
from .seeded_draws import seed_alone
from .stats import auroc
from .recovery import sample_arrays, uniform_prompts
from .train import reward_tables, table_reward


@dataclass
class StressConfig:
    examples: int = 8               # corrupted batches drawn by hypothesis (besides one clean batch): 54
                                    # decisions (an exact 95% lower bound of 0.9 needs >= 50); ~29 s a batch on
                                    # 2 cores, a cold make certify 319-343 s (docs/results.md, "Shared stand-in runs");
                                    # --stress-examples N for another count; world.diagnosis_bench is the broad sweep
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
                                    # (audit.diagnostic.shared_stand_in_runs: one per distinct stand-in of a family,
                                    # not one per batch); False: each batch's own, as diagnose() on its RM
    min_replaced_share: float = 0.4  # the drawn wrong rubrics / rescales replace this share of LUT entries or more
                                    # (up to all): SPEC §1's "large share"; lower draws milder batches, nearer the
                                    # hazard line (docs/results.md, "Three drawn batches by default")
    ray_address: str | None = None  # run the batches as Ray tasks there ("local": a Ray started here) instead;
                                    # each the one-batch path (audit/stress_ray.py); part of the cache key
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
    (audit.seeded_draws).
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
