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

from . import out_lock
from .report import by_role


try:
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent(parent_pid: int):
    """preexec_fn for the pytest child: on Linux the kernel sends it SIGKILL when certify dies (kill -9 included),
    so that no orphan keeps writing into OUT after a crash. The child does not hold OUT's lock (out_lock: its fd
    is close-on-exec); it works under its parent's, and both end together. A no-op elsewhere. libc is looked up
    before the fork: only the prctl call itself runs in the child."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:   # certify died before the prctl took effect
            os._exit(1)


LOG = "claims.log"      # pytest's own report of the claims (in OUT): a claim that does not hold is a finding there


def console_summary(claims: list, roles: dict, subject: str) -> list[str]:
    """The claims in the tool's words: the audit's own health apart from the findings about the subject."""
    by = by_role(claims, roles)
    lines = []
    health = by["health"]
    bad = [c for c in health if c["status"] != "pass"]
    if bad:
        lines.append(f"the audit's own health: {len(bad)} of {len(health)} checks did not hold: "
                     + ", ".join(f"{c['id']} ({c['status']})" for c in bad) + " -- read summary.md before its findings")
    else:
        lines.append(f"the audit's own health: all {len(health)} checks hold")
    f = by["finding"]
    hold = sum(c["status"] == "pass" for c in f)
    err = sum(c["status"] == "error" for c in f)
    lines.append(f"findings about {subject}: {len(f)} claims, {hold} hold, {len(f) - hold - err} do not"
                 + (f", {err} could not be evaluated" if err else ""))
    return lines


def run_claims_and_render(cmd: list, evidence: Path, out: Path, render, figures: bool, prefix: str, t0: float,
                          roles: dict | None = None, subject: str = "the runs"):
    """The claims in a pytest child (cmd, writing `evidence`) that dies with this process, then the report rendered
    from that evidence alone into `out`, and the staging dir (evidence's) removed. pytest's report goes to
    OUT/claims.log, not the terminal: its failures are mostly findings, and the console says so in the tool's words
    (`roles`: claim name -> 'decision' / 'health'; the rest are findings about `subject`). Returns the answer dict,
    or None after saying why nothing new was rendered (no evidence; rendering failed: the previous outputs are
    kept). Shared by audit.certify and audit.samples."""
    parent = os.getpid()
    evidence.parent.mkdir(parents=True, exist_ok=True)
    log = evidence.parent / LOG
    with open(log, "w") as fh:
        # in the staging dir, with pytest's plugins off but those named: what the claims run is the installed
        # package's, whatever the user's directory or environment holds (its pytest config: checks/pytest.ini)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        rc = subprocess.run(cmd, cwd=evidence.parent, env=env, stdout=fh,
                            preexec_fn=lambda: _die_with_parent(parent)).returncode
    if not evidence.exists():
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        print(f"[{prefix}] pytest exited {rc} without evidence: nothing rendered (its report: {log})", file=sys.stderr)
        return None
    claims = json.loads(evidence.read_text())["claims"]
    print(f"[{prefix}] {len(claims)} claims evaluated ({time.time() - t0:.0f}s); pytest's report: {out / LOG}",
          flush=True)
    for line in console_summary(claims, roles or {}, subject):
        print(f"[{prefix}] {line}", flush=True)
    print(f"[{prefix}] rendering answer.json, summary.md, figures/", flush=True)
    try:
        with out_lock.swapping(out):     # readers (out_lock.reading) wait for the whole swap
            answer = render(evidence, out, figures=figures)
            os.replace(log, out / LOG)  # same filesystem (the staging dir is inside OUT): atomic
    except Exception as e:   # noqa: BLE001 - report and keep the previous answer.json
        kept = (f"{out / out_lock.SWAP} marks OUT half-swapped until a run completes"
                if (out / out_lock.SWAP).exists() else "previous outputs kept")
        print(f"[{prefix}] rendering failed, {kept}: {e} (pytest's report: {log})", file=sys.stderr)
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
