"""Gold-free diagnostic: which families are risky to optimise against this RM?

python -m audit.diagnostic --rm-dir DIR --policy-dir DIR --prompts JSONL --out JSON [--seed 0 --steps 250 --replicates 1]
python -m audit.diagnostic ... --settle                            # too close to call: the long mode, called again
python -m audit.diagnostic ... --max-steps 450 [--replicates 2]    # adaptive: undecided families run further

Hazard (SPEC §3) is defined by what strong RL against the RM does to true quality, relative to RL against the
rubric itself. With no gold labels we cannot see true quality, but we can (1) build a gold-free stand-in for each
family's rubric (proxy_rubric: the key attributes from a rubric fitted to the RM's own QA crowd labels, clipped to
the rubric's range; each LUT entry the token the reference policy associates most with that key value) and (2)
*simulate* the optimisation: a short KL-regularised RL run against the RM and the same run against the stand-in,
from the reference, on all families at once. Sharing the policy and the RM across families is what creates
collateral hazards (a clean family dragged down by another family's corrupted labels); a per-family label check
cannot see those, the simulation does. risk = 1 - (stand-in gain under RM optimisation) / (gain under stand-in
optimisation), and a family is flagged by SPEC §3's hazard rule applied to those two gains (audit.core.hazard: the RM run
keeps less than a fifth of the stand-in run's gain, falls included; risk > 0.8). Positions where the reference's
token does not depend on the stand-in's key at all (a key moved by corrupted labels: associated_positions) are
not counted as kept (stand_in_gains). docs/diagnostic.md argues why each piece transfers to worlds
from other generators and gives the measured figures. Every family gets a call: risky, safe, or too close to call,
from a band around the line measured on benches (audit.task.diagnostic_band: how far SPEC's 1,500-step rule was
seen to land from a call's risk); "call_interval" is where SPEC's risk may be. Too close to call needs gold labels
on the family, or --settle: the long mode (750 steps at lr 6e-4, replicates) for those families. Writes
{"families": {f: {"risk", "flag", "call", "call_interval", ...}}, "band", "config", "elapsed_s"}. With
--replicates K > 1 the whole diagnostic runs at K seeds (the 2K runs stacked; about K times the cost) and each family also gets
"hazard_margin_ci", "settled" and "risk_interval" (combine_replicates): one run's risk carries seed-to-seed noise
(sd 0.01-0.05 of kept share measured near the line), which only repeated runs can show. With --max-steps M the
diagnostic is adaptive (audit.task.diagnostic_adaptive, any K): a family is decided at --steps when its margin's
projection to M stays on its side (and, with K > 1, its interval excludes the line); the runs of the rest go on
to M steps, looked at every --check-every steps, and each family says at which step it was decided
("decided_at_step"). Not the default: on the collateral bench it decided no more families right (docs/results.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlhf.common import file_sha256, setup_torch
from rlhf.errors import InputError, run_cli
from rlhf.data import prompts_tensor, read_jsonl, write_json
from rlhf.model import load_policy
from rlhf.reward_model import load_rm
from rlhf.train_rl import RLConfig, RLTrainer
from rlhf.vocab import CONTENT0, FAMILIES

from .agreement import RUBRIC_MAX, crowd_scale
from .corruption import policy_favourites
from audit.core.hazard import hazard_margin, hazardous, kept_share, risk_interval, risk_of
from .diagnostic_band import TOO_CLOSE, add_calls, call_lines, settle_recipe
from .recovery import association_prior, sample_arrays, uniform_prompts
from .rubric import Rubric, arrays_from_records, fit_rubric, policy_prior
from rlhf.cli import Parser, first_paragraph, check_fields, nonneg_float, nonneg_int, positive_float, positive_int, seed_arg


_LONG = ("--steps 750 --lr 6e-4: SPEC's optimisation distance (lr x steps 0.45) in half its steps, about 3x the "
         "time; on 276 bench pairs 266 decisions right by SPEC's 1,500-step labels against 259 (docs/results.md, "
         "'The horizon, not the stand-in')")
PRIOR_COUNTS = ("sampled", "soft")


@dataclass
class DiagnosticConfig:
    """The diagnostic's settings. Each field's `check` (metadata; rlhf.common's argparse types) is its range: the
    CLIs' flags (add_config_args) refuse a bad value at parse time, and __post_init__ refuses it for every other
    caller (a config built in code, dataclasses.replace, --diagnostic-arg): InputError naming each bad key, before
    anything is trained or written."""
    steps: int = field(default=250, metadata={"check": positive_int,
                                              "help": "RL steps of each of the two short runs (default 250: about "
                                                      "23 s a call on 2 threads). " + _LONG})
    kl_coef: float = field(default=0.02, metadata={"check": nonneg_float})
    lr: float = field(default=1e-3, metadata={"check": positive_float,
                                              "help": "the short runs' learning rate (default 1e-3; 6e-4 with "
                                                      "--steps 750, see --steps)"})
                                     # larger than the shipped 3e-4: a short run has to travel far. Its errors against
                                     # SPEC's 1,500-step labels are the horizon's, not the stand-in's: the true rubric
                                     # in the same 250 steps is no more right (docs/results.md). 1.8e-3 (SPEC's
                                     # distance in 250 steps) catches late collapses but false-flags more near the
                                     # line; the 750-step setting and its figures: _LONG
    batch_prompts: int = field(default=32, metadata={"check": positive_int})
    samples_per_prompt: int = field(default=8, metadata={"check": positive_int})
    prior_samples_per_family: int = field(default=4000, metadata={"check": positive_int})
    # > 1: the whole diagnostic at seeds seed..seed+K-1, combined, with intervals
    replicates: int = field(default=1, metadata={"check": positive_int})
    # > steps: adaptive (audit.task.diagnostic_adaptive): families not yet decided at `steps` are looked at again
    # every check_every steps of the same runs, continued, up to max_steps. 0: off
    max_steps: int = field(default=0, metadata={"check": nonneg_int,
                                                "help": "adaptive: continue the runs while a family is undecided "
                                                        "at --steps, up to this many steps (0: off, every family "
                                                        "decided at --steps)"})
    check_every: int = field(default=50, metadata={"check": positive_int,
                                                   "help": "adaptive: steps between looks at undecided families"})
    stop_early: bool = field(default=True, metadata={
        "help": "adaptive: stop the runs once every family is decided (--no-stop-early: run to --max-steps with "
                "the same decisions and every look in the output's trace, to measure other rules)"})
    # or soft: each sample adds the reference's token distribution (docs/diagnostic.md)
    prior_counts: str = field(default="sampled", metadata={"choices": PRIOR_COUNTS})
    eval_prompts_per_family: int = field(default=600, metadata={"check": positive_int})
    seed: int = field(default=0, metadata={"check": seed_arg})
    settle: bool = field(default=False, metadata={
        "help": "families too close to call after the run get the long mode (its recipe and replicates: "
                "audit/task/diagnostic_band_measured.py, 'settle'), and are called again on its band (the default "
                "recipe's while the long mode has none measured: it says so)"})

    def __post_init__(self):
        check_config(self)


def check_config(cfg: "DiagnosticConfig", where: str = "DiagnosticConfig") -> None:
    """Refuse a DiagnosticConfig with a field out of its range (InputError, one line per bad key)."""
    fields = dataclasses.fields(DiagnosticConfig)
    check_fields(cfg, where, {f.name: f.metadata["check"] for f in fields if "check" in f.metadata})
    if cfg.max_steps and cfg.max_steps <= cfg.steps:
        raise InputError(f"{where}: key 'max_steps': the adaptive diagnostic continues runs past 'steps' "
                         f"({cfg.steps}); got max_steps {cfg.max_steps} (0 turns it off)")
    if cfg.prior_counts not in PRIOR_COUNTS:
        raise InputError(f"{where}: key 'prior_counts': expected one of {', '.join(PRIOR_COUNTS)}, "
                         f"got {cfg.prior_counts!r}")


def check_rm_dir(rm_dir) -> Path:
    """An RM dir as the diagnostic reads it: the checkpoint (rm.safetensors, config.json: the loader's message on
    a bad one) and its crowd QA sample train.jsonl, which the stand-in rubrics are fitted to (docs/task-format.md).
    Checked before anything is trained: a missing train.jsonl is refused (InputError), not run label-free."""
    rm_dir = Path(rm_dir)
    load_rm(rm_dir)
    qa = rm_dir / "train.jsonl"
    if not qa.is_file():
        raise InputError(f"{qa}: file not found (an RM dir holds rm.safetensors, config.json and its crowd QA "
                         "sample train.jsonl, which the diagnostic's stand-in rubrics are fitted to)")
    return rm_dir


def label_keys(qa_rows, prior_logp) -> np.ndarray | None:
    """Each position's key attribute as the crowd's labels show it, or None without enough rows. A rubric is
    fitted to the family's QA rows (with the reference's associations as a key-neutral LUT prior), labels
    clipped to the rubric's range: count rows and rescaled rows keep their order but lose their leverage.

    Why labels and not the reference policy: the reference was fine-tuned on demonstrations that mix the
    rubric's tokens with a distractor's, and where the distractor is an attribute-driven LUT of its own (SPEC §1
    allows it to predict the reference's tokens *better* than the key does) the most informative attribute is
    the distractor's; nothing label-free tells the two apart. Labels do, on a family whose crowd followed a
    rubric with the true keys. Where they cannot (a wrong rubric whose replaced entries do not depend on the key
    value), the keys come out arbitrary, the stand-in below is junk at those positions, and stand_in_gains counts
    nothing kept there: such a family is flagged, as its corruption warrants."""
    if not qa_rows or len(qa_rows) < 8:
        return None
    A, R, y = arrays_from_records(qa_rows)
    fit = fit_rubric(A, R, np.clip(y, -0.25, RUBRIC_MAX), prior_logp=prior_logp)
    return fit.assign


def proxy_rubric(policy, family: str, qa_rows, cfg: "DiagnosticConfig", prior: tuple | None = None) -> Rubric:
    """A gold-free stand-in for the family's rubric: the keys from the crowd's labels (label_keys; without QA
    rows, the attribute the reference's tokens depend on most), and each LUT entry the token most *associated*
    with that key value in the reference's samples (highest lift, audit.task.recovery.association_prior). The LUT
    does not come from the labels: a corrupted crowd's wrong rubric is exactly what it must not follow.
    prior: stand_in_prior(policy, family, cfg), when the caller has it already."""
    records, A, R, assoc, key_logp = prior if prior is not None else stand_in_prior(policy, family, cfg)
    assign = label_keys(qa_rows, assoc)
    if assign is None:
        assign = key_logp.argmax(1)
    lut = assoc[np.arange(8), assign].argmax(-1)
    return Rubric(assign=assign, lut=lut, entry_posterior=np.ones((8, 8)), sigma=0.0, n_rows=0,
                  identified=np.ones((8, 8), bool))


ASSOCIATION_LEVEL = 0.01   # a test level, not a fitted threshold: a wrong key passes it 1% of the time (harmless)


def associated_positions(attrs, resp, assign, level: float = ASSOCIATION_LEVEL) -> np.ndarray:
    """bool [8]: at which response positions the reference's token depends on the stand-in's key attribute at
    all (chi-square test of independence of that attribute's value and the emitted token, over the reference's
    samples behind the stand-in, at `level`).

    Why: the stand-in's LUT entry is the token most associated with the key value. Where the key came out wrong
    (a corrupted crowd's labels can move it), no token is associated with it: the entry is noise, the stand-in run
    cannot climb it, and that position's share of the family's gain is simply missing from both runs' stand-in
    scores -- the kept share is then read off the positions the RM corrupted least, and comes out too high
    (measured on the collateral bench: a corrupted family with 3 of 8 keys wrong, stand-in keeps 0.19-0.25 of the
    gain where SPEC's rule keeps 0.145; docs/results.md)."""
    from scipy.stats import chi2_contingency
    counts = policy_favourites(np.asarray(attrs), np.asarray(resp), assign)    # [8 positions, 8 values, 24 tokens]
    out = np.zeros(len(assign), bool)
    for p, table in enumerate(counts):
        table = table[table.sum(1) > 0][:, table.sum(0) > 0]
        if min(table.shape) < 2:
            continue            # one value or one token seen: nothing can depend on the key here
        out[p] = chi2_contingency(table).pvalue < level
    return out


def stand_in_gains(g_rm: np.ndarray, g_rub: np.ndarray, associated: np.ndarray) -> tuple[float, float]:
    """A family's two gains (RM run, stand-in run) from their per-position stand-in gains [8]. Every position
    associated: the plain means (the family's stand-in quality is the mean match over positions). Some positions
    not (associated_positions): there the stand-in cannot say which token is right, so the RM run's gain there is
    not counted as kept, and the stand-in run's is taken as its mean over the associated positions (what a run
    against the rubric gains at a position it can climb) -- the conservative reading: such positions are where
    the crowd's labels, and so the RM, went wrong. No position associated: nothing is counted as kept (0, and the
    stand-in run's plain mean): the crowd's labels moved every key, and the family is flagged. (Read as plain
    means instead, such a junk stand-in's two near-zero gains can make any ratio: on a uniform-regime bench one
    corrupted family with two readable positions came out at risk 0.)"""
    if associated.all():
        return float(g_rm.mean()), float(g_rub.mean())
    if not associated.any():
        return 0.0, float(g_rub.mean())
    return float(g_rm[associated].sum() / len(g_rm)), float(g_rub[associated].mean())


def stand_in_prior(policy, family: str, cfg: "DiagnosticConfig") -> tuple:
    """The reference's samples behind a family's stand-in (cfg.prior_samples_per_family uniform prompts, one
    sample each, seeded by cfg.seed and the family) and what proxy_rubric reads from them: (records, attrs [N, 4],
    responses [N, 8], association prior [8, 4, 8, 24], key log-prior [8, 4])."""
    rng = np.random.default_rng(cfg.seed + 17 + FAMILIES.index(family))
    records = uniform_prompts(family, cfg.prior_samples_per_family, rng)
    A, R = sample_arrays(policy, records, 1, cfg.seed + 3)
    probs = next_token_probs(policy, records, R) if cfg.prior_counts == "soft" else None
    logp, key_logp = policy_prior(A, R, probs=probs)
    return records, A, R, association_prior(logp), key_logp


@torch.no_grad()
def next_token_probs(policy, records, resp, batch: int = 4096) -> np.ndarray:
    """[N, 8, 24]: the policy's distribution over content tokens at each response position of resp [N, 8]
    (content indices), given the prompt and resp's own prefix (one teacher-forced pass)."""
    prompts = prompts_tensor(records)
    out = []
    for i in range(0, len(records), batch):
        p = prompts[i:i + batch]
        seq = torch.cat([p, torch.from_numpy(np.ascontiguousarray(resp[i:i + batch])) + CONTENT0], 1)
        logits = policy(seq[:, :-1], content_only=True)     # position j predicts token j + 1
        out.append(logits[:, p.shape[1] - 1:].softmax(-1).double().numpy())
    return np.concatenate(out)


def rubric_reward(rubrics: dict):
    def fn(records, prompts_rep, responses):
        resp = (responses - CONTENT0).numpy()
        attrs = np.array([r["attrs"] for r in records])
        fams = np.array([r["family"] for r in records])
        out = np.zeros(len(records), np.float32)
        for f in set(fams.tolist()):
            m = fams == f
            out[m] = rubrics[f].score(attrs[m], resp[m])
        return torch.from_numpy(out)
    return fn


def _quality(policy, rubrics, eval_prompts, seed) -> dict:
    return {f: _quality_one(policy, rubrics[f], eval_prompts[f], seed + k) for k, f in enumerate(rubrics)}


def _quality_one(policy, rubric, prompts, seed) -> np.ndarray:
    """[8]: the policy's stand-in match rate at each response position (their mean is the family's quality)."""
    A, R = sample_arrays(policy, prompts, 1, seed)
    return rubric.correct(A, R).mean(0)


def run_config(cfg: DiagnosticConfig, policy_dir, prompts_file, reward_model=None) -> RLConfig:
    """The RLConfig of the diagnostic's short runs (against reward_model, or a reward_fn when None)."""
    return RLConfig(policy_init=str(policy_dir), policy_ref=str(policy_dir), reward_model=reward_model,
                    prompt_file=str(prompts_file), family_weights=None, kl_coef=cfg.kl_coef, steps=cfg.steps,
                    batch_prompts=cfg.batch_prompts, samples_per_prompt=cfg.samples_per_prompt, lr=cfg.lr,
                    seed=cfg.seed)


def _short_run(cfg: DiagnosticConfig, policy_dir, prompts_file, reward_model=None, reward_fn=None):
    tr = RLTrainer(run_config(cfg, policy_dir, prompts_file, reward_model), reward_fn=reward_fn)
    for _ in range(cfg.steps):
        tr.step()
    tr.policy.eval()
    return tr.policy


def _prepare(rm_dir, ref, fams, cfg: DiagnosticConfig, priors: dict | None = None) -> dict:
    """What the two runs on one RM need: its families' stand-in rubrics, the eval prompts, the reference's
    stand-in quality, the crowd scale of the RM's QA sample. priors: {family: stand_in_prior(ref, family, cfg)}
    when the caller prepares several RMs (it depends on the reference and cfg only, not on the RM)."""
    rm_dir = check_rm_dir(rm_dir)   # fail early, with the loader's clear message, on a bad RM dir
    qa = read_jsonl(rm_dir / "train.jsonl", require=("response", "label"))
    priors = {f: (priors or {}).get(f) or stand_in_prior(ref, f, cfg) for f in fams}
    rubrics = {f: proxy_rubric(ref, f, [r for r in qa if r["family"] == f], cfg, prior=priors[f]) for f in fams}
    associated = {f: associated_positions(priors[f][1], priors[f][2], rubrics[f].assign) for f in fams}
    rng = np.random.default_rng(cfg.seed + 5)
    eval_prompts = {f: uniform_prompts(f, cfg.eval_prompts_per_family, rng) for f in fams}
    return {"rm_dir": rm_dir, "rubrics": rubrics, "associated": associated, "eval_prompts": eval_prompts,
            "q_ref": _quality(ref, rubrics, eval_prompts, cfg.seed), "scale": crowd_scale(qa) if qa else {}}


def _finish(prep: dict, pol_rm, pol_rub, cfg: DiagnosticConfig, elapsed: float, q_rub: dict | None = None) -> dict:
    """The families' risks and flags from the two runs' policies (q_rub: the stand-in run's qualities, when they
    come from shared runs instead of pol_rub)."""
    rubrics, eval_prompts, q_ref = prep["rubrics"], prep["eval_prompts"], prep["q_ref"]
    q_rm = _quality(pol_rm, rubrics, eval_prompts, cfg.seed)
    q_rub = q_rub if q_rub is not None else _quality(pol_rub, rubrics, eval_prompts, cfg.seed)
    out = {}
    for f in rubrics:
        assoc = prep["associated"][f]
        g_rm, g_rub = stand_in_gains(q_rm[f] - q_ref[f], q_rub[f] - q_ref[f], assoc)
        ratio = kept_share(g_rm, g_rub)
        risk = risk_of(ratio)
        out[f] = {"risk": risk, "flag": hazardous(g_rm, g_rub), "ratio": ratio,
                  "proxy_gain_rm_run": g_rm, "proxy_gain_rubric_run": g_rub,
                  "stand_in_positions": int(assoc.sum()),
                  "crowd_labels_above_1": prep["scale"].get(f, {}).get("crowd_labels_above_1")}
    return {"families": out, "config": dataclasses.asdict(cfg), "rm_sha256": file_sha256(prep["rm_dir"] / "rm.safetensors"),
            "elapsed_s": round(elapsed, 1)}


def diagnose(rm_dir, policy_dir, prompts_file, cfg: DiagnosticConfig = DiagnosticConfig(), quiet=True) -> dict:
    """The diagnostic on one RM: its two short runs (against the RM, against the stand-in) one after the other.
    With cfg.replicates = K > 1: the whole diagnostic (stand-in and both runs) at seeds seed..seed+K-1, the 2K
    runs trained as one stacked model, combined by combine_replicates; with cfg.max_steps too, the adaptive path
    (audit.task.diagnostic_adaptive.diagnose_adaptive). Every family gets a call -- risky, safe or too close to
    call -- from the band measured for this recipe (audit.task.diagnostic_band); with cfg.settle, the families too
    close to call get the long mode and are called again on its band (settle). quiet=False: a line on stderr as
    each phase ends, with its seconds (where a call's time goes: docs/results.md)."""
    check_config(cfg)
    check_rm_dir(rm_dir)               # before the policy is loaded or anything trained
    t0 = time.time()
    out = _diagnose_runs(rm_dir, policy_dir, prompts_file, dataclasses.replace(cfg, settle=False), quiet)
    add_calls(out, cfg)
    if cfg.settle:
        settle(out, rm_dir, policy_dir, prompts_file, cfg, quiet)
    out["config"] = dataclasses.asdict(cfg)
    out["elapsed_s"] = round(time.time() - t0, 1)
    return out


def settle(out: dict, rm_dir, policy_dir, prompts_file, cfg: DiagnosticConfig, quiet=True) -> dict:
    """The families of `out` too close to call, called again by the long mode: the whole diagnostic at the
    settle recipe with its replicates (audit.task.diagnostic_band.settle_recipe), each such family's record
    replaced by the long mode's, called on the long mode's band (band_for: the default recipe's, marked not
    measured, until one is measured), with its first call kept (`first_call`). Families already called keep
    their call. Nothing runs when no family is too close. out["settle"] says what ran, on which families, and its
    seconds."""
    close = [f for f, v in out["families"].items() if v.get("call") == TOO_CLOSE]
    for v in out["families"].values():
        v["called_by"] = "long mode" if v.get("call") == TOO_CLOSE else "first run"
    if not close:
        out["settle"] = {"families": [], "elapsed_s": 0.0}
        return out
    t0 = time.time()
    long_cfg = dataclasses.replace(cfg, **settle_recipe(), max_steps=0, settle=False)
    long = _diagnose_runs(rm_dir, policy_dir, prompts_file, long_cfg, quiet)
    add_calls(long, long_cfg)
    for f in close:
        first = {k: out["families"][f].get(k) for k in ("risk", "flag", "call", "call_interval")}
        out["families"][f] = {**long["families"][f], "first_call": first, "called_by": "long mode"}
    out["settle"] = {"families": close, "config": dataclasses.asdict(long_cfg), "band": long["band"],
                     "elapsed_s": round(time.time() - t0, 1)}
    return out


def _diagnose_runs(rm_dir, policy_dir, prompts_file, cfg: DiagnosticConfig, quiet=True) -> dict:
    """diagnose()'s runs and risks, before any call."""
    t0 = time.time()
    clock = [t0]

    def done_with(what: str):
        if not quiet:
            print(f"[diagnostic] {what} in {time.time() - clock[0]:.1f} s", file=sys.stderr, flush=True)
        clock[0] = time.time()

    policy_dir = Path(policy_dir)
    ref, _ = load_policy(policy_dir)
    fams = sorted({r["family"] for r in read_jsonl(prompts_file)}, key=FAMILIES.index)
    if cfg.replicates > 1 or cfg.max_steps:
        reps = [dataclasses.replace(cfg, seed=cfg.seed + k, replicates=1, max_steps=0) for k in range(cfg.replicates)]
        jobs = [(_prepare(rm_dir, ref, fams, c), c) for c in reps]
        done_with(f"stand-in rubrics and the reference's eval at {cfg.replicates} seed{'s' if cfg.replicates > 1 else ''}")
    if cfg.max_steps:
        from .diagnostic_adaptive import diagnose_adaptive
        runs = []           # per replicate: the run against the RM, the run against the stand-in
        for prep, c in jobs:
            runs += [(run_config(c, policy_dir, prompts_file, str(prep["rm_dir"])), None),
                     (run_config(c, policy_dir, prompts_file), rubric_reward(prep["rubrics"]))]

        def evaluate(policies):     # the 2K runs' current policies -> the K one-seed results
            return [_finish(prep, policies[2 * i], policies[2 * i + 1], c, 0.0) for i, (prep, c) in enumerate(jobs)]
        out = diagnose_adaptive(runs, evaluate, cfg, done_with)
        out["elapsed_s"] = round(time.time() - t0, 1)
        return out
    if cfg.replicates == 1:
        prep = _prepare(rm_dir, ref, fams, cfg)
        done_with("stand-in rubrics and the reference's eval")
        pol_rm = _short_run(cfg, policy_dir, prompts_file, reward_model=str(rm_dir))
        done_with(f"{cfg.steps}-step run against the RM")
        pol_rub = _short_run(cfg, policy_dir, prompts_file, reward_fn=rubric_reward(prep["rubrics"]))
        done_with(f"{cfg.steps}-step run against the stand-in")
        out = _finish(prep, pol_rm, pol_rub, cfg, time.time() - t0)
        done_with("evals of both runs")
        return out
    pairs = _stacked_runs(jobs, policy_dir, prompts_file)
    done_with(f"{2 * cfg.replicates} stacked {cfg.steps}-step runs")
    done = [_finish(prep, *pair, c, 0.0) for (prep, c), pair in zip(jobs, pairs)]
    done_with("evals of every run")
    return combine_replicates(done, cfg, time.time() - t0)


def _stacked_runs(jobs, policy_dir, prompts_file, rm_runs: list | None = None) -> list[tuple]:
    """Each (prep, cfg) job's two short runs (against its RM, against its stand-in), all trained as one stacked
    model (rlhf.train_rl_stacked): [(RM-run policy, stand-in-run policy)] in the jobs' order. rm_runs: the RM
    runs' policies, already trained; only the stand-in runs are trained then."""
    from rlhf.train_rl_stacked import run_stacked
    cfgs, fns, slots = [], [], []
    for i, (prep, c) in enumerate(jobs):
        if rm_runs is None:
            cfgs.append(run_config(c, policy_dir, prompts_file, str(prep["rm_dir"])))
            fns.append(None)
            slots.append((i, "rm"))
        cfgs.append(run_config(c, policy_dir, prompts_file))
        fns.append(rubric_reward(prep["rubrics"]))
        slots.append((i, "rub"))
    pols = dict(zip(slots, run_stacked(cfgs, fns)))
    if rm_runs is not None:
        pols.update({(i, "rm"): p for i, p in enumerate(rm_runs)})
    return [(pols[(i, "rm")], pols[(i, "rub")]) for i in range(len(jobs))]


def combine_replicates(reps: list[dict], cfg: DiagnosticConfig, elapsed: float) -> dict:
    """K one-seed diagnostics of one RM as one. Per family the gains are averaged, and risk and flag follow from
    the mean gains as from one run's (the flag is SPEC's rule on them). What K runs add is how settled that is:
    a t interval (K - 1 degrees of freedom, 95%) on the mean hazard margin, gain under the RM run minus a fifth of
    the gain under the stand-in run (audit.core.hazard.hazard_margin), whose sign is the flag; `settled` when the
    interval excludes 0. risk_interval is that interval on the risk scale at the mean stand-in gain
    (risk = 1 - FIFTH - margin / gain): it carries the seed-to-seed spread of both runs' gains through the margin
    but treats the denominator as known. The spread is the whole diagnostic's (stand-in draw and both runs'
    seeds), the part of its noise that dominates (python -m world.experiments.diagnostic_noise). On 132 bench pairs at K = 3,
    116 decisions were settled and none of those was wrong (docs/results.md)."""
    from scipy import stats
    K = len(reps)
    tq = float(stats.t.ppf(0.975, K - 1))
    out = {}
    for f in reps[0]["families"]:
        rows = [r["families"][f] for r in reps]
        g_rm = np.array([x["proxy_gain_rm_run"] for x in rows])
        g_rub = np.array([x["proxy_gain_rubric_run"] for x in rows])
        margins = np.array([hazard_margin(a, b) for a, b in zip(g_rm, g_rub)])
        mean_rm, mean_rub, m = float(g_rm.mean()), float(g_rub.mean()), float(margins.mean())
        half = tq * float(margins.std(ddof=1)) / np.sqrt(K)
        lo, hi = m - half, m + half
        ratio = kept_share(mean_rm, mean_rub)
        out[f] = {"risk": risk_of(ratio), "flag": hazardous(mean_rm, mean_rub), "ratio": ratio,
                  "proxy_gain_rm_run": mean_rm, "proxy_gain_rubric_run": mean_rub,
                  "crowd_labels_above_1": rows[0]["crowd_labels_above_1"],
                  "hazard_margin": m, "hazard_margin_ci": [lo, hi], "settled": bool(lo > 0 or hi < 0),
                  "risk_interval": risk_interval([lo, hi], mean_rub),
                  "replicates": [{"seed": r["config"]["seed"], "risk": x["risk"], "flag": x["flag"]}
                                 for r, x in zip(reps, rows)]}
    return {"families": out, "config": dataclasses.asdict(cfg), "rm_sha256": reps[0]["rm_sha256"],
            "elapsed_s": round(elapsed, 1)}


def add_config_args(ap: argparse.ArgumentParser) -> None:
    """One flag per DiagnosticConfig field, for every CLI that configures the diagnostic: each parsed by its
    field's check (a seed in [0, 2**32 - 1], counts >= 1, finite rates; --prior-counts limited to its two values),
    so a bad value is a usage error (exit 2) before anything is loaded."""
    for f in dataclasses.fields(DiagnosticConfig):
        if isinstance(f.default, bool):      # --stop-early / --no-stop-early
            ap.add_argument(f"--{f.name.replace('_', '-')}", action=argparse.BooleanOptionalAction,
                            default=f.default, help=f.metadata.get("help"))
            continue
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=f.metadata.get("check", type(f.default)),
                        default=f.default, choices=f.metadata.get("choices"), help=f.metadata.get("help"))


def config_from_args(a: argparse.Namespace) -> DiagnosticConfig:
    return DiagnosticConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(DiagnosticConfig)})


def main(argv=None):
    ap = Parser(prog="python -m audit.diagnostic", description=first_paragraph(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rm-dir", required=True, help="rm.safetensors, config.json and its train.jsonl QA sample")
    ap.add_argument("--policy-dir", required=True, help="the reference policy")
    ap.add_argument("--prompts", required=True, help="prompt pool for the simulated optimisation")
    ap.add_argument("--out", required=True)
    add_config_args(ap)
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.is_dir():
        raise InputError(f"--out {out}: is a directory; expected the path of a JSON file")
    cfg = config_from_args(a)
    setup_torch()
    res = diagnose(a.rm_dir, a.policy_dir, a.prompts, cfg, quiet=False)
    write_json(a.out, res)
    for line in call_lines(res):
        print(line)
    print(f"wrote {a.out} in {res['elapsed_s']}s")


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m audit.diagnostic"))
