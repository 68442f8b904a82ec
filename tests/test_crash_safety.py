"""Crash safety: `python -m audit.certify` killed with SIGKILL at several points, then run again.

One OUT, one chain of runs: run k is killed right after the k-th marker of KILL_POINTS appears on its output (each
run resumes what the previous one left, so every kill lands on new work: a fresh stage, rendering). After every
kill: certify's pytest child died with it (no orphan keeps writing), every file among the outputs is absent or
byte-identical to an uninterrupted run's (no half-written or stale file), every cache entry is a complete pickle,
and temp files sit only in OUT/.staging. Every re-run reuses the cache (no stage cached before it starts is
computed again). The last run completes; its answer.json and summary.md are byte-identical to the uninterrupted
run's (`certified_tiny`, made in another OUT: paths, times and durations do not leak in) and OUT/.staging is gone.
Byte identity holds on any machine because both runs are on the *same* one, under one numeric fingerprint (thread
count, kernels, MKL's reproducible mode: docs/determinism.md); tests/kill_resume.py kills at many more drawn points.

To keep `make test` short, the chain's OUT starts with two cache entries copied from the uninterrupted run: the
diagnostic and the stress claim (the dearest stages on the tiny world, about half of a run); every other stage is
computed, and killed, in the chain. A further kill point (e.g. during a training stage that prints a progress line) is one
more entry in KILL_POINTS, in the order the markers appear."""
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from audit.core.evidence import load_evidence
from tests.helpers import certify_cmd

ROOT = Path(__file__).resolve().parents[1]

# (what the kill interrupts, regex of the output line after which certify is killed)
STAGE_DONE = r"\[audit\] (\S+): [\d.]+s"          # a stage finished and was cached; the next one is under way
# Three kills: every certify start costs ~7 s of imports, pytest start-up and rendering on 2 cores, and make test
# must stay short; tests/kill_resume.py kills at 20 drawn points (docs/determinism.md has its figure).
KILL_POINTS = [
    ("the checks, after the first cached stage", STAGE_DONE),
    ("training the own policy, after its first snapshot", r"\[audit\] own policy: snapshot at step"),
    ("rendering", r"\[certify\] rendering"),
]
PRESEEDED = ("diagnostic", "stress")
OUTPUTS = re.compile(r"answer\.json|summary\.md|evidence\.json|claims\.log|figures/[a-z_]+\.png|checkpoint/(policy\.safetensors|config\.json)"
                     r"|\.lock|\.swap")     # OUT's lock file (kept); the mark of a swap that a kill interrupted


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


def _gone(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def run(task, out, kill_at: str | None, *extra):
    """Run certify; with kill_at, SIGKILL it right after the first output line matching that regex.
    Returns (return code, output lines, whether it was killed, whether its children died within 10 s)."""
    p = subprocess.Popen(certify_cmd(task, out, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=ROOT, bufsize=1)
    lines, killed, orphans = [], False, []
    for line in p.stdout:      # pytest's child writes here too: the loop ends when both are gone
        lines.append(line)
        if kill_at and not killed and re.search(kill_at, line):
            kids = _children(p.pid)
            os.kill(p.pid, signal.SIGKILL)
            killed = True
            deadline = time.time() + 10       # a child that survived would finish its work: not "gone" in time
            while not all(_gone(k) for k in kids) and time.time() < deadline:
                time.sleep(0.05)
            orphans = [k for k in kids if not _gone(k)]
    return p.wait(), lines, killed, orphans


def cached_stages(out: Path) -> set[str]:
    return {p.stem for p in out.glob(".cache/*/*.pkl")}


def assert_no_partial_output(out: Path, baseline: Path):
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_dir() or rel.startswith(".staging/"):       # temp files of the killed run: emptied by the next
            continue
        if re.fullmatch(r"\.cache/[^/]+/own/.*", rel):           # the own policy's training dir (resumable)
            assert p.name in ("resume.pt", "policy.safetensors", "config.json", "train_log.json"), rel
            if p.name == "resume.pt":
                torch.load(p, weights_only=False)              # complete (atomic write)
            continue
        if re.fullmatch(r"\.cache/[^/]+/stress/.*", rel):        # the stress batches: RM dirs, per-batch results
            if p.suffix == ".json":
                json.loads(p.read_text())                      # complete (atomic write)
            continue
        if rel.startswith(".cache/"):
            assert p.suffix == ".pkl", rel
            pickle.loads(p.read_bytes())                      # complete (atomic write)
            continue
        assert OUTPUTS.fullmatch(rel), f"unexpected file in OUT: {rel}"
        if rel in (".lock", ".swap"):     # a holder's line; a mark: not outputs
            continue
        if rel == "claims.log":      # pytest's report ends with its duration: whole, and the same counts
            last, base = p.read_text().splitlines()[-1], (baseline / rel).read_text().splitlines()[-1]
            assert re.search(r"\d+ (passed|failed)", last), last
            assert re.sub(r" in [\d.]+s.*", "", last) == re.sub(r" in [\d.]+s.*", "", base), (last, base)
            continue
        if rel == "evidence.json":   # its times differ from the baseline's; the claims must be whole
            assert [c["id"] for c in load_evidence(p)["claims"]] == \
                   [c["id"] for c in load_evidence(baseline / rel)["claims"]]
        else:
            assert p.read_bytes() == (baseline / rel).read_bytes(), f"{rel} differs from an uninterrupted run's"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds certify's child process in /proc")
def test_killed_runs_resume_to_the_same_answer(certified_tiny, tiny_world, tmp_path):
    baseline, _ = certified_tiny
    out = tmp_path / "out"
    for stage in PRESEEDED:
        for p in baseline.glob(f".cache/*/{stage}.pkl"):
            (out / p.parent.relative_to(baseline)).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out / p.relative_to(baseline))
    assert cached_stages(out) == set(PRESEEDED)
    t0 = time.time()
    for what, marker in KILL_POINTS:
        before = cached_stages(out)
        rc, lines, killed, orphans = run(tiny_world / "task", out, marker)
        assert killed, f"no line matched {marker!r} ({what}); the run ended with {rc}: {''.join(lines[-5:])}"
        assert rc == -signal.SIGKILL
        assert not orphans, f"certify's child outlived it ({what})"
        recomputed = {m.group(1) for m in map(re.compile(STAGE_DONE).search, lines) if m} & before
        assert not recomputed, f"re-run recomputed cached stages {recomputed} ({what})"
        assert_no_partial_output(out, baseline)
    before = cached_stages(out)
    rc, lines, killed, _ = run(tiny_world / "task", out, None, "--fail-if-not-certified")
    certified = json.loads((baseline / "answer.json").read_text())["certification"]["improved_over_reference"]
    assert rc == (0 if certified else 3), "".join(lines[-20:])     # the CI gate: 3 = ran, but not certified
    assert not {m.group(1) for m in map(re.compile(STAGE_DONE).search, lines) if m} & before
    for f in ("answer.json", "summary.md"):
        assert (out / f).read_bytes() == (baseline / f).read_bytes(), f
    assert_no_partial_output(out, baseline)
    assert not (out / ".staging").exists() and not list(out.rglob("*.tmp"))
    assert not (out / ".swap").exists(), "the completing run left its swap marked"
    print(f"{len(KILL_POINTS)} kills and the completing run: {time.time() - t0:.0f}s")
