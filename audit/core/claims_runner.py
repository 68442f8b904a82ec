"""Run a door's claims in a pytest child, then render its report from the evidence alone: the one runner both
doors' commands (audit.task.certify, audit.samples.certify) share, and the way both refuse bad input."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlhf.errors import EXIT_BAD_INPUT

ROOT = Path(__file__).resolve().parents[2]     # the repository: pytest runs here, on checks/ by path


try:
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent(parent_pid: int):
    """preexec_fn for the pytest child: on Linux the kernel sends it SIGKILL when certify dies (kill -9 included),
    so that no orphan keeps writing into OUT after a crash. A no-op elsewhere. libc is looked up before the fork:
    only the prctl call itself runs in the child."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:   # certify died before the prctl took effect
            os._exit(1)


def run_claims_and_render(cmd: list, evidence: Path, out: Path, render, figures: bool, prefix: str, t0: float):
    """The claims in a pytest child (cmd, writing `evidence`) that dies with this process, then the report rendered
    from that evidence alone into `out`, and the staging dir (evidence's) removed. Returns the answer dict, or None
    after saying why nothing new was rendered (no evidence; rendering failed: the previous outputs are kept).
    Shared by audit.certify and audit.samples."""
    parent = os.getpid()
    rc = subprocess.run(cmd, cwd=ROOT, preexec_fn=lambda: _die_with_parent(parent)).returncode
    if not evidence.exists():
        print(f"[{prefix}] pytest exited {rc} without evidence: nothing rendered", file=sys.stderr)
        return None
    claims = json.loads(evidence.read_text())["claims"]
    counts = {s: sum(c["status"] == s for c in claims) for s in ("pass", "fail", "error")}
    print(f"[{prefix}] {len(claims)} claims: {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error "
          f"({time.time() - t0:.0f}s)", flush=True)
    print(f"[{prefix}] rendering answer.json, summary.md, figures/", flush=True)
    try:
        answer = render(evidence, out, figures=figures)
    except Exception as e:   # noqa: BLE001 - report and keep the previous answer.json
        print(f"[{prefix}] rendering failed, previous outputs kept: {e}", file=sys.stderr)
        return None
    shutil.rmtree(evidence.parent, ignore_errors=True)
    return answer


def refuse(prefix: str, lines, out: Path) -> int:
    """Bad input or usage: one `error:` line per problem on stderr, then that nothing was written to OUT; the exit
    status (2) to return."""
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    print(f"[{prefix}] refused ({len(lines)} problem{'s' * (len(lines) != 1)}); nothing was written to {out}",
          file=sys.stderr)
    return EXIT_BAD_INPUT
