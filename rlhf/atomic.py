"""Atomic writes (temp file + rename), torch-free so that light tools (the renderer) can use it without importing
torch: a crash never leaves a half-written file and never replaces a good one.

The temp file lives beside the target, or in `tmp_dir` when given (same filesystem, so the rename stays atomic):
`audit.certify` points every write under OUT at OUT/.staging, so that even a kill -9 between writing and
renaming leaves its debris in one hidden directory that the next run empties, never a stray file among the
outputs. Files get the usual permissions (0666 minus the umask), not mkstemp's 0600.

A whole output directory (an RL run: run_config.json, log.jsonl, step_N/ checkpoints, the final checkpoint) is
staged the same way by `atomic_dir`: written into a hidden sibling `.NAME.XXXX.partial` and moved onto NAME only
when the job completed, so a failed or interrupted run leaves an existing NAME as it was."""
from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_target(path, tmp_dir=None):
    """Yield a temp path to write `path`'s new content to; on success it is renamed onto `path`, on an exception
    it is removed and `path` keeps its old content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    where = Path(tmp_dir) if tmp_dir is not None else path.parent
    where.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path, data: bytes, tmp_dir=None) -> None:
    with atomic_target(path, tmp_dir) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)


def atomic_write_text(path, text: str, tmp_dir=None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), tmp_dir)


def check_out_dir(path, what: str = "the output directory") -> Path:
    """`path` as an output directory: absent or a directory (following a symlink), else NotADirectoryError naming
    it (bad input: exit 2 under rlhf.errors.run_cli). Call it before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path}: exists and is not a directory; expected {what} (or a path to create it)")
    for parent in path.parents:     # a file where a parent directory should be
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"{parent}: is a file; expected a directory to hold {path}")
            break
    return path


def check_out_file(path, what: str = "the output file") -> Path:
    """`path` as an output file: absent or a regular file, with no file where a parent directory should be. None
    (an optional output not asked for) passes. Call it before any work."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; expected {what}'s path")
    check_out_dir(path.parent, f"the directory of {what}")
    return path


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD = -100
    return fn(AT_FDCWD, os.fsencode(str(a)), AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


@contextmanager
def atomic_dir(path):
    """Yield a fresh hidden sibling directory to write `path`'s new content into. On success it replaces `path`
    as a whole (files of an old `path` that the new content does not have are gone with it: they described the
    old content); on an exception it is removed and `path` keeps its old content. The swap is one atomic
    renameat2(RENAME_EXCHANGE) where the kernel has it; else two renames, and a kill between them leaves the
    old content in the hidden `.NAME.XXXX.old` beside it."""
    path = check_out_dir(path)
    path = path.resolve() if path.is_symlink() else Path(os.path.abspath(path))    # '.', 'a/..': a name, a parent
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial"))
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _swap_in(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)     # e.g. `path` a mount point: it keeps its old content
        raise


def _swap_in(tmp: Path, path: Path) -> None:
    if not path.exists():
        os.rename(tmp, path)
        return
    if _exchange(tmp, path):
        shutil.rmtree(tmp, ignore_errors=True)     # now the old content
        return
    old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
    os.rename(path, old / "x")
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
