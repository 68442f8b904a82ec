"""Compare two answer.json files by what they mean: the same decisions, and every estimate's difference beside
its CI half-width (e.g. the same task audited on two machines, or under ATEN_CPU_CAPABILITY=default).

    python -m audit.compare A/answer.json B/answer.json [--json OUT]

Both answers come from one door: two task audits (python -m audit.certify) or two samples audits (python -m
audit.samples); one of each is refused. Decisions: the shipped source (task door) or run (samples door),
CERTIFIED or not, families improved, each run's release-rule verdict, each family's RM flag and (task door)
diagnostic flag. Estimates: the certified quality and each run's, overall and per family (samples door: also
the certified run's and each run's gain over the reference, and each family's proxy-gold Pearson), with the
larger of the two CI half-widths; a difference at or above it is reported as outside. Exit 0 when every decision
agrees and every difference is inside its half-width, 3 when not (a finding, as audit.certify's 3 is), 2 on bad
input (an answer missing a key compare reads, a CI that is not [lo, hi], NaN or infinity anywhere: the file and
key named; nothing written), 1 only for an internal failure. Each answer.json is read under its directory's swap
lock (audit/core/out_lock.py): never while a run swaps its report in; an OUT a killed run left half-swapped is
refused (exit 2).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rlhf.atomic import atomic_write_text
from rlhf.errors import EXIT_FINDING, InputError, run_cli
from rlhf.cli import Parser, first_paragraph

from audit.core import out_lock

EXIT_DIFFERENT = EXIT_FINDING      # the comparison ran and the answers differ: a finding, not a failure (exit 1)
PROG = "python -m audit.compare"
TASK, SAMPLES = "task", "samples"
DOORS = {TASK: "a task audit (python -m audit.certify)", SAMPLES: "a samples audit (python -m audit.samples)"}


def _half(ci) -> float | None:
    return None if not ci else (ci[1] - ci[0]) / 2


def door(a: dict) -> str | None:
    """Which front door wrote answer `a`: TASK (it has a diagnostic), SAMPLES (a reference_run), or None."""
    if not isinstance(a, dict):
        return None
    if "diagnostic" in a:
        return TASK
    if "reference_run" in a:
        return SAMPLES
    return None


def decisions(a: dict) -> dict:
    c = a["certification"]
    shipped = c["run"] if door(a) == SAMPLES else (a.get("recipe") or {}).get("source")
    out = {"shipped": shipped, "certified": c["improved_over_reference"],
           "families_improved": sorted(c["families_improved"])}
    out.update({f"run {r}: passes": v["passes_release_rule"] for r, v in a["runs"].items()})
    out.update({f"rm {f}: flag": v["flag"] for f, v in a["reward_model"].items()})
    if door(a) == TASK:
        out.update({f"diagnostic {f}: flag": v["flag"] for f, v in a["diagnostic"]["families"].items()})
        out.update({f"diagnostic {f}: call": v["call"] for f, v in a["diagnostic"]["families"].items() if "call" in v})
    return out


def _entries(a: dict) -> list[tuple]:
    """(name, key path, entry, estimate key, CI key or None) of every estimate compare reads: the certified
    quality and every run's, overall and per family; the samples door's gains over the reference and proxy-gold
    Pearsons; the task door's diagnostic risks (no CI)."""
    c = a["certification"]
    samples = door(a) == SAMPLES
    out = [("certified", "certification", c, "estimated_true_quality", "ci95")]
    if samples:
        out.append(("certified gain", "certification", c, "delta", "delta_ci95"))
    out += [(f"certified {f}", f"certification/per_family/{f}", v, "estimate", "ci95")
            for f, v in c["per_family"].items()]
    for r, v in a["runs"].items():
        out.append((f"run {r}", f"runs/{r}", v, "estimated_true_quality", "ci95"))
        if samples:
            out.append((f"run {r} gain", f"runs/{r}", v, "delta", "delta_ci95"))
        out += [(f"run {r} {f}", f"runs/{r}/per_family/{f}", pf, "estimate", "ci95")
                for f, pf in (v["per_family"] or {}).items() if isinstance(pf, dict)]
    if samples:
        out += [(f"rm {f} pearson", f"reward_model/{f}", v, "rm_gold_pearson", "ci95")
                for f, v in a["reward_model"].items()]
    else:
        out += [(f"diagnostic {f} risk", f"diagnostic/families/{f}", v, "risk", None)
                for f, v in a["diagnostic"]["families"].items()]
    return out


def estimates(a: dict) -> dict:
    """name -> (estimate, ci95) for every estimate of _entries."""
    return {name: (e.get(k), e.get(ci) if ci else None) for name, _, e, k, ci in _entries(a)}


def _not_finite(x, where: str = "") -> str | None:
    """The key path of the first NaN or infinity in x, or None."""
    if isinstance(x, float) and not math.isfinite(x):
        return where or "<root>"
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        hit = _not_finite(v, f"{where}/{k}" if where else str(k))
        if hit is not None:
            return hit
    return None


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_values(a: dict, p) -> None:
    """Every estimate compare reads is a number or null, every CI null or [lo, hi] with lo <= hi (InputError
    naming the file and the key)."""
    for _, path, e, k, ci in _entries(a):
        optional = path.startswith("runs/") and "/per_family/" in path    # the task door's: what its claim recorded
        for key in (k, ci) if not optional else ():
            if key is not None and key not in e:
                raise InputError(f"{p}: key '{path}/{key}' is missing; expected a number or null" if key == k else
                                 f"{p}: key '{path}/{key}' is missing; expected null or [lo, hi]")
        if e.get(k) is not None and not _is_num(e[k]):
            raise InputError(f"{p}: key '{path}/{k}': expected a number or null, got {json.dumps(e[k])}")
        v = e.get(ci) if ci else None
        if v is not None and not (isinstance(v, list) and len(v) == 2 and all(map(_is_num, v)) and v[0] <= v[1]):
            raise InputError(f"{p}: key '{path}/{ci}': expected null or [lo, hi] (two numbers, lo <= hi), "
                             f"got {json.dumps(v)}")


def load_answer(p: Path) -> tuple[dict, str]:
    """An answer.json and its door, checked for what compare reads (InputError naming the file and key)."""
    try:
        with out_lock.reading(p.parent):      # not while a run swaps its report into that OUT
            text = p.read_text()
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory; expected an answer.json file") from None
    except FileNotFoundError:
        raise InputError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    try:
        a = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not a readable answer.json (not valid JSON: {e.msg} at line {e.lineno})") from None
    d = door(a)
    if d is None:
        raise InputError(f"{p}: not a readable answer.json: expected the answer of {DOORS[TASK]}, with key "
                         f"'diagnostic', or of {DOORS[SAMPLES]}, with key 'reference_run'")
    bad = _not_finite(a)
    if bad is not None:
        raise InputError(f"{p}: key '{bad}': NaN or infinity; expected a finite number or null (JSON has no NaN)")
    try:
        decisions(a), estimates(a)
        _check_values(a, p)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        what = f"key {e.args[0]!r} is missing" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise InputError(f"{p}: not a readable answer.json ({what}; expected the answer of {DOORS[d]})") from None
    return a, d


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


def _main(argv=None) -> int:
    ap = Parser(prog=PROG, description=first_paragraph(__doc__),
                                 epilog="exit status: 0 the same; 3 different; 2 bad input or usage; "
                                        "1 internal failure")
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = ap.parse_args(argv)
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        raise InputError(f"--json {args.json}: " + ("is a directory; expected the path of a file"
                                                     if args.json.is_dir() else
                                                     f"its directory {args.json.parent} does not exist"))
    (a, da), (b, db) = load_answer(args.a), load_answer(args.b)
    if da != db:
        raise InputError(f"{args.a} is the answer of {DOORS[da]}, {args.b} of {DOORS[db]}: expected two answers of "
                         "one door")
    res = compare(a, b)
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
        atomic_write_text(args.json, json.dumps(res, indent=1, allow_nan=False) + "\n")
    return 0 if res["decisions_same"] and res["all_inside"] else EXIT_DIFFERENT


def main(argv=None) -> int:
    """The command: bad input is one `python -m audit.compare: error: ...` line and exit 2 (rlhf.errors.run_cli)."""
    return run_cli(_main, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
