"""Atomic writes (temp file + rename), torch-free so that light tools (the renderer) can use it without importing
torch: a crash never leaves a half-written file and never replaces a good one.

The temp file lives beside the target, or in `tmp_dir` when given (same filesystem, so the rename stays atomic):
`audit.certify` points every write under OUT at OUT/.staging, so that even a kill -9 between writing and
renaming leaves its debris in one hidden directory that the next run empties, never a stray file among the
outputs. Files get the usual permissions (0666 minus the umask), not mkstemp's 0600."""
from __future__ import annotations

import os
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
