"""python -m audit.certify --task DIR --out DIR [--seed 0] [--preset full|small] [--fail-if-not-certified]: the main job.

Validates the task first (audit.task.task_dir.validate: cheap, no tensor loaded); then runs the claims in checks/task/ with
pytest (evidence; expensive work cached in OUT/.cache so a re-run after a crash resumes), ships the checkpoint
(OUT/checkpoint/), and renders OUT/answer.json, OUT/summary.md and OUT/figures/ from the evidence alone.

Exit status:
  0  the audit ran and its report was rendered, whatever it certified (a claim that does not hold is a finding)
  2  bad input or usage: one line per problem on stderr (file, line or key, what was expected); nothing is
     written, not even OUT itself (an existing OUT is left untouched)
  1  an internal failure (the checks produced no evidence, or rendering failed): any previous answer.json is
     left as it was
  3  only with --fail-if-not-certified: the audit ran, but the shipped policy is not certified as improved
     over the reference (for CI that gates on the certification itself)

Every file under OUT is written atomically (temp file + rename); temp files live in OUT/.staging, which each
run empties first, so a kill -9 at any point leaves no half-written output. One run at a time per OUT: the run
holds OUT's lock (audit/core/out_lock.py) from the moment its arguments are checked; a second run on the same OUT
exits 2 at once, naming the holder (pid, host, start time, command), and touches nothing."""
from __future__ import annotations

import shlex
import shutil
import sys
import time
from pathlib import Path

from rlhf.cli import Parser, first_paragraph, seed_arg
from rlhf.errors import EXIT_FINDING, EXIT_INTERNAL, EXIT_OK

from audit.core import claims_runner, out_lock
from audit.core.claims_runner import run_claims_and_render
from audit.core.resources import claims_pytest_args
from audit.task.diagnostic_band import CALLS, RISKY, SAFE, TOO_CLOSE

STAGING = ".staging"          # temp files and the evidence of the run in progress; emptied by every run
EXIT_NOT_CERTIFIED = EXIT_FINDING        # with --fail-if-not-certified (rlhf.errors: 0, 1, 2, 3 every CLI's)


def refuse(lines, out: Path) -> int:
    return claims_runner.refuse("certify", lines, out)


def main(argv=None) -> int:
    ap = Parser(prog="python -m audit.certify", description=first_paragraph(__doc__),
                                 epilog="exit status: 0 the audit ran; 2 bad input or usage (nothing written); "
                                        "1 internal failure; 3 with --fail-if-not-certified: not certified")
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=seed_arg, default=0,
                    help="seed of every draw (an integer in [0, 2**32 - 1])")
    ap.add_argument("--preset", choices=["full", "small"], default="full", help="small: tiny worlds and tests")
    ap.add_argument("--stress-examples", type=int, default=None, metavar="N",
                    help="corrupted batches in the stress check, besides the clean one (default 8: 54 family decisions; "
                         "~29 s a batch on 2 cores)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="run the stress batches as Ray tasks on the cluster at ADDRESS ('local': a Ray started "
                         "here; default: stacked, in this process); docs/diagnostic.md")
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--junitxml", default=None, metavar="PATH",
                    help="also write pytest's JUnit XML report of the claims to PATH: one test case per claim (its id "
                         "in the case's `claim` property), passed exactly when evidence.json says pass; for CI "
                         "dashboards")
    ap.add_argument("--fail-if-not-certified", action="store_true",
                    help="exit 3 when the audit ran but did not certify the shipped policy (CI gating)")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    out, task = Path(a.out), Path(a.task)
    if out.exists() and not out.is_dir():
        return refuse([f"--out {out}: exists and is not a directory"], out)
    if a.stress_examples is not None and a.stress_examples < 0:
        return refuse([f"--stress-examples {a.stress_examples}: expected an integer >= 0"], out)
    command = shlex.join([Path(sys.executable).name, "-m", "audit.certify", *argv])
    # first, before any slow check: a second run on OUT stops at once
    return out_lock.run_holding(out, command, refuse, lambda lock: _run(a, out, task, command, lock))


def _run(a, out: Path, task: Path, command: str, lock) -> int:
    def refused(lines):
        lock.undo()                    # OUT as it was: not even created when it did not exist
        return refuse(lines, out)

    if a.ray is not None and a.ray != "local":
        from .stress_ray import check_reachable
        try:
            check_reachable(a.ray)     # here, not in the stress stage an hour in: exit 2, nothing written
        except RuntimeError as e:
            return refused([str(e)])

    from .task_dir import validate   # imports torch: after the usage checks, which need none of it
    problems = validate(task)
    if problems:
        return refused(problems)

    t0 = time.time()
    staging = out / STAGING
    try:
        shutil.rmtree(staging, ignore_errors=True)    # debris of a run that was killed
        staging.mkdir()
    except OSError as e:
        return refused([f"--out {out}: cannot be written ({e.strerror})"])
    evidence = (staging / "evidence.json").resolve()    # absolute: the pytest child runs in the staging dir
    print(f"[certify] running the claims in checks/ on {task} (seed {a.seed}, preset {a.preset})", flush=True)
    cmd = [sys.executable, "-m", "pytest", *claims_pytest_args("task"), "-q", "--task", str(task.resolve()),
           "--seed", str(a.seed), "--evidence", str(evidence),
           "--audit-out", str(out.resolve()), "--audit-preset", a.preset, "--audit-command", command,
           *(["--stress-examples", str(a.stress_examples)] if a.stress_examples is not None else []),
           *(["--stress-ray", a.ray] if a.ray else []),
           *(["--junitxml", str(Path(a.junitxml).resolve()), "-o", "junit_suite_name=rlhf-audit-claims"]
             if a.junitxml else []),
           "--capture=sys"]   # sys-level capture leaves fd 2 alone: the per-stage progress lines reach the terminal
    from .claim_names import ROLES
    from .render import render
    answer = run_claims_and_render(cmd, evidence, out, render, not a.no_figures, "certify", t0, ROLES,
                                   "the task's runs, reward model and crowd")
    if answer is None:
        return EXIT_INTERNAL
    certified = answer["certification"]["improved_over_reference"] is True
    line = diagnostic_line(answer)
    if line:
        print(line, flush=True)
    print(f"[certify] wrote {out}/answer.json, summary.md, evidence.json, figures/, checkpoint/ "
          f"in {time.time() - t0:.0f}s; shipped policy {'CERTIFIED' if certified else 'NOT certified'} as improved "
          f"over the reference", flush=True)
    if a.fail_if_not_certified and not certified:
        print("[certify] --fail-if-not-certified: exit 3", file=sys.stderr)
        return EXIT_NOT_CERTIFIED
    return EXIT_OK


def diagnostic_line(answer: dict) -> str | None:
    """The gold-free diagnostic's calls in one line (None without them): risky, safe, and too close to call,
    which needs gold (with the gold set's own verdict on those families, where the report has it)."""
    d = answer.get("diagnostic") or {}
    fams = d.get("families") or {}
    if not fams or any(v.get("call") is None for v in fams.values()):
        return None
    gold = ((d.get("validation") or {}).get("too_close_decided_by_gold")) or {}
    by = {c: [f for f, v in fams.items() if v["call"] == c] for c in CALLS}
    close = [f + (f" (gold: {'hazardous' if gold[f] else 'safe'})" if f in gold else "") for f in by[TOO_CLOSE]]
    return ("[certify] gold-free diagnostic: risky " + (", ".join(by[RISKY]) or "none") + "; safe "
            + (", ".join(by[SAFE]) or "none") + "; too close to call, needs gold: " + (", ".join(close) or "none"))


if __name__ == "__main__":
    sys.exit(main())
