"""python -m audit.certify --task DIR --out DIR [--seed 0] [--preset full|small]: the main job.

Runs the claims in checks/ with pytest (evidence -> OUT/evidence.json; expensive work cached in OUT/.cache so a
re-run after a crash resumes), ships the checkpoint (OUT/checkpoint/), then renders OUT/answer.json,
OUT/summary.md and OUT/figures/ from the evidence alone. A claim that does not hold is a finding, not a crash:
the exit status is 0 when the report was rendered, 1 when the checks could not produce evidence or rendering
failed (then any previous answer.json is left as it was)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from .render import render

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m audit.certify", description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=["full", "small"], default="full", help="small: tiny worlds and tests")
    ap.add_argument("--no-figures", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    task = Path(a.task)
    if not task.is_dir():
        print(f"error: task directory {task} not found", file=sys.stderr)
        return 1
    t0 = time.time()
    evidence = out / ".evidence.new.json"
    evidence.unlink(missing_ok=True)
    print(f"[certify] running the claims in checks/ on {task} (seed {a.seed}, preset {a.preset})", flush=True)
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "checks"), "-q", "-p", "no:cacheprovider", "--rootdir",
           str(ROOT), "--task", str(task.resolve()), "--seed", str(a.seed), "--evidence", str(evidence),
           "--audit-out", str(out.resolve()), "--audit-preset", a.preset, "-o", "console_output_style=count",
           "--capture=sys"]   # sys-level capture leaves fd 2 alone: the per-stage progress lines reach the terminal
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if not evidence.exists():
        print(f"[certify] pytest exited {rc} without evidence: nothing rendered", file=sys.stderr)
        return 1
    claims = json.loads(evidence.read_text())["claims"]
    counts = {s: sum(c["status"] == s for c in claims) for s in ("pass", "fail", "error")}
    print(f"[certify] {len(claims)} claims: {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error "
          f"({time.time() - t0:.0f}s)", flush=True)
    try:
        render(evidence, out, figures=not a.no_figures)
    except Exception as e:   # noqa: BLE001 - report and keep the previous answer.json
        print(f"[certify] rendering failed, previous outputs kept: {e}", file=sys.stderr)
        return 1
    evidence.unlink(missing_ok=True)
    print(f"[certify] wrote {out}/answer.json, summary.md, evidence.json, figures/, checkpoint/ "
          f"in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
