"""python -m audit.samples --samples FILE --gold FILE --out DIR --reference RUN [--seed 0]: certify runs from any
trainer from their logged samples (SPEC §4; docs/samples.md). `python -m audit.samples draw-gold ...` draws the rows
to label (audit/samples/draw.py).

Reads a samples table (sample_id, run, family, prompt_id, completion, proxy_reward; optional prompt, step) and a
gold table (sample_id, gold), JSONL, CSV or Parquet; validates both and the sampling design first (nothing
expensive, nothing written); then runs the claims in checks/samples/ with pytest (evidence.json) and renders
OUT/answer.json, OUT/summary.md and OUT/figures/ from the evidence alone (audit.samples.render).

Exit status (as audit.certify):
  0  the audit ran and its report was rendered, whatever it found (a run that fails the release rule is a finding)
  2  bad input or usage: one line per problem on stderr (file, line or row, column, what was expected); nothing
     is written, not even OUT itself
  1  an internal failure (the checks produced no evidence, or rendering failed); a previous answer.json is kept
  3  only with --fail-if-not-certified: the audit ran, but no run passes the release rule (nothing to ship), for CI
     that gates on the verdict

A gold file written by draw-gold is checked against the record of its draw (GOLD's sibling NAME.draw.json, or
--draw-record): the samples file's sha256 and every gold row's id (audit.samples.draw.check_record).
One run at a time per OUT (audit/core/out_lock.py): a second run on an OUT in use exits 2 at once, naming the holder.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import sys
import time
from pathlib import Path

from rlhf.cli import Parser, positive_float, positive_int, seed_arg
from rlhf.errors import EXIT_FINDING, EXIT_INTERNAL, EXIT_OK

from audit.core import claims_runner, out_lock
from audit.core.claims_runner import run_claims_and_render
from audit.core.resources import claims_pytest_args
from .columns import FORMATS_HELP

STAGING = ".staging"
EXIT_NOT_CERTIFIED = EXIT_FINDING        # with --fail-if-not-certified, as audit.certify
USAGE = ("python -m audit.samples --samples PATH --gold PATH --out DIR [--reference RUN] [options]\n"
         "       python -m audit.samples {draw-gold} --samples PATH --per-cell N --out TO_LABEL.csv [--seed S] "
         "(the rows to label: draw-gold --help)")


def refuse(lines, out: Path) -> int:
    return claims_runner.refuse("samples", lines, out)


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m audit.samples", usage=USAGE,
                description="Certify runs from any trainer from their logged samples: true quality per run and family "
                            "from the gold labels of a random subset (the proxy reward as a prediction where it "
                            "narrows the interval), the release rule per run, the run to ship, and whether the proxy "
                            "can be trusted per family. Writes OUT/answer.json, OUT/summary.md, OUT/evidence.json "
                            "and OUT/figures/. The rows to label: python -m audit.samples draw-gold --help.",
                epilog="exit status: 0 the audit ran; 2 bad input or usage (nothing written); 1 internal failure; "
                       "3 with --fail-if-not-certified: no run passes the release rule. Schema and design: "
                       "docs/samples.md")
    ap.add_argument("--samples", required=True, metavar="PATH",
                    help="the samples table (sample_id, run, family, prompt_id, completion, proxy_reward; optional "
                         "prompt, step): " + FORMATS_HELP)
    ap.add_argument("--gold", required=True, metavar="PATH",
                    help="gold labels (sample_id, gold) of a random subset of every run x family's samples, as "
                         "draw-gold draws it; same formats as --samples")
    ap.add_argument("--out", required=True, metavar="DIR", help="output directory (answer.json, summary.md, "
                    "evidence.json, figures/); a previous report there is replaced only by a complete new one")
    ap.add_argument("--reference", default=None, help="the run every other run is compared with (default: a run "
                    "named 'reference' when there is one)")
    ap.add_argument("--seed", type=seed_arg, default=0,
                    help="seed of the bootstraps and the corruption draws (an integer in [0, 2**32 - 1])")
    ap.add_argument("--column", action="append", default=[], metavar="NAME=COLUMN",
                    help="read column NAME of the schema from COLUMN (repeatable), e.g. --column proxy_reward=score")
    g = ap.add_argument_group("sampling design")
    g.add_argument("--min-gold", type=int, default=10, help="gold rows needed per run x family (default 10)")
    g.add_argument("--min-samples", type=positive_int, default=20,
                   help="samples needed per run x family (default 20)")
    g.add_argument("--design-alpha", type=float, default=0.01,
                   help="family-wise level of the gold rows' random-subset test over all cells (default 0.01)")
    g.add_argument("--nonrandom-gold", choices=["refuse", "widen"], default="refuse",
                   help="a cell whose gold rows fail the random-subset test: refuse (exit 2, default) or give it a "
                        "worst-case interval over --gold-range")
    g.add_argument("--gold-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="the values a gold label can take (checked; needed by --nonrandom-gold widen)")
    r = ap.add_argument_group("release rule (SPEC §3)")
    r.add_argument("--min-gain", type=float, default=0.05, help="balanced gain over the reference (default 0.05)")
    r.add_argument("--gain-ci-lower", type=float, default=0.0, help="its CI lower bound must exceed (default 0)")
    r.add_argument("--family-ci-lower", type=float, default=-0.03,
                   help="every family's change: CI lower bound must exceed (default -0.03)")
    c = ap.add_argument_group("claims")
    c.add_argument("--agreement-min-pearson", type=float, default=0.2,
                   help="proxy agrees with gold on a family: Pearson CI lower bound above this (default 0.2)")
    c.add_argument("--scale-max-ratio", type=positive_float, default=2.0,
                   help="proxy on a common scale: a family's proxy-per-gold slope within this factor of the others' "
                        "(default 2)")
    c.add_argument("--stress-examples", type=int, default=24,
                   help="hypothesis-drawn proxy corruptions measuring each claim's detection rate (default 24)")
    ap.add_argument("--draw-record", default=None, metavar="FILE",
                    help="the record of the draw the gold rows come from (default: GOLD's sibling NAME.draw.json "
                         "when there is one, as draw-gold writes it); checked before anything runs")
    ap.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="read the samples table on a Ray cluster (host:port, ray://host:port, or 'local' to start "
                         "one here) and compute the per-cell statistics there with Ray Data; only the gold rows, the "
                         "corruption stress's subsample and small cells come back (audit/samples/ray_cells.py); "
                         "same answer as without")
    ap.add_argument("--junitxml", default=None, metavar="PATH",
                    help="also write pytest's JUnit XML report of the claims to PATH: one test case per claim (its id "
                         "in the case's `claim` property), passed exactly when evidence.json says pass; for CI "
                         "dashboards")
    ap.add_argument("--fail-if-not-certified", action="store_true",
                    help="exit 3 when the audit ran but no run passes the release rule (CI gating)")
    ap.add_argument("--no-figures", action="store_true")
    return ap


def settings(a) -> tuple[dict, list[str]]:
    """The audit's settings as one JSON-able dict (the checks read it), and the usage problems found."""
    from .rows import column_mapping
    mapping, problems = column_mapping(a.column)
    if a.min_gold < 2:
        problems.append(f"--min-gold {a.min_gold}: expected an integer >= 2")
    if not 0 < a.design_alpha < 1:
        problems.append(f"--design-alpha {a.design_alpha}: expected a number in (0, 1)")
    if a.gold_range is not None and not (all(map(math.isfinite, a.gold_range)) and a.gold_range[0] < a.gold_range[1]):
        problems.append(f"--gold-range {a.gold_range[0]:g} {a.gold_range[1]:g}: expected finite numbers LO < HI")
    for flag, v in (("--min-gain", a.min_gain), ("--gain-ci-lower", a.gain_ci_lower),
                    ("--family-ci-lower", a.family_ci_lower)):
        if not math.isfinite(v):      # NaN would make every comparison of the rule false ("at least nan")
            problems.append(f"{flag} {v:g}: expected a finite number")
    if not -1 <= a.agreement_min_pearson < 1:
        problems.append(f"--agreement-min-pearson {a.agreement_min_pearson:g}: expected a number in [-1, 1)")
    if a.scale_max_ratio < 1:
        problems.append(f"--scale-max-ratio {a.scale_max_ratio:g}: expected a finite number >= 1 (a factor r: a "
                        "family's slope ratio must reach into [1/r, r])")
    if a.stress_examples < 0:
        problems.append(f"--stress-examples {a.stress_examples}: expected an integer >= 0")
    return {"samples": str(Path(a.samples).resolve()), "gold": str(Path(a.gold).resolve()),
            "draw_record": str(Path(a.draw_record).resolve()) if a.draw_record else None,
            "reference": a.reference, "seed": a.seed, "mapping": mapping,
            "design": {"min_samples": a.min_samples, "min_gold": a.min_gold, "alpha": a.design_alpha,
                       "nonrandom_gold": a.nonrandom_gold, "gold_range": a.gold_range},
            "release_rule": {"min_balanced_gain": a.min_gain, "balanced_ci_lower_gt": a.gain_ci_lower,
                             "family_ci_lower_gt": a.family_ci_lower},
            "agreement_min_pearson_lower": a.agreement_min_pearson, "scale_max_ratio": a.scale_max_ratio,
            "stress_examples": a.stress_examples, "ray": a.ray}, problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["draw-gold"]:
        from .draw import main as draw_gold
        return draw_gold(argv[1:])
    a = parser().parse_args(argv)
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        return refuse([f"--out {out}: exists and is not a directory"], out)
    cfg, problems = settings(a)
    if problems:
        return refuse(problems, out)
    command = shlex.join([Path(sys.executable).name, "-m", "audit.samples", *argv])
    # before reading the tables: a second run on OUT stops at once
    return out_lock.run_holding(out, command, refuse, lambda lock: _run(a, out, cfg, command, lock))


def _run(a, out: Path, cfg: dict, command: str, lock) -> int:
    from .draw import check_record
    from .session import load_table, reduce_table
    problems, table = [], None
    if cfg.get("ray"):
        # on Ray the table is read and reduced there; the draw record (if any) is checked against the samples file
        # here first, so that a wrong record is refused before a Ray cluster is started or reached
        problems = check_record(cfg, None)
        if problems:
            lock.undo()
            return refuse(problems, out)
    try:
        table, reference = load_table(cfg, reduced=False)
    except ValueError as e:
        problems += getattr(e, "problems", [str(e)])
    if not cfg.get("ray"):
        problems = check_record(cfg, table) + problems        # the record's problems first, with the table's
    if problems:
        lock.undo()            # OUT as it was: not even created when it did not exist
        return refuse(problems, out)
    if not cfg.get("ray"):
        table = reduce_table(table, cfg)    # what the claims read: large cells summarised (audit.samples.cells)
    cfg["reference"] = reference

    t0 = time.time()
    staging = out / STAGING
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as e:
        lock.undo()
        return refuse([f"--out {out}: cannot be written ({e.strerror})"], out)
    # absolute: the pytest child runs in the staging dir
    settings_file, evidence = (staging / "settings.json").resolve(), (staging / "evidence.json").resolve()
    settings_file.write_text(json.dumps(cfg, indent=2))
    from .table import save
    saved = staging.resolve() / "table.arrow"          # the claims read the validated table, not the inputs again
    save(table, saved)
    n_gold = table.n_gold
    print(f"[samples] {table.n_rows} samples, {n_gold} gold rows, {len(table.runs)} runs x "
          f"{len(table.families)} families; reference '{reference}'; running the claims in checks/samples/ "
          f"(seed {a.seed})", flush=True)
    cmd = [sys.executable, "-m", "pytest", *claims_pytest_args("samples"), "-q", "--samples-settings", str(settings_file), "--seed", str(a.seed),
           "--samples-table", str(saved), "--evidence", str(evidence), "--audit-command", command,
           *(["--junitxml", str(Path(a.junitxml).resolve()), "-o", "junit_suite_name=rlhf-audit-claims"]
             if a.junitxml else []),
           "--capture=sys"]
    from .render import ROLES, render
    answer = run_claims_and_render(cmd, evidence, out, render, not a.no_figures, "samples", t0, ROLES,
                                   "the runs and the proxy")
    if answer is None:
        return EXIT_INTERNAL
    ship = answer["certification"]
    print(f"[samples] wrote {out}/answer.json, summary.md, evidence.json, figures/ in {time.time() - t0:.0f}s; "
          + (f"ship '{ship['run']}' (estimated true quality {ship['estimated_true_quality']:.4f})"
             if ship["run"] else "no run passes the release rule: keep the reference")
          + "; flagged families: " + (", ".join(f for f, m in answer["reward_model"].items() if m["flag"]) or "none"),
          flush=True)
    if a.fail_if_not_certified and not ship["run"]:
        print("[samples] --fail-if-not-certified: no run passes the release rule: exit 3", file=sys.stderr)
        return EXIT_NOT_CERTIFIED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
