"""Compare two answer.json files by what they mean: the same decisions, and every estimate's difference beside
its CI half-width (e.g. the same task audited on two machines, or under ATEN_CPU_CAPABILITY=default).

    python -m audit.compare A/answer.json B/answer.json [--json OUT]

Decisions: the shipped source, CERTIFIED or not, families improved, each run's release-rule verdict, each
family's RM flag and diagnostic flag. Estimates: the certified quality and each run's, overall and per family,
with the larger of the two CI half-widths; a difference at or above it is reported as outside. Exit 0 when
every decision agrees and every difference is inside its half-width, 3 when not (a finding, as audit.certify's
3 is), 2 on bad input, 1 only for an internal failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlhf.atomic import atomic_write_text
from rlhf.errors import EXIT_FINDING

EXIT_DIFFERENT = EXIT_FINDING      # the comparison ran and the answers differ: a finding, not a failure (exit 1)


def _half(ci) -> float | None:
    return None if not ci else (ci[1] - ci[0]) / 2


def decisions(a: dict) -> dict:
    c = a["certification"]
    out = {"shipped": (a.get("recipe") or {}).get("source"), "certified": c["improved_over_reference"],
           "families_improved": sorted(c["families_improved"])}
    out.update({f"run {r}: passes": v["passes_release_rule"] for r, v in a["runs"].items()})
    out.update({f"rm {f}: flag": v["flag"] for f, v in a["reward_model"].items()})
    out.update({f"diagnostic {f}: flag": v["flag"] for f, v in a["diagnostic"]["families"].items()})
    return out


def estimates(a: dict) -> dict:
    """name -> (estimate, ci95) for the certified quality and every run, overall and per family."""
    c = a["certification"]
    out = {"certified": (c["estimated_true_quality"], c["ci95"])}
    out.update({f"certified {f}": (v["estimate"], v["ci95"]) for f, v in c["per_family"].items()})
    for r, v in a["runs"].items():
        out[f"run {r}"] = (v["estimated_true_quality"], v["ci95"])
        out.update({f"run {r} {f}": (pf.get("estimate"), pf.get("ci95")) for f, pf in (v["per_family"] or {}).items()
                    if isinstance(pf, dict)})
    out.update({f"diagnostic {f} risk": (v["risk"], None) for f, v in a["diagnostic"]["families"].items()})
    return out


def compare(a: dict, b: dict) -> dict:
    da, db = decisions(a), decisions(b)
    decision_rows = [{"decision": k, "a": da.get(k), "b": db.get(k), "same": da.get(k) == db.get(k)}
                     for k in sorted(set(da) | set(db), key=list({**da, **db}).index)]
    ea, eb = estimates(a), estimates(b)
    rows = []
    for k in ea:
        if k not in eb or ea[k][0] is None or eb[k][0] is None:
            continue
        halves = [h for h in (_half(ea[k][1]), _half(eb[k][1])) if h is not None]
        half = max(halves) if halves else None
        diff = abs(ea[k][0] - eb[k][0])
        rows.append({"estimate": k, "a": ea[k][0], "b": eb[k][0], "abs_diff": round(diff, 4),
                     "ci_half_width": None if half is None else round(half, 4),
                     "inside": None if half is None else (diff < half or diff == 0)})
    return {"decisions": decision_rows, "estimates": rows,
            "decisions_same": all(r["same"] for r in decision_rows),
            "all_inside": all(r["inside"] is not False for r in rows),
            "max_abs_diff": max((r["abs_diff"] for r in rows), default=0.0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m audit.compare", description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = ap.parse_args(argv)
    docs = []
    for p in (args.a, args.b):
        try:
            docs.append(json.loads(p.read_text()))
            decisions(docs[-1]), estimates(docs[-1])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"error: {p}: not a readable answer.json ({type(e).__name__}: {e})", file=sys.stderr)
            return 2
    res = compare(*docs)
    for r in res["decisions"]:
        if not r["same"]:
            print(f"DIFFERENT  {r['decision']}: {r['a']} vs {r['b']}")
    print(f"decisions: {sum(r['same'] for r in res['decisions'])}/{len(res['decisions'])} the same")
    print(f"{'estimate':42s} {'a':>8s} {'b':>8s} {'|diff|':>8s} {'CI half':>8s}")
    for r in res["estimates"]:
        half = "" if r["ci_half_width"] is None else f"{r['ci_half_width']:.4f}"
        mark = "" if r["inside"] is not False else "  OUTSIDE"
        print(f"{r['estimate'][:42]:42s} {r['a']:8.4f} {r['b']:8.4f} {r['abs_diff']:8.4f} {half:>8s}{mark}")
    print(f"max |diff| {res['max_abs_diff']:.4f}; every difference inside its CI half-width: {res['all_inside']}")
    if args.json:
        atomic_write_text(args.json, json.dumps(res, indent=1) + "\n")
    return 0 if res["decisions_same"] and res["all_inside"] else EXIT_DIFFERENT


if __name__ == "__main__":
    sys.exit(main())
