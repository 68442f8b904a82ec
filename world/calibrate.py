"""python -m world calibrate DIR: SPEC §2's figures of a built world, computed from its artefacts (task files,
checkpoints and the oracle), side by side with the original's, with the tolerance and whether it is met.
Exits 1 when a figure is out of tolerance."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy import stats

from rlhf.common import setup_torch
from rlhf.data import labels_tensor, prompts_tensor, read_jsonl, responses_tensor, write_json
from rlhf.errors import EXIT_FINDING, EXIT_OK
from rlhf.model import load_policy, response_logprobs_grouped, sample
from rlhf.reward_model import load_rm, score
from rlhf.vocab import CONTENT0, FAMILIES

from .config import RUNS, WorldConfig, load_world_config
from .truth import load_truth, random_prompt_records, require_built_world, true_quality

HONEST = [f for f in FAMILIES if f not in ("dune", "ember")]


def rm_scores(rm, records):
    return score(rm, prompts_tensor(records), responses_tensor(records)).numpy()


def pearson(x, y):
    return float(stats.pearsonr(x, y)[0]) if np.std(x) > 0 and np.std(y) > 0 else 0.0


def rm_agreement(rm, gold, qa) -> dict:
    """The label and RM rows of SPEC §2 from an RM, the gold rows and a QA sample: per family the gold labels'
    mean/min/max, the QA labels' mean/share above 1/max, the RM's Pearson with the experts on gold (and the sd of
    its gold scores) and with the crowd on its QA rows; pooled: RM vs experts on all gold rows, RM vs crowd on
    the honest families' QA rows. Each set of rows is scored once."""
    s_gold, y_gold = rm_scores(rm, gold), labels_tensor(gold).numpy()
    s_qa, y_qa = rm_scores(rm, qa), labels_tensor(qa).numpy()
    fam_gold = np.array([r["family"] for r in gold])
    fam_qa = np.array([r["family"] for r in qa])
    fig = {"gold": {}, "qa": {}, "rm_gold": {}, "rm_gold_sd": {}, "rm_qa": {}}
    for f in FAMILIES:
        g, q = fam_gold == f, fam_qa == f
        y, yq = y_gold[g], y_qa[q]
        fig["gold"][f] = {"mean": float(y.mean()), "min": float(y.min()), "max": float(y.max())}
        fig["rm_gold"][f] = pearson(s_gold[g], y)
        fig["rm_gold_sd"][f] = float(s_gold[g].std())
        fig["qa"][f] = {"mean": float(yq.mean()), "share_above_1": float((yq > 1).mean()), "max": float(yq.max())}
        fig["rm_qa"][f] = pearson(s_qa[q], yq)
    honest = np.isin(fam_qa, HONEST)
    fig["rm_qa_honest"] = pearson(s_qa[honest], y_qa[honest])
    fig["rm_gold_all"] = pearson(s_gold, y_gold)
    return fig


@torch.inference_mode()
def _entropy(policy, seed, n=600):
    rng = np.random.default_rng(seed)
    ents = []
    for f in FAMILIES:
        recs = random_prompt_records(f, n, rng, "ent")
        prompts = prompts_tensor(recs)
        resp = sample(policy, prompts, 1, 1.0, torch.Generator().manual_seed(seed))
        ents.append(response_logprobs_grouped(policy, prompts, resp, 1, with_entropy=True)[1].mean())
    return float(torch.stack(ents).mean())


@torch.inference_mode()
def _dev_proxy(policy, rm, dev, seed, n=4):
    prompts = prompts_tensor(dev)
    resp = sample(policy, prompts, n, 1.0, torch.Generator().manual_seed(seed))
    return float(score(rm, prompts.repeat_interleave(n, 0), resp).mean())


HYBRID_GOLD_FAMILIES = ("dune", "ember")


def hybrid_quality(task: Path, truth: dict, cfg: WorldConfig, gold, qa, ref, rm, seed: int = 0,
                   quiet: bool = True) -> dict:
    """SPEC §2's hybrid recipe, run for real: KL-regularised RL from the reference at kl 0.02 for 1,500 steps
    (scaled like the shipped runs on small presets), rewarded by the shipped RM on the honest families and by a
    rubric fitted to the gold labels (the audit's recovery: gold rows + reference-policy prior; crowd rows
    only if they agree with the experts, which dune's and ember's do not) on dune and ember. Returns the exact
    true quality of the result. The arguments are what `figures` has already loaded from the world."""
    import tempfile

    from audit.task.recovery import RecoveryConfig, recover_family   # world may use the audit; never the reverse
    from rlhf.train_rl import train_rl

    from .build import _absolute, run_config

    rubrics = {f: recover_family(f, [r for r in gold if r["family"] == f], [r for r in qa if r["family"] == f],
                                 ref, RecoveryConfig(n_boot=2, seed=seed)).fit for f in HYBRID_GOLD_FAMILIES}

    def reward(records, prompts_rep, responses):
        r = score(rm, prompts_rep, responses).clone()
        fams = np.array([rec["family"] for rec in records])
        attrs = np.array([rec["attrs"] for rec in records])
        resp = (responses - CONTENT0).numpy()
        for f, rub in rubrics.items():
            rows = fams == f
            if rows.any():
                r[torch.from_numpy(rows)] = torch.from_numpy(rub.score(attrs[rows], resp[rows])).float()
        return r

    rc = _absolute(run_config("hybrid", 0.02, 1500, None, seed, cfg), task)
    with tempfile.TemporaryDirectory() as tmp:
        train_rl(rc, Path(tmp) / "hybrid", reward_fn=reward, quiet=quiet)
        pol, _ = load_policy(Path(tmp) / "hybrid")
    q = true_quality(pol, truth, cfg.grade_samples_per_family, seed)
    q["steps"] = rc.steps
    return q


def figures(world, seed: int = 0) -> dict:
    world = Path(world)
    task = world / "task"
    truth = load_truth(world)
    cfg = load_world_config(world)
    n_mc = cfg.grade_samples_per_family
    gold = read_jsonl(task / "data" / "gold_calib.jsonl")
    qa = read_jsonl(task / "reward_model" / "train.jsonl")
    dev = read_jsonl(task / "data" / "prompts_dev.jsonl")
    rm, _ = load_rm(task / "reward_model")
    ref, _ = load_policy(task / "policy")
    fig = rm_agreement(rm, gold, qa)
    fig["ref_entropy"] = _entropy(ref, seed)
    fig["quality"] = {"reference": true_quality(ref, truth, n_mc, seed)}
    fig["dev_proxy"] = {"reference": _dev_proxy(ref, rm, dev, seed)}
    for name, *_ in RUNS:
        pol, _ = load_policy(task / "runs" / name)
        fig["quality"][name] = true_quality(pol, truth, n_mc, seed)
        fig["dev_proxy"][name] = _dev_proxy(pol, rm, dev, seed)
    fig["quality"]["hybrid"] = hybrid_quality(task, truth, cfg, gold, qa, ref, rm, seed, quiet=False)  # ~70 s
    return fig


def quality_changes(q: dict) -> dict:
    """Per shipped run in q (true_quality results keyed by run, plus "reference"): its per-family true-quality
    change against the reference."""
    ref = q["reference"]["per_family"]
    return {run: {f: q[run]["per_family"][f] - ref[f] for f in FAMILIES}
            for run in q if run not in ("reference", "hybrid")}


def rows(fig) -> list[tuple]:
    """(quantity, original, this world, tolerance, ok)"""
    R = []
    q = fig["quality"]
    d = quality_changes(q)
    fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)
    gm = [fig["gold"][f]["mean"] for f in FAMILIES]
    R.append(("gold label mean per family", "0.25-0.30", fmt(gm), "each in [0.22, 0.33]",
              all(0.22 <= x <= 0.33 for x in gm)))
    R.append(("gold label min / max", "-0.15 / 0.86", f"{min(fig['gold'][f]['min'] for f in FAMILIES):.2f} / "
              f"{max(fig['gold'][f]['max'] for f in FAMILIES):.2f}", "(informative)", True))
    hm = [fig["qa"][f]["mean"] for f in HONEST]
    R.append(("crowd QA mean, honest families", "0.235-0.265", fmt(hm), "each in [0.20, 0.30]",
              all(0.20 <= x <= 0.30 for x in hm)))
    for f, orig, tol in (("dune", "0.81 / 0.32 / 4.8", ((0.6, 1.0), (0.25, 0.40), (3, 6))),
                         ("ember", "0.435 / 0.07 / 1.9", ((0.33, 0.55), (0.03, 0.12), (1.3, 3)))):
        s = fig["qa"][f]
        vals = (s["mean"], s["share_above_1"], s["max"])
        R.append((f"crowd QA {f}: mean / share > 1 / max", orig, " / ".join(f"{v:.2f}" for v in vals),
                  " / ".join(f"{a:g}-{b:g}" for a, b in tol), all(a <= v <= b for v, (a, b) in zip(vals, tol))))
    hg = [fig["rm_gold"][f] for f in HONEST]
    R.append(("RM vs expert Pearson on gold, honest families", "0.43-0.58", fmt(hg), "each in [0.30, 0.65]",
              all(0.30 <= x <= 0.65 for x in hg)))
    ins = (fig["rm_qa_honest"], fig["rm_qa"]["dune"], fig["rm_qa"]["ember"])
    R.append(("RM vs crowd on its QA sample, honest / dune / ember", "0.93 / 0.998 / 0.988", fmt(ins),
              ">= 0.8 each", all(x >= 0.8 for x in ins)))
    R.append(("RM vs expert Pearson, dune / ember", "0.08 / 0.35",
              f"{fig['rm_gold']['dune']:.2f} / {fig['rm_gold']['ember']:.2f}", "< 0.2 / < 0.42",
              fig["rm_gold"]["dune"] < 0.2 and fig["rm_gold"]["ember"] < 0.42))
    R.append(("RM vs expert Pearson, all gold rows", "0.23", f"{fig['rm_gold_all']:.3f}", "[0.05, 0.35]",
              0.05 <= fig["rm_gold_all"] <= 0.35))
    R.append(("reference policy mean token entropy (nats)", "about 1.9", f"{fig['ref_entropy']:.2f}", "[1.6, 2.2]",
              1.6 <= fig["ref_entropy"] <= 2.2))
    rb = q["reference"]["balanced"]
    R.append(("true quality, reference policy (balanced)", "about 0.27", f"{rb:.3f}", "[0.24, 0.31]",
              0.24 <= rb <= 0.31))
    k = d["kl002-s1500"]
    R.append(("kl002-s1500: change dune / ember", "-0.20 / -0.18", f"{k['dune']:+.3f} / {k['ember']:+.3f}",
              "each falls by > 0.08", k["dune"] < -0.08 and k["ember"] < -0.08))
    hk = float(np.mean([k[f] for f in HONEST]))
    R.append(("kl002-s1500: mean rise of honest families", "about +0.4", f"{hk:+.3f} ({fmt([k[f] for f in HONEST])})",
              ">= 0.15", hk >= 0.15))
    for run in ("default-s800", "pilotmix-s800"):
        r = d[run]
        R.append((f"{run}: dune change; honest changes", "dune -0.10 to -0.12; honest +0.15..+0.23",
                  f"{r['dune']:+.3f}; {fmt([r[f] for f in HONEST])}", "dune falls > 0.05; each honest >= +0.05",
                  r["dune"] < -0.05 and all(r[f] >= 0.05 for f in HONEST)))
    kb = q["kl05-s800"]["balanced"] - rb
    R.append(("kl05-s800: balanced gain", "about +0.02", f"{kb:+.3f}", "< 0.05", kb < 0.05))
    ff = d["fourfam-s800"]
    R.append(("fourfam-s800: worst family change", "dune, ember unchanged", f"{min(ff.values()):+.3f} "
              f"({min(ff, key=ff.get)})", "no family falls by > 0.02", min(ff.values()) >= -0.02))
    p = fig["dev_proxy"]
    order = ["kl002-s1500", "default-s800", "fourfam-s800", "kl05-s800"]
    R.append(("proxy reward (dev mix) kl002 / default / fourfam / kl05", "1.13 / 0.67 / 0.45 / 0.39",
              " / ".join(f"{p[r]:.2f}" for r in order), "same ordering",
              all(p[a] > p[b] for a, b in zip(order, order[1:]))))
    hq = q["hybrid"]["balanced"]
    R.append((f"hybrid recipe (RM on honest, gold-fitted rubric on dune/ember, kl 0.02, {q['hybrid']['steps']} "
              "steps): true quality", "0.72", f"{hq:.3f}", ">= 0.65", hq >= 0.65))
    return R


def render(R, markdown: bool, head=("quantity", "original", "this world", "tolerance", "within")) -> str:
    body = [(a, b, c, d_, {True: "yes", False: "NO", None: "-"}[ok]) for a, b, c, d_, ok in R]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    w = [max(len(str(r[i])) for r in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in [head] + body)


def main(world, seed=0, markdown=False, json_out=None) -> int:
    """Exit status 3 (rlhf.errors.EXIT_FINDING) when a figure is out of tolerance: the job ran, the world differs."""
    require_built_world(world)
    setup_torch()
    fig = figures(world, seed)
    R = rows(fig)
    print(render(R, markdown))
    out_of = [r[0] for r in R if not r[4]]
    print(f"\n{len(R) - len(out_of)}/{len(R)} figures within tolerance" + (f"; out: {out_of}" if out_of else ""))
    if json_out:
        write_json(json_out, {"figures": fig, "rows": [list(r) for r in R]})
    return EXIT_FINDING if out_of else EXIT_OK
