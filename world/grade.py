"""python -m world grade --world DIR --submission DIR: judge a certification output against the oracle
(SPEC §3 "Hidden evaluation"): progress, decision, reporting, diagnosis. Prints a table, writes grade.json.
Missing parts of a submission are reported as missing, not as crashes."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from audit.core.stats import auroc
from rlhf.common import setup_torch
from rlhf.data import write_json
from rlhf.errors import InputError
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from .config import RUNS, Corruption, load_world_config
from .crowd import draw_crowd_batch, retrain_rm
from .hazard import _worker, hazard_labels, strong_recipe
from .truth import load_truth, require_built_world, true_quality


def exact_rule(delta: dict, min_gain=0.05, margin=-0.03) -> bool:
    """The release rule applied to exact true qualities: no sampling error, so the CI bounds are the values."""
    bal = float(np.mean([delta[f] for f in FAMILIES]))
    return bal >= min_gain and bal > 0 and all(delta[f] > margin for f in FAMILIES)


def diagnosis_batches(seed: int, n: int) -> list[dict]:
    """n annotation batches with corruption drawn from the grade seed: one clean, the rest 1-2 corrupted
    families each, both kinds, severities from mild to strong."""
    rng = np.random.default_rng(seed)
    out = [{}]
    for i in range(1, n):
        fams = rng.choice(FAMILIES, size=int(rng.integers(1, 3)), replace=False)
        spec = {}
        for f in fams:
            if rng.random() < 0.5:
                spec[str(f)] = Corruption("scaled", scale=float(rng.uniform(1.3, 4.0)),
                                          replaced_share=float(rng.uniform(0.4, 0.9)),
                                          replacement=str(rng.choice(["policy", "uniform"])))
            else:
                spec[str(f)] = Corruption("wrong_rubric", rho=float(rng.uniform(0.05, 0.4)), scale=8.0,
                                          replaced_share=float(rng.uniform(0.4, 0.95)),
                                          replacement=str(rng.choice(["policy", "uniform"])), count_rows="random")
        out.append(spec)
    return out


def grade_diagnosis(world: Path, seed: int, mode: str, cache: Path) -> dict:
    n_batches, steps, n_eval = (7, 1500, 3000) if mode == "full" else (3, 60, 400)
    bp, spp = (32, 8) if mode == "full" else (8, 4)
    task = world / "task"
    recipe = strong_recipe(task, steps, bp, spp)
    batches = diagnosis_batches(seed, n_batches)
    rm_dirs = []
    for i, spec in enumerate(batches):
        d = cache / f"rm-seed{seed}-{mode}-{i}"
        if not (d / "rm.safetensors").exists():
            print(f"[grade] batch {i}: {({f: c.kind for f, c in spec.items()}) or 'clean'}: drawing and training RM",
                  flush=True)
            batch = draw_crowd_batch(world, spec, seed=seed * 1000 + i,
                                     n_per_family=None if mode == "full" else 300)
            retrain_rm(batch, d, fast=True, seed=i, qa_per_family=200 if mode == "full" else 50)
            (d / "batch.json").write_text(json.dumps({"corruption": batch["corruption"], "stats": batch["stats"]}))
        rm_dirs.append(str(d))
    jobs = [(str(world), None, dataclasses.asdict(recipe), n_eval, str(cache))]
    jobs += [(str(world), d, dataclasses.asdict(recipe), n_eval, str(cache)) for d in rm_dirs]
    print(f"[grade] hazard labels: {len(jobs)} RL runs ({steps} steps; cached)", flush=True)
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as ex:
        gains = list(ex.map(_worker, jobs))
    rubric, per_rm = gains[0], gains[1:]
    labels, risks, flags, rows = [], [], [], []
    for i, (d, g) in enumerate(zip(rm_dirs, per_rm)):
        hz = hazard_labels(g["gain"], rubric["gain"])
        out = Path(d) / "diagnostic.json"
        t = time.time()
        r = subprocess.run([sys.executable, "-m", "audit.diagnostic", "--rm-dir", d, "--policy-dir",
                            str(task / "policy"), "--prompts", str(task / "data" / "prompts_train.jsonl"),
                            "--out", str(out), "--seed", str(seed)], capture_output=True, text=True)
        secs = time.time() - t
        diag = json.loads(out.read_text())["families"] if r.returncode == 0 and out.exists() else None
        for f in FAMILIES:
            row = {"batch": i, "family": f, "hazard": hz[f], "rm_gain": g["gain"][f],
                   "rubric_gain": rubric["gain"][f], "diagnostic_s": round(secs, 1)}
            if diag is not None and f in diag:
                row.update(risk=float(diag[f]["risk"]), flag=bool(diag[f]["flag"]))
                labels.append(hz[f]), risks.append(row["risk"]), flags.append(row["flag"])
            else:
                row["error"] = (r.stderr or "no output")[-300:]
            rows.append(row)
    return {"batches": [{f: dataclasses.asdict(c) for f, c in b.items()} for b in batches], "rows": rows,
            "auroc": auroc(labels, risks) if labels else None,
            "flag_accuracy": float(np.mean(np.array(flags) == np.array(labels))) if labels else None,
            "n_hazardous": int(sum(labels)), "n_pairs": len(labels), "rubric_gain": rubric["gain"]}


def _load_answer(sub: Path):
    p = sub / "answer.json"
    if not p.exists():
        return None, f"{p} missing"
    try:
        answer = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        return None, f"{p}: invalid JSON ({e.msg})"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{p}: cannot be read ({getattr(e, 'strerror', None) or e})"
    if not isinstance(answer, dict):
        return None, f"{p}: expected a JSON object, got a JSON {type(answer).__name__}"
    return answer, None


def _checkpoint_dir(sub: Path, answer) -> Path | None:
    """The shipped checkpoint: answer.json's checkpoint_dir (relative to the submission, where audit.certify
    writes it, else as given), then SUBMISSION/checkpoint, then the submission dir itself."""
    candidates = [sub / "checkpoint", sub]
    if answer and answer.get("checkpoint_dir"):
        given = Path(answer["checkpoint_dir"])
        candidates[:0] = [sub / given, given]
    return next((c for c in candidates if (c / "policy.safetensors").exists()), None)


def grade(world, submission, seed: int = 12345, diagnosis: str = "full") -> dict:
    setup_torch()
    world, sub = Path(world), Path(submission)
    truth = load_truth(world)
    n = load_world_config(world).grade_samples_per_family
    answer, answer_err = _load_answer(sub)
    G = {"world": str(world), "submission": str(sub), "seed": seed, "missing": []}
    if answer_err:
        G["missing"].append(answer_err)
    ref, _ = load_policy(world / "task" / "policy")
    q_ref = true_quality(ref, truth, n, seed)
    ck = _checkpoint_dir(sub, answer)
    prog = {"reference": q_ref["balanced"], "reference_per_family": q_ref["per_family"], "n_per_family": n}
    if ck is None:
        G["missing"].append("shipped checkpoint (checkpoint/policy.safetensors)")
    else:
        pol, _ = load_policy(ck)
        q = true_quality(pol, truth, n, seed)
        prog.update(shipped=q["balanced"], shipped_se=q["balanced_se"], shipped_per_family=q["per_family"],
                    checkpoint=str(ck))
    G["progress"] = prog
    # decision: the shipped checkpoint and the run verdicts
    dec = {}
    if "shipped" in prog:
        dec["shipped_truly_better"] = prog["shipped"] > prog["reference"]
    runs_truth = {}
    for name, *_ in RUNS:
        pol, _ = load_policy(world / "task" / "runs" / name)
        q = true_quality(pol, truth, n, seed)
        delta = {f: q["per_family"][f] - q_ref["per_family"][f] for f in FAMILIES}
        runs_truth[name] = {"true_quality": q["balanced"], "delta": delta, "passes": exact_rule(delta)}
    dec["runs"] = {}
    for name, t in runs_truth.items():
        claimed = (answer or {}).get("runs", {}).get(name, {})
        row = {"truth_passes": t["passes"], "true_quality": t["true_quality"]}
        if "passes_release_rule" in claimed:
            row["claimed_passes"] = bool(claimed["passes_release_rule"])
            row["verdict_right"] = row["claimed_passes"] == t["passes"]
        if claimed.get("estimated_true_quality") is not None:
            est = claimed["estimated_true_quality"]
            row["estimate"], row["abs_error"] = est, abs(est - t["true_quality"])
            ci = claimed.get("ci95")
            if ci and None not in ci:
                row["ci_covers"] = ci[0] <= t["true_quality"] <= ci[1]
        dec["runs"][name] = row
    judged = [r for r in dec["runs"].values() if "verdict_right" in r]
    dec["verdicts_right"] = f"{sum(r['verdict_right'] for r in judged)}/{len(judged)}" if judged else "missing"
    G["decision"] = dec
    # reporting
    rep = {}
    cert = (answer or {}).get("certification")
    if cert and "shipped" in prog and cert.get("estimated_true_quality") is not None:
        est = cert["estimated_true_quality"]
        rep["estimate"], rep["true"] = est, prog["shipped"]
        rep["abs_error"] = abs(est - prog["shipped"])
        ci = cert.get("ci95")
        rep["ci_covers"] = bool(ci and None not in ci and ci[0] <= prog["shipped"] <= ci[1])
        improved_truth = sorted(f for f in FAMILIES if prog["shipped_per_family"][f] > q_ref["per_family"][f])
        rep["families_improved_truth"] = improved_truth
        rep["families_improved_claimed"] = sorted(cert.get("families_improved", []))
        rep["families_improved_right"] = improved_truth == rep["families_improved_claimed"]
        rep["improved_claim_right"] = bool(cert.get("improved_over_reference")) == (prog["shipped"] > prog["reference"])
    else:
        G["missing"].append("certification estimate")
    G["reporting"] = rep
    if diagnosis != "skip":
        cache = world / "grade_cache"
        G["diagnosis"] = grade_diagnosis(world, seed, diagnosis, cache)
    return G


def table(G) -> str:
    L = []
    p = G["progress"]
    L.append(f"progress   reference true quality {p['reference']:.4f}" +
             (f"; shipped {p['shipped']:.4f} (se {p['shipped_se']:.4f})" if "shipped" in p else "; shipped: missing"))
    d = G["decision"]
    if "shipped_truly_better" in d:
        L.append(f"decision   shipped truly better than reference: {d['shipped_truly_better']}")
    L.append(f"decision   run verdicts right: {d['verdicts_right']}")
    for name, r in d["runs"].items():
        L.append(f"   {name:15s} true {r['true_quality']:.4f} passes(truth) {str(r['truth_passes']):5s} "
                 f"claimed {str(r.get('claimed_passes', '-')):5s} est {r.get('estimate', float('nan')):.4f} "
                 f"|err| {r.get('abs_error', float('nan')):.4f} covers {r.get('ci_covers', '-')}")
    r = G["reporting"]
    if r:
        L.append(f"reporting  estimate {r['estimate']:.4f} vs true {r['true']:.4f}: |err| {r['abs_error']:.4f}, "
                 f"CI covers {r['ci_covers']}, families_improved right {r['families_improved_right']}")
    if "diagnosis" in G:
        dg = G["diagnosis"]
        L.append(f"diagnosis  AUROC {dg['auroc']}  flag accuracy {dg['flag_accuracy']}  "
                 f"({dg['n_hazardous']} hazardous of {dg['n_pairs']})")
    if G["missing"]:
        L.append("missing    " + "; ".join(G["missing"]))
    return "\n".join(L)


def main(world, submission, seed=12345, diagnosis="full", out=None) -> int:
    require_built_world(world)
    if not Path(submission).is_dir():     # a missing *part* of a submission is graded as missing; no dir is a typo
        raise InputError(f"{submission}: not a directory (expected a certify output dir holding answer.json)")
    G = grade(world, submission, seed, diagnosis)
    print(table(G))
    write_json(out or Path(submission) / "grade.json", G)
    return 0
