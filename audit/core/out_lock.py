"""One lock per output directory (OUT), for every command that writes one (audit.certify, audit.samples,
audit.render), and a consistent view of OUT for the commands that read it (audit.render's --evidence,
audit.compare).

Two flocks (Linux flock(2): held by an open file, released by the kernel when the holder dies, kill -9 included;
nothing to clean up after a crash):

* the run lock: LOCK_EX | LOCK_NB on the file OUT/.lock, taken right after the arguments are checked and held
  until the command exits. A second run finds it taken and stops at once (OutInUse: exit 2, one line naming the
  holder's pid, host, start time and command, which the holder writes into OUT/.lock after taking the lock). The
  file is never deleted by a run that held the lock: it is the lock's inode, not a pid file (a stale one is
  harmless). The fd is not inherited: Python opens it close-on-exec, so the claims' pytest child (which dies with
  its parent: audit/core/claims_runner.py) never keeps the lock alive after its parent is gone.
* the swap lock: flock on the directory OUT itself. A writer holds LOCK_EX while it swaps its report in (the
  renders rename answer.json, summary.md, evidence.json, figures/ and claims.log in one by one); readers hold
  LOCK_SH while they read (`reading`), so they see every file from the same run. A writer killed in the middle of
  a swap leaves OUT/.swap behind; readers refuse such an OUT (exit 2, naming it) until a run completes its swap.

Local filesystems: flock on NFS is emulated with byte-range locks, and a holder on another host is not seen."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rlhf.errors import InputError

LOCK = ".lock"          # the run lock's file, in OUT: kept (only a refused run removes the one it created)
SWAP = ".swap"          # present while (or after a crash during) a swap of the report into OUT
READ_TIMEOUT = 120.0    # a reader waits this long for a swap in progress (a swap takes seconds: figures)


class OutInUse(InputError):
    """OUT is held by another run (its pid, host, start time and command in the message)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # another user's process
        return True
    return True


def _holder(path: Path, wait: float = 1.0) -> str:
    """Who holds the lock, from what it wrote into `path` (read-only: the refused run touches nothing)."""
    deadline = time.monotonic() + wait
    while True:        # the holder writes its line right after taking the lock: give it a moment
        try:
            h = json.loads(path.read_text())
            if h["host"] == socket.gethostname() and not _alive(h["pid"]):
                raise ValueError("the line of an earlier holder, not yet replaced")
            return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['command']}"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return f"a run that did not record itself in {path}"
            time.sleep(0.05)


class OutLock:
    """The run lock on one OUT, held until release() (or the process's end)."""

    def __init__(self, out: Path, fd: int, created: list[Path], made_file: bool, previous: bytes):
        self.out, self.fd, self.created, self.made_file, self.previous = out, fd, created, made_file, previous

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)     # closing the only fd of the open file releases the flock
            self.fd = None

    def undo(self) -> None:
        """Release, and remove what acquire() created (the lock file; OUT and its missing parents, when they hold
        nothing else), and put back the line an OUT/.lock held before: a run refused after taking the lock leaves
        OUT's bytes as it found them. Unlinking the file while holding it is safe: acquire() re-checks that the
        file it locked is still the one at OUT/.lock."""
        if self.fd is not None:
            try:
                if self.made_file:
                    (self.out / LOCK).unlink()
                else:
                    os.ftruncate(self.fd, 0)
                    os.pwrite(self.fd, self.previous, 0)
            except OSError:
                pass
        self.release()
        for d in self.created:           # innermost first
            try:
                d.rmdir()
            except OSError:
                break

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def acquire(out, command: str) -> OutLock:
    """Take OUT's run lock, creating OUT if needed; OutInUse (exit 2) naming the holder when another run has it.
    OSError when OUT cannot be created or written."""
    out = Path(out)
    created, p = [], out
    while not p.exists() and p != p.parent:    # OUT and its missing parents, innermost first
        created.append(p)
        p = p.parent
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    made_file = not path.exists()
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutInUse(f"--out {out}: in use by another run ({_holder(path)}); wait for it to end or choose "
                           "another --out") from None
        except OSError:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)      # a refused run that had created OUT removed this file (undo): lock the one now there
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), "command": command}
    previous = os.pread(fd, 1 << 16, 0)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    return OutLock(out, fd, created, made_file, previous)


def run_holding(out, command: str, refuse, run) -> int:
    """A CLI's body under OUT's run lock: run(lock)'s exit status, the lock released after it; OUT in use or not
    writable goes through refuse(lines, out) (exit 2, nothing touched)."""
    try:
        lock = acquire(out, command)
    except OutInUse as e:
        return refuse([str(e)], out)
    except OSError as e:
        return refuse([f"--out {out}: cannot be written ({e.strerror})"], out)
    try:
        return run(lock)
    finally:
        lock.release()


def _dir_fd(out: Path) -> int:
    return os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _visible(out: Path) -> dict:
    """OUT's outputs (not the hidden .lock, .swap, .staging, .cache) and what is in its directories (figures/,
    checkpoint/), each as its inode and mtime: an atomic write (temp file + rename) always makes a new inode."""
    seen = {}
    for e in os.scandir(out):
        if not e.name.startswith("."):
            seen[e.name] = (e.inode(), e.stat(follow_symlinks=False).st_mtime_ns)
            if e.is_dir(follow_symlinks=False):
                seen.update({f"{e.name}/{c.name}": (c.inode(), c.stat(follow_symlinks=False).st_mtime_ns)
                             for c in os.scandir(e.path)})
    return seen


@contextmanager
def swapping(out):
    """Hold OUT's swap lock (exclusive) while the report is swapped in. OUT/.swap marks the swap until it completes;
    an exception leaves it (readers then refuse the mixed OUT) unless nothing in OUT changed (e.g. the answer
    failed its schema before any write)."""
    out = Path(out)
    fd = _dir_fd(out)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)       # waits for the readers of the moment (each holds it for one read)
        before = _visible(out)
        mark = out / SWAP
        mark.write_text(f"a report being swapped in by pid {os.getpid()} on {socket.gethostname()}\n")
        try:
            yield
        except BaseException:
            if _visible(out) == before:
                mark.unlink()
            raise
        mark.unlink()
    finally:
        os.close(fd)


@contextmanager
def reading(out, timeout: float = READ_TIMEOUT):
    """Read OUT's files under its swap lock (shared): no run swaps its report in meanwhile. InputError (exit 2)
    when a run was killed in the middle of a swap (OUT/.swap left) or a swap outlasts `timeout` seconds. An OUT
    that does not exist is the reader's to report (nothing to lock)."""
    out = Path(out)
    try:
        fd = _dir_fd(out)
    except (FileNotFoundError, NotADirectoryError):
        fd = None
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(f"{out}: a run has been swapping its report in for over {timeout:.0f}s "
                                     f"({_holder(out / LOCK)}); try again when it ends") from None
                time.sleep(0.05)
        if (out / SWAP).exists():
            raise InputError(f"{out}: half-swapped: a run was killed while swapping its report in ({out / SWAP} "
                             "is left); run the audit into it again")
        yield
    finally:
        os.close(fd)
