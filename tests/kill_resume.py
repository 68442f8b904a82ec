"""Kill `python -m audit.certify` at drawn moments and check that every resumed run renders the bytes an
uninterrupted run renders (issue 17: a resumed run equals an uninterrupted one bit for bit).

    python -m tests.kill_resume --task TASK --out DIR [--trials 20 --training 8 --seed 0 --preset small]

First one uninterrupted run (DIR/baseline) is timed: its output lines split the run into windows, each named by
what is computed in it (the diagnostic's RL, a stress batch's RM training and RL runs, the own policy's RL
training, rubric recovery, the per-run estimates, rendering). Then each trial runs certify into a fresh OUT,
SIGKILLs it at a moment drawn by a seeded generator -- a window, then a uniform delay within it, measured from
the line that opens it -- and runs certify again to completion. `--training` of the trials are drawn inside the
own policy's training (between its resumable snapshots, the case that needs every RNG stream restored); the rest
uniformly over the whole run, so they land where the time goes (mostly training: RL and RM fits). After every
kill: no orphan child, no half-written output (tests/test_crash_safety.assert_no_partial_output); after every
resume: answer.json and summary.md byte-identical to the baseline's. Prints one line per trial and the total
N/N; exit 1 if any trial differs. Timing decides where a kill lands, so the same seed kills at the same moments,
not always at the same instruction; each trial prints what it interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from tests.helpers import certify_cmd
from tests.test_crash_safety import _children, _gone, assert_no_partial_output

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"\[(audit|certify)\] (.*)")
OWN_START, OWN_END = r"\[audit\] own policy: training", r"\[audit\] own-train: "


def _reader(stream, q):
    """Lines of certify's output (pytest's child writes there too) with the time they arrived; tqdm's \\r
    updates count as lines, so a window can open on a progress update as well."""
    buf = ""
    for chunk in iter(lambda: stream.read(1), ""):
        if chunk in "\r\n":
            if buf.strip():
                q.put((time.perf_counter(), buf))
            buf = ""
        else:
            buf += chunk
    q.put((time.perf_counter(), None))


def run(task, out, preset: str, trigger: str | None = None, delay: float = 0.0):
    """certify into `out`; with trigger, SIGKILL it `delay` seconds after the first line matching trigger (at
    once if it already ended). Returns (return code, [(t, line)], killed, what was under way, orphans)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(certify_cmd(task, out, *([] if preset == "small" else ["--preset", preset])),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(p.stdout, q), daemon=True).start()
    lines, deadline, killed, orphans = [], None, False, []
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
        try:
            t, line = q.get(timeout=timeout)
        except queue.Empty:
            t, line = None, "kill"
        if line is None:
            break
        if line == "kill" and not killed:
            kids = _children(p.pid)
            os.kill(p.pid, signal.SIGKILL)
            killed, end = True, time.time() + 10
            while not all(_gone(k) for k in kids) and time.time() < end:
                time.sleep(0.05)
            orphans = [k for k in kids if not _gone(k)]
            deadline = None
            continue
        lines.append((t - t0, line))
        if trigger and deadline is None and not killed and re.search(trigger, line):
            deadline = time.perf_counter() + delay
    rc = p.wait()
    marks = [l for _, l in lines if MARK.search(l)]
    return rc, lines, killed, (marks[-1] if marks else "start-up"), orphans


def trigger(line: str) -> str:
    """A regex for a marker line of another run: its text from '[audit]'/'[certify]' on, with the durations and
    paths it prints (which differ from run to run) left open."""
    text = MARK.search(line).group(0).strip()
    parts = re.split(r"\d+(?:\.\d+)?s\b|/\S+", text)
    return r"[\d.]+s|/\S+".join(map(re.escape, parts)).replace(r"[\d.]+s|/\S+", r"(?:[\d.]+s|/\S+)")


def windows(lines) -> list[dict]:
    """The baseline's output cut at its [audit]/[certify] lines: each window opens with a marker line and lasts
    until the next one; the own policy's training is one window, from its start to its end (its snapshot lines
    fall inside it)."""
    marks = [(t, l) for t, l in lines if MARK.search(l)]
    own_end = next((t for t, l in marks if re.search(OWN_END, l)), None)
    out = []
    for (t, l), (t_next, l_next) in zip(marks, marks[1:]):
        if re.search(OWN_START, l) and own_end is not None:
            t_next = own_end
        elif own_end is not None and out and re.search(OWN_START, out[-1]["opens"]) and t < own_end:
            continue                                      # a snapshot line inside the training window
        out.append({"trigger": trigger(l), "opens": MARK.search(l).group(0).strip()[:70], "seconds": t_next - t})
    return out


def plan(lines, trials: int, training: int, rng) -> list[dict]:
    """`training` kills inside the own policy's training window, the rest uniform in time over the whole run."""
    ws = windows(lines)
    own = next(w for w in ws if re.search(OWN_START, w["opens"]))
    total = sum(w["seconds"] for w in ws)
    out = []
    for i in range(trials):
        if i < training:
            w = own
        else:
            w = ws[int(np.searchsorted(np.cumsum([x["seconds"] for x in ws]) / total, rng.random()))]
        out.append({**w, "delay": float(rng.uniform(0, w["seconds"]))})
    return [out[i] for i in rng.permutation(trials)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.kill_resume", description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True, help="work dir (baseline/ and one dir per trial)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--training", type=int, default=8, help="trials killed inside the own policy's training")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="small", choices=["small", "full"])
    a = ap.parse_args(argv)
    if not 0 <= a.training <= a.trials:
        ap.error("--training must be between 0 and --trials")
    work = Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    base = work / "baseline"
    rc, lines, _, _, _ = run(a.task, base, a.preset)
    if rc != 0:
        print("\n".join(l for _, l in lines[-20:]), file=sys.stderr)
        return 1
    print(f"baseline: {lines[-1][0]:.0f}s, {len(windows(lines))} windows", flush=True)
    same, rows = 0, []
    draws = plan(lines, a.trials, a.training, rng := np.random.default_rng(a.seed))
    draws += plan(lines, a.trials, 0, rng)            # spares: a draw the run outpaces (it ended first) is redrawn
    missed = 0
    for i, k in enumerate(draws):
        if len(rows) == a.trials:
            break
        out = work / f"trial{i:02d}"
        t = time.perf_counter()
        rc, klines, killed, under_way, orphans = run(a.task, out, a.preset, k["trigger"], k["delay"])
        if not killed:
            missed += 1
            print(f"draw {i:2d}: the run ended ({rc}) before {k['delay']:.2f}s after '{k['opens'][:45]}': redrawn")
            shutil.rmtree(out, ignore_errors=True)
            continue
        problems = [f"children outlived certify: {orphans}"] if orphans else []
        try:
            assert_no_partial_output(out, base)
        except AssertionError as e:
            problems.append(f"after the kill: {e}")
        rc2, _, _, _, _ = run(a.task, out, a.preset)
        for f in ("answer.json", "summary.md"):
            if not (out / f).is_file() or (out / f).read_bytes() != (base / f).read_bytes():
                problems.append(f"{f} differs from the uninterrupted run's")
        ok = not problems and rc2 == 0
        same += ok
        rows.append({"draw": i, "window": k["opens"], "delay_s": round(k["delay"], 2), "last_line": under_way,
                     "identical": ok, "problems": problems})
        print(f"trial {len(rows):2d}: killed {k['delay']:5.2f}s after '{k['opens'][:45]}' (last line "
              f"'{under_way[:50]}'); resumed: {'identical' if ok else '; '.join(problems) or f'exit {rc2}'} "
              f"({time.perf_counter() - t:.0f}s)", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    print(f"{same}/{len(rows)} resumed answers byte-identical to the uninterrupted run's "
          f"({missed} drawn moments came after the run ended and were redrawn)")
    (work / "kill_resume.json").write_text(json.dumps({"trials": rows, "identical": same, "redrawn": missed},
                                                      indent=2))
    return 0 if same == len(rows) == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
