"""The task audit's figures (figures/*.png of audit.task.render), drawn from the answer and the evidence's claims
alone; a figure only for what some claim holds data for. matplotlib's Agg backend."""
from __future__ import annotations

from pathlib import Path

from audit.core.report import Claims, _is_ci, _is_num, _save
from .claim_names import OWN

FIGURE_NAMES = ("quality_vs_proxy.png", "rm_agreement.png", "diagnostic_risk.png", "training_curves.png")


def _quality_series(answer: dict) -> tuple[list[str], list[tuple[str, dict, dict]]]:
    """[(label, {f: true estimate}, {f: proxy})] for the reference, the shipped checkpoint and every run."""
    series = []
    ref, ref_proxy = {}, {}
    cert_pf = answer["certification"]["per_family"]
    for f, pf in cert_pf.items():
        if _is_num(pf.get("reference")):
            ref[f] = pf["reference"]
    for r in answer["runs"].values():
        for f, pf in (r["per_family"] or {}).items():
            if isinstance(pf, dict):
                if _is_num(pf.get("reference")):
                    ref.setdefault(f, pf["reference"])
                if _is_num(pf.get("reference_proxy")):
                    ref_proxy.setdefault(f, pf["reference_proxy"])
    if ref or ref_proxy:
        series.append(("reference", ref, ref_proxy))
    shipped = {f: pf["estimate"] for f, pf in cert_pf.items() if _is_num(pf.get("estimate"))}
    if shipped:
        series.append(("shipped", shipped, {}))
    for name, r in answer["runs"].items():
        est, prox = {}, {}
        for f, pf in (r["per_family"] or {}).items():
            if isinstance(pf, dict):
                if _is_num(pf.get("estimate")):
                    est[f] = pf["estimate"]
                if _is_num(pf.get("proxy")):
                    prox[f] = pf["proxy"]
        if est or prox:
            series.append((name, est, prox))
    fams = []
    for _, est, prox in series:
        for f in list(est) + list(prox):
            if f not in fams:
                fams.append(f)
    return fams, series


def make_figures(answer: dict, claims: Claims, fig_dir: Path, tmp_dir: Path | None = None) -> list[str]:
    """Write the figures whose data the evidence holds; returns their paths relative to out_dir."""
    save = lambda fig, name: _save(fig, fig_dir / name, tmp_dir)   # noqa: E731
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir.mkdir(parents=True, exist_ok=True)
    made = []

    fams, series = _quality_series(answer)
    if series and any(est for _, est, _ in series):
        has_proxy = any(prox for _, _, prox in series)
        fig, axes = plt.subplots(1, 2 if has_proxy else 1, figsize=(11 if has_proxy else 6, 3.8), squeeze=False)
        x = list(range(len(fams)))
        for k, (label, est, prox) in enumerate(series):
            style = dict(color=f"C{k % 10}", label=label, linestyle="--" if label == "reference" else "-")
            if est:
                axes[0][0].plot([i for i, f in enumerate(fams) if f in est], [est[f] for f in fams if f in est],
                                marker="o", **style)
            if has_proxy and prox:
                axes[0][1].plot([i for i, f in enumerate(fams) if f in prox], [prox[f] for f in fams if f in prox],
                                marker="s", **style)
        axes[0][0].set_title("estimated true quality per family")
        axes[0][0].set_ylabel("true quality (fraction of rubric positions)")
        if has_proxy:
            axes[0][1].set_title("proxy reward (RM) per family")
            axes[0][1].set_ylabel("proxy reward")
        for ax in axes[0]:
            ax.set_xticks(x, fams)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "quality_vs_proxy.png")
        plt.close(fig)
        made.append("figures/quality_vs_proxy.png")

    rm = {f: m for f, m in answer["reward_model"].items() if _is_num(m["rm_gold_pearson"])}
    if rm:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        names = list(rm)
        vals = [rm[f]["rm_gold_pearson"] for f in names]
        lo = [v - rm[f]["ci95"][0] if _is_ci(rm[f]["ci95"]) else 0.0 for f, v in zip(names, vals)]
        hi = [rm[f]["ci95"][1] - v if _is_ci(rm[f]["ci95"]) else 0.0 for f, v in zip(names, vals)]
        colors = ["tab:red" if rm[f]["flag"] else "tab:blue" for f in names]
        ax.bar(names, vals, color=colors, yerr=[lo, hi], capsize=4)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel("Pearson r, RM vs expert labels (95% CI)")
        ax.set_title("reward model agreement with experts (red = flagged)")
        save(fig, "rm_agreement.png")
        plt.close(fig)
        made.append("figures/rm_agreement.png")

    diag = {f: d for f, d in answer["diagnostic"]["families"].items() if _is_num(d["risk"])}
    if diag:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        names = list(diag)
        ax.bar(names, [diag[f]["risk"] for f in names],
               color=["tab:red" if diag[f]["flag"] else "tab:gray" for f in names])
        ax.set_ylabel("risk (higher = riskier to optimise)")
        ax.set_title("gold-free diagnostic risk per family (red = flagged)")
        save(fig, "diagnostic_risk.png")
        plt.close(fig)
        made.append("figures/diagnostic_risk.png")

    curves = []      # (label, points): every claim that recorded a training curve
    for c in claims.all():
        pts = c["details"].get("curve")
        if isinstance(pts, list):
            pts = [p for p in pts if isinstance(p, dict) and _is_num(p.get("step"))]
            if pts:
                label = "own (audit)" if c.get("name") == OWN else (c["param"] if c.get("param") is not None
                                                                    else c["id"])
                curves.append((label, pts))
    # a panel only for what some curve has: shipped runs log their proxy only, never a true-quality curve
    panels = [(key, title) for key, title in (("proxy", "proxy reward (RM) along training"),
                                              ("true", "estimated true quality along training"))
              if any(_is_num(p.get(key)) for _, pts in curves for p in pts)]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
        for ax, (key, title) in zip(axes[0], panels):
            for k, (label, pts) in enumerate(curves):
                xs = [p["step"] for p in pts if _is_num(p.get(key))]
                if xs:
                    ax.plot(xs, [p[key] for p in pts if _is_num(p.get(key))], marker=".", label=label,
                            color=f"C{k % 10}")
            ax.set_title(title)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "training_curves.png")
        plt.close(fig)
        made.append("figures/training_curves.png")

    for name in FIGURE_NAMES:                     # never leave a stale figure whose data is now absent
        if f"figures/{name}" not in made and (fig_dir / name).exists():
            (fig_dir / name).unlink()
    return made
