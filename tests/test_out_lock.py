"""One lock per OUT (audit/core/out_lock.py): a second run on an OUT in use stops at once with exit 2, naming the
holder and touching nothing; the lock dies with its holder (kill -9 included); readers never read an OUT in the
middle of a swap, and refuse one that a killed run left half-swapped."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit.core import out_lock
from audit.core.out_lock import LOCK, SWAP, OutInUse, acquire, reading, swapping
from rlhf.errors import InputError
from tests.samples_synth import make_table, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
# a process that takes OUT's run lock (or, with a third argument, also swaps a file in and stays in the swap)
HOLDER = """
import sys, time
from pathlib import Path
from audit.core.out_lock import acquire, swapping
lock = acquire(sys.argv[1], 'holder: the test')
if len(sys.argv) > 2:
    with swapping(sys.argv[1]):
        (Path(sys.argv[1]) / 'answer.json').write_text('new')
        print('swapping', flush=True)
        time.sleep(120)
print('held', flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder():
    """start(out, swap=False) -> the Popen of a process holding OUT's lock (after it said so); killed at the end."""
    procs = []

    def start(out: Path, swap: bool = False):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), *(["swap"] if swap else [])], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() in ("held", "swapping")
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _snapshot(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
            for p in sorted(out.rglob("*"))}


def test_second_acquirer_is_refused_naming_the_holder(tmp_path, holder):
    out = tmp_path / "a" / "out"
    p = holder(out)
    before = _snapshot(out)
    t0 = time.time()
    with pytest.raises(OutInUse) as e:
        acquire(out, "second")
    msg = str(e.value)
    assert time.time() - t0 < 2, "the refusal does not wait"
    assert f"pid {p.pid} on {socket.gethostname()}" in msg and "holder: the test" in msg, msg
    assert "started 20" in msg and " UTC" in msg, msg
    assert len(msg.splitlines()) == 1
    assert _snapshot(out) == before, "the refused acquirer touched OUT"


def test_lock_dies_with_its_holder_kill_9(tmp_path, holder):
    out = tmp_path / "out"
    p = holder(out)
    with pytest.raises(OutInUse):
        acquire(out, "second")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with acquire(out, "third") as lock:      # no clean-up needed: the kernel released the flock
        assert lock.fd is not None
        info = json.loads((out / LOCK).read_text())
        assert info["pid"] == os.getpid() and info["command"] == "third"
    assert (out / LOCK).exists(), "the lock file stays (it is not a pid file)"
    acquire(out, "fourth").release()         # released by release() too


def test_undo_leaves_no_trace(tmp_path):
    out = tmp_path / "new" / "deeper" / "out"
    acquire(out, "refused later").undo()
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "answer.json").write_text("old")
    acquire(existing, "refused later").undo()
    assert sorted(p.name for p in existing.iterdir()) == ["answer.json"]
    acquire(existing, "an earlier run").release()
    line = (existing / LOCK).read_bytes()
    acquire(existing, "refused later").undo()
    assert (existing / LOCK).read_bytes() == line, "the earlier holder's line is put back"


def test_readers_wait_for_a_swap_and_refuse_a_half_swapped_out(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "answer.json").write_text("old")
    with swapping(out):
        assert (out / SWAP).exists()
        with pytest.raises(InputError, match="swapping its report in for over"):
            with reading(out, timeout=0.3):
                pass
    assert not (out / SWAP).exists()
    with reading(out):
        pass
    with pytest.raises(RuntimeError):        # failed before writing anything: nothing is mixed, no mark
        with swapping(out):
            raise RuntimeError("schema")
    assert not (out / SWAP).exists()
    with pytest.raises(RuntimeError):        # failed after replacing a file: OUT is mixed, marked
        with swapping(out):
            (out / "summary.md").write_text("new")
            raise RuntimeError("figure")
    with pytest.raises(InputError, match="half-swapped"):
        with reading(out):
            pass
    with swapping(out):                       # a later complete swap clears the mark
        pass
    with reading(out):
        assert (out / "summary.md").read_text() == "new"


def test_swap_killed_midway_is_refused_by_readers(tmp_path, holder):
    out = tmp_path / "out"
    p = holder(out, swap=True)
    with pytest.raises(InputError, match="swapping"):
        with reading(out, timeout=0.3):
            pass
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with pytest.raises(InputError, match="half-swapped"):
        with reading(out, timeout=5):
            pass
    r = subprocess.run([sys.executable, "-m", "audit.compare", str(out / "answer.json"), str(out / "answer.json")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "half-swapped" in r.stderr and str(out / SWAP) in r.stderr, r.stderr


def _busy(r, p, out, before):
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith(("error:", "python -m"))]
    assert len(errors) == 1 and "in use by another run" in errors[0], r.stderr
    assert f"pid {p.pid} on {socket.gethostname()}, started " in errors[0] and "holder: the test" in errors[0]
    assert _snapshot(out) == before, "the refused run touched OUT"


def test_samples_cli_on_an_out_in_use(tmp_path, holder):
    rows, gold, _ = make_table(n=30, n_gold=10)
    s, g = write_jsonl(tmp_path / "s.jsonl", rows), write_jsonl(tmp_path / "g.jsonl", gold)
    out = tmp_path / "out"
    p = holder(out)
    (out / "answer.json").write_text("a previous answer")
    before = _snapshot(out)
    r = subprocess.run([sys.executable, "-m", "audit.samples", "--samples", str(s), "--gold", str(g),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    _busy(r, p, out, before)


def test_certify_cli_on_an_out_in_use_before_the_task_is_read(tmp_path, holder):
    """The lock is taken right after the flags are checked, before the task is validated (or torch imported):
    this task does not exist, and the refusal names the holder, not the task. What it covers: the order of the
    checks and the refusal; a run that gets the lock and then finds a bad task leaves OUT as it was (undo)."""
    out = tmp_path / "out"
    p = holder(out)
    before = _snapshot(out)
    r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(tmp_path / "no_task"), "--out", str(out),
                        "--preset", "small"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    _busy(r, p, out, before)
    assert "no_task" not in r.stderr
    p.kill()
    p.wait()
    fresh = tmp_path / "fresh" / "out"      # lock free: the bad task is refused, and nothing is left behind
    r = subprocess.run([sys.executable, "-m", "audit.certify", "--task", str(tmp_path / "no_task"), "--out", str(fresh),
                        "--preset", "small"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no_task" in r.stderr, r.stderr
    assert not (tmp_path / "fresh").exists()


def test_render_cli_on_an_out_in_use(tmp_path, holder):
    out = tmp_path / "out"
    p = holder(out)
    before = _snapshot(out)
    r = subprocess.run([sys.executable, "-m", "audit.render", "--evidence", str(tmp_path / "evidence.json"),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    _busy(r, p, out, before)


def test_the_line_of_an_earlier_holder_is_not_named(tmp_path):
    """Between taking the lock and writing its line, a holder leaves the previous holder's line in OUT/.lock for
    a moment: a refused run does not name a dead process (it waits for the line, then says it has none)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / LOCK
    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "then", "command": "x"}))
    assert out_lock._holder(path, wait=0.2) == f"a run that did not record itself in {path}"
    path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "now", "command": "y"}))
    assert out_lock._holder(path, wait=0.2) == f"pid {os.getpid()} on {socket.gethostname()}, started now: y"
