"""The adaptive diagnostic: settle clear families in the short run, take the near-line ones further (issue 33).

One call of the fixed diagnostic decides every family at 250 steps, with no word on how sure each decision is.
Most families sit far from the hazard line and are decided there by any run; the errors sit near it, where a
single short run's noise and its horizon decide (docs/diagnostic.md). This path:

1. runs K replicates of the diagnostic (stand-in draw and both runs at seeds seed..seed+K-1, every run stacked as
   one model; K = 1 is one replicate) for cfg.steps steps, looking at them also cfg.check_every steps before;
2. decides a family there when its decision holds on two counts: (a) *noise*, with K >= 2: a 95% t interval on
   its mean hazard margin (gain under the RM run minus a fifth of the gain under the stand-in run, whose sign is
   the flag) excludes the line (`settled`); and (b) *horizon*: the margin, carried on along the straight line
   through the last two looks, is still on the same side at cfg.max_steps (`projected_margin`). (b) is what
   replicates cannot give: a short run can be sure of a family that SPEC's longer run collapses late. It sees a
   fall that has begun by the look; a sudden one it cannot foresee (measured: docs/results.md, "Collateral
   families near the line");
3. if any family is undecided, the same runs go on (a run continued is the longer run: the learning rate is
   constant) and the undecided families are looked at again every cfg.check_every steps, until they are decided
   or the runs reach cfg.max_steps, where what is left is decided by its margin there.

Each family's record says at which step it was decided (`decided_at_step`), with which interval and projection.
The runs stop as soon as every family is decided, so an RM whose families all sit far from the line and hold
their course costs the short runs only; the output keeps every look (`trace`).

The interval's variance is pooled over the RM's families (margins on the quality scale): with K = 2 a family's
own variance has one degree of freedom (t = 12.7), useless; pooled over six families it has six (t = 2.45).
It assumes the run-to-run noise of a margin is alike across one RM's families, so a family is settled only when,
besides, every one of its replicates falls on the same side of the line; the bench reports how often a settled
decision was wrong (world.experiments.diagnosis_bench, "settled flags").
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from audit.core.hazard import hazard_margin, hazardous, kept_share, risk_interval, risk_of


def pooled_intervals(reps: list[dict]) -> dict:
    """Per family of K one-seed results ({"families": {f: {proxy_gain_rm_run, proxy_gain_rubric_run}}}): the mean
    gains and the mean hazard margin; with K >= 2 also its 95% t interval with the variance pooled over the
    families (F (K - 1) degrees of freedom) and whether it is settled: the interval excludes 0 and every
    replicate's margin has the mean's sign. With K = 1: interval and settled are None (nothing to say)."""
    from scipy import stats
    fams = list(reps[0]["families"])
    K, F = len(reps), len(fams)
    g_rm = np.array([[r["families"][f]["proxy_gain_rm_run"] for f in fams] for r in reps])      # [K, F]
    g_rub = np.array([[r["families"][f]["proxy_gain_rubric_run"] for f in fams] for r in reps])
    margin = np.array([[hazard_margin(a, b) for a, b in zip(ra, rb)] for ra, rb in zip(g_rm, g_rub)])
    m = margin.mean(0)
    half = None
    if K > 1:
        df = F * (K - 1)
        s2 = float(((margin - m) ** 2).sum() / df)
        half = float(stats.t.ppf(0.975, df)) * np.sqrt(s2 / K)
    out = {}
    for j, f in enumerate(fams):
        ci, settled = None, None
        if half is not None:
            lo, hi = float(m[j] - half), float(m[j] + half)
            # and every replicate on one side: a family whose own runs disagree is not settled by its neighbours' calm
            one_side = bool((margin[:, j] > 0).all() or (margin[:, j] < 0).all())
            ci, settled = [lo, hi], bool((lo > 0 or hi < 0) and one_side)
        out[f] = {"proxy_gain_rm_run": float(g_rm[:, j].mean()), "proxy_gain_rubric_run": float(g_rub[:, j].mean()),
                  "hazard_margin": float(m[j]), "hazard_margin_ci": ci, "settled": settled,
                  "replicate_gains": [[float(a), float(b)] for a, b in zip(g_rm[:, j], g_rub[:, j])]}
    return out


def projected_margin(m_now: float, m_before: float, step: int, step_before: int, horizon: int) -> float:
    """The hazard margin at `horizon` steps if it went on as it moved between the last two looks (a straight
    line through them): where a family the run keeps now is headed by the horizon (a late collapse)."""
    return m_now + (m_now - m_before) * (horizon - step) / (step - step_before)


def family_record(r: dict, step: int, crowd_labels_above_1) -> dict:
    """A family's final record from its pooled_intervals entry at the step that decided it."""
    g_rm, g_rub = r["proxy_gain_rm_run"], r["proxy_gain_rubric_run"]
    ratio = kept_share(g_rm, g_rub)
    return {"risk": risk_of(ratio), "flag": hazardous(g_rm, g_rub), "ratio": ratio, "proxy_gain_rm_run": g_rm,
            "proxy_gain_rubric_run": g_rub, "crowd_labels_above_1": crowd_labels_above_1,
            "hazard_margin": r["hazard_margin"], "hazard_margin_ci": r["hazard_margin_ci"], "settled": r["settled"],
            "risk_interval": risk_interval(r["hazard_margin_ci"], g_rub), "decided_at_step": step, "projected_margin": r.get("projected_margin"),
            "replicate_gains": r["replicate_gains"]}


def checkpoints(cfg) -> list[int]:
    """The steps at which the runs are looked at: one look cfg.check_every before cfg.steps (where the first
    trend starts; none when that is step 0, where every margin is 0), cfg.steps, then every cfg.check_every up
    to cfg.max_steps (always the last)."""
    pre = cfg.steps - cfg.check_every
    pts = ([pre] if pre > 0 else []) + list(range(cfg.steps, cfg.max_steps, cfg.check_every)) + [cfg.max_steps]
    return sorted(set(pts))


def diagnose_adaptive(runs: list, evaluate, cfg, done_with=lambda s: None) -> dict:
    """The adaptive diagnostic on one RM (module docstring). runs: per replicate, (RLConfig, reward_fn) of the run
    against the RM and of the run against the stand-in (audit.task.diagnostic.diagnose builds them); evaluate:
    the 2K runs' current policies -> the K one-seed results (diagnostic._finish). cfg: the DiagnosticConfig, with
    max_steps > steps. cfg.stop_early False: the runs go to max_steps whatever was decided (the same decisions;
    every look in the trace, to measure other rules)."""
    from rlhf.train_rl_stacked import StackedRLTrainer
    t0 = time.time()
    cfgs = [dataclasses.replace(c, steps=cfg.max_steps) for c, _ in runs]
    fns = [fn for _, fn in runs]
    trainer = StackedRLTrainer(cfgs, fns)
    decided, trace, before = {}, [], (0, None)      # (step, margins) of the previous look; step 0: every margin 0
    for point in checkpoints(cfg):
        while trainer.steps_done < point:
            trainer.step()
        done = evaluate([trainer.policy(k) for k in range(len(cfgs))])
        pooled = pooled_intervals(done)
        margins = {f: r["hazard_margin"] for f, r in pooled.items()}
        newly = []
        if point >= cfg.steps:
            last = point == cfg.max_steps
            for f, r in pooled.items():
                prev = 0.0 if before[1] is None else before[1][f]
                r["projected_margin"] = projected_margin(r["hazard_margin"], prev, point, before[0], cfg.max_steps)
                holds = r["hazard_margin"] * r["projected_margin"] > 0      # still on this side at the horizon
                sure = r["settled"] is not False                            # K = 1: no interval to ask
                if f not in decided and ((holds and sure) or last):
                    decided[f] = family_record(r, point, done[0]["families"][f]["crowd_labels_above_1"])
                    newly.append(f)
        trace.append({"step": point, "decided": newly, "families": pooled})
        before = (point, margins)
        done_with(f"{point} steps: {len(decided)} of {len(pooled)} families decided")
        if len(decided) == len(pooled) and cfg.stop_early:
            break
    out = {f: decided[f] for f in pooled}
    return {"families": out, "config": dataclasses.asdict(cfg), "rm_sha256": done[0]["rm_sha256"],
            "steps_run": trainer.steps_done, "trace": trace, "elapsed_s": round(time.time() - t0, 1)}
