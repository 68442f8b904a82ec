"""Render a samples audit's evidence into answer.json, summary.md and figures/*.png (SPEC §3's shape where it
applies; SPEC §4). Reads evidence only, like audit.render, and shares its helpers (claims, jinja2 environment,
atomic writes): templates/samples_answer.json.j2, templates/samples_answer.schema.json (validated before
anything is written), templates/samples_summary.md.j2.

Precision: estimates, interval bounds, correlations, ratios and rates in answer.json and summary.md are rounded to
4 decimals (the schema says so); evidence.json keeps the full values.
"""
from __future__ import annotations

import os
from pathlib import Path


from rlhf.atomic import atomic_write_text

from audit.core.evidence import inputs_fingerprint, load_evidence, to_jsonable
from audit.core import report
from audit.core.report import (MEASURED_DECIMALS, STAGING, TEMPLATES, AnswerSchemaError, Claims, _env, _is_ci, _is_num,
                               _oneline, _save, by_role, measured)

SCHEMA_PATH = TEMPLATES / "samples_answer.schema.json"
FIGURE_NAMES = ("estimates.png", "proxy_vs_gold.png")

RUN = "run.passes_release_rule"
SHIPPED = "shipped.improves_over_reference"
AGREE = "proxy.agrees_with_gold"
SCALE = "proxy.on_common_scale"
DESIGN = "gold.random_subset"
STRESS = "proxy.corruption_detection"
# the console and summary.md tell the audit's own health apart from its findings (audit/core/claims_runner)
ROLES = {SHIPPED: "decision", DESIGN: "health", STRESS: "health"}

FAMILY_KEYS = ("estimate", "ci95", "ci95_gold_only", "reference", "delta", "delta_ci95", "delta_ci95_gold_only",
               "proxy_mean", "n_samples", "n_gold", "lam", "widened")


def _run_entry(d: dict, status: str | None, message: str) -> dict:
    reasons = list(d.get("reasons") or [])
    passes = status == "pass" and d.get("passes_release_rule") is True
    if status == "error":
        reasons.append(f"check errored: {_oneline(message) or 'no message'}")
    per = {f: {k: (p or {}).get(k) for k in FAMILY_KEYS} for f, p in (d.get("per_family") or {}).items()}
    return {"passes_release_rule": passes, "is_reference": bool(d.get("is_reference")),
            "estimated_true_quality": d.get("estimated_true_quality"), "ci95": d.get("ci95"),
            "ci95_gold_only": d.get("ci95_gold_only"), "delta": d.get("delta"), "delta_ci95": d.get("delta_ci95"),
            "delta_ci95_gold_only": d.get("delta_ci95_gold_only"), "proxy_mean": d.get("proxy_mean"),
            "per_family": per, "reasons": reasons}


def _certification(claim: dict | None, reference: str | None) -> dict:
    blank = {"run": None, "improved_over_reference": False, "estimated_true_quality": None, "ci95": None,
             "ci95_gold_only": None, "reference_run": reference, "reference_true_quality": None, "reference_ci95": None, "delta": None,
             "delta_ci95": None, "families_improved": [], "families_not_improved": [], "per_family": {}}
    if claim is None:
        return {**blank, "basis": f"NOT CERTIFIED: no evidence (claim {SHIPPED} was not recorded)."}
    c = claim["details"].get("certification") or {}
    out = {**blank, **{k: c.get(k, blank[k]) for k in blank if k != "reference_run"}}
    if claim["status"] != "pass":
        out["improved_over_reference"] = False
        out["basis"] = f"NOT CERTIFIED: {_oneline(c.get('basis') or claim['message']) or 'no message'}"
        if c.get("run"):
            out["basis"] += f" ({_oneline(claim['message'])})"
    else:
        out["basis"] = c.get("basis") or "passed"
    return out


def _reward_model(claims: Claims) -> dict:
    out = {}
    for c in claims.named(AGREE):
        f, d = c["param"], c["details"]
        s = claims.by_id.get(f"{SCALE}[{f}]")
        why = []
        if c["status"] != "pass":
            why.append("agreement: " + _oneline(c["message"]))
        if s is not None and s["status"] == "fail":     # an error (no family to compare with) flags nothing
            why.append("scale: " + _oneline(s["message"]))
        out[f] = {"rm_gold_pearson": d.get("rm_gold_pearson"), "ci95": d.get("ci95"), "spearman": d.get("spearman"),
                  "spearman_ci95": d.get("spearman_ci95"), "n": d.get("n"),
                  "per_run_pearson": d.get("per_run_pearson") or {},
                  "scale_ratio": None if s is None else s["details"].get("ratio"),
                  "scale_ratio_ci95": None if s is None else s["details"].get("ci95"),
                  "flag": bool(why), "flag_reasons": why}
    return out


def build_answer(doc: dict) -> dict:
    claims = Claims(doc)
    run_claims = claims.named(RUN)
    reference = next((c["details"].get("reference_run") for c in run_claims
                      if c["details"].get("reference_run")), None)
    runs = {}
    if run_claims and reference is not None:
        ref = next(c["details"]["reference"] for c in run_claims if c["details"].get("reference"))
        runs[reference] = _run_entry({**ref, "passes_release_rule": False}, "fail", "")
    for c in run_claims:
        runs[c["param"]] = _run_entry(c["details"], c["status"], c["message"])
    rule = next((c["thresholds"] for c in run_claims), {})
    design = claims.named(DESIGN)
    stress = claims.one(STRESS)
    statuses = [c["status"] for c in claims.all()]
    meta = doc.get("meta") or {}
    table = meta.get("table") or {}
    answer = {
        "inputs": {"samples": Path(meta.get("samples") or "").name or None,
                   "gold": Path(meta.get("gold") or "").name or None,
                   "fingerprint": inputs_fingerprint(meta.get("input_hashes")), "seed": meta.get("seed"),
                   "superseded_rows": table.get("superseded_rows")},
        "missing_proxy": table.get("missing_proxy"),
        "generation": table.get("generation"),
        "reference_run": reference,
        "certification": _certification(claims.one(SHIPPED), reference),
        "runs": runs,
        "reward_model": _reward_model(claims),
        "gold_budget": {c["param"]: {k: (c["details"].get("gold_budget") or {}).get(k)
                                     for k in ("n_gold", "labels_to_halve", "line")} for c in claims.named(AGREE)},
        "design": {"cells_tested": len(design),
                   "not_random": [c["param"] for c in design if c["status"] != "pass"]},
        "intervals": next((c["details"].get("intervals") for c in run_claims if c["details"].get("intervals")), None),
        "release_rule": {"text": rule.get("text"), "min_balanced_gain": rule.get("min_balanced_gain"),
                         "balanced_ci_lower_gt": rule.get("balanced_ci_lower_gt"),
                         "family_ci_lower_gt": rule.get("family_ci_lower_gt"), "confidence": rule.get("confidence")},
        "corruption_stress": None if stress is None else {
            **{k: stress["details"].get(k) for k in ("examples", "kinds", "claims", "table")},
            "check_status": stress["status"],
            "check_message": _oneline(stress["message"]) if stress["status"] != "pass" else None},
        "precision": f"estimates, interval bounds, correlations, ratios and rates rounded to {MEASURED_DECIMALS} decimals",
        "checks": {"passed": statuses.count("pass"), "failed": statuses.count("fail") + statuses.count("error"),
                   "evidence": "evidence.json"},
    }
    return measured(to_jsonable(answer))


def validate_answer(answer: dict) -> None:
    report.validate_answer(answer, SCHEMA_PATH)


def render_answer_text(answer: dict) -> str:
    """jinja2-render answer.json (templates/samples_answer.json.j2), parse it back and validate it."""
    return report.render_answer_text(answer, "samples_answer.json.j2", SCHEMA_PATH)


def make_figures(answer: dict, claims: Claims, fig_dir: Path, tmp_dir: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir.mkdir(parents=True, exist_ok=True)
    made = []
    runs = answer["runs"]
    fams = []
    for r in runs.values():
        fams += [f for f in r["per_family"] if f not in fams]
    if runs and fams:
        fig, axes = plt.subplots(1, len(fams), figsize=(2.3 * len(fams) + 1, 3.8), sharey=True, squeeze=False)
        names = list(runs)
        for ax, f in zip(axes[0], fams):
            for k, name in enumerate(names):
                p = runs[name]["per_family"].get(f) or {}
                if _is_ci(p.get("ci95_gold_only")):
                    lo, hi = p["ci95_gold_only"]
                    ax.plot([k + 0.15, k + 0.15], [lo, hi], color="0.6", lw=3, solid_capstyle="butt",
                            label="gold only" if k == 0 else None)
                if _is_ci(p.get("ci95")) and _is_num(p.get("estimate")):
                    lo, hi = p["ci95"]
                    ax.errorbar([k - 0.1], [p["estimate"]], yerr=[[p["estimate"] - lo], [hi - p["estimate"]]],
                                fmt="o", color="tab:red" if runs[name]["is_reference"] else f"C{k % 10}",
                                capsize=3, label="with the proxy" if k == 0 else None)
            ax.set_title(f)
            ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("estimated true quality (95% CI)")
        axes[0][0].legend(fontsize=7)
        fig.suptitle("per family and run: the estimate and 95% interval with the proxy (colour) vs the gold-only "
                     "interval (grey)",
                     fontsize=9)
        _save(fig, fig_dir / "estimates.png", tmp_dir)
        plt.close(fig)
        made.append("figures/estimates.png")

    pts = {c["param"]: c["details"].get("points") for c in claims.named(AGREE) if c["details"].get("points")}
    if pts:
        cols = min(3, len(pts))
        rows = (len(pts) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False)
        run_names = list(runs) or sorted({p[2] for v in pts.values() for p in v})
        for ax, (f, p) in zip(axes.ravel(), pts.items()):
            for k, name in enumerate(run_names):
                xs = [q[0] for q in p if q[2] == name]
                if xs:
                    ax.scatter(xs, [q[1] for q in p if q[2] == name], s=6, alpha=0.6, color=f"C{k % 10}",
                               label=name)
            m = answer["reward_model"].get(f, {})
            r = m.get("rm_gold_pearson")
            ax.set_title(f"{f}: r = {r:.2f}" + (" (flagged)" if m.get("flag") else "") if _is_num(r) else f,
                         fontsize=9, color="tab:red" if m.get("flag") else "black")
            ax.set_xlabel("proxy reward", fontsize=8)
            ax.set_ylabel("gold", fontsize=8)
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(pts):]:
            ax.axis("off")
        axes.ravel()[0].legend(fontsize=6, markerscale=2)
        fig.tight_layout()
        _save(fig, fig_dir / "proxy_vs_gold.png", tmp_dir)
        plt.close(fig)
        made.append("figures/proxy_vs_gold.png")
    for name in FIGURE_NAMES:
        if f"figures/{name}" not in made and (fig_dir / name).exists():
            (fig_dir / name).unlink()
    return made


def render_summary(answer: dict, doc: dict, figures: list[str]) -> str:
    claims = Claims(doc)
    health = by_role(claims.all(), ROLES)["health"]
    bad = [c for c in claims.all() if c["status"] != "pass" and c not in health
           and c["name"] not in (RUN, "run.non_inferior", AGREE, SCALE, SHIPPED)]
    env = _env()
    env.filters["f4"] = lambda v: f"{v:.4f}" if _is_num(v) else "n/a"
    env.filters["s4"] = lambda v: f"{v:+.4f}" if _is_num(v) else "n/a"
    env.filters["ci4"] = lambda v: f"[{v[0]:.4f}, {v[1]:.4f}]" if _is_ci(v) else "n/a"
    env.filters["sci4"] = lambda v: f"[{v[0]:+.4f}, {v[1]:+.4f}]" if _is_ci(v) else "n/a"
    width = lambda ci: ci[1] - ci[0] if _is_ci(ci) else None   # noqa: E731
    return env.get_template("samples_summary.md.j2").render(a=answer, figures=figures, other_failed=bad,
                                                            health=health, width=width, meta=doc.get("meta") or {})


def render(evidence_path, out_dir, *, figures: bool = True) -> dict:
    """Write out_dir/{answer.json, summary.md, figures/*.png, evidence.json}; answer.json last. Raises ValueError
    (AnswerSchemaError) before writing anything when the evidence is malformed or the answer violates the schema."""
    evidence_path, out_dir = Path(evidence_path), Path(out_dir)
    doc = load_evidence(evidence_path)
    answer = build_answer(doc)
    answer_text = render_answer_text(answer)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / STAGING
    staging.mkdir(exist_ok=True)
    made = make_figures(answer, Claims(doc), out_dir / "figures", staging) if figures else []
    atomic_write_text(out_dir / "summary.md", render_summary(answer, doc, made), staging)
    target = out_dir / "evidence.json"
    if not (target.exists() and os.path.samefile(target, evidence_path)):
        atomic_write_text(target, evidence_path.read_text(), staging)
    atomic_write_text(out_dir / "answer.json", answer_text, staging)
    return answer
