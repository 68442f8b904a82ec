"""Small shared helpers: threads, seeding, progress bars, hashing, config dataclasses <-> dicts."""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .errors import InputError
from .machine import cpu_model


def setup_torch(threads: int | None = None) -> None:
    """Two cores on these machines: use both for one process unless told otherwise (RLHF_THREADS). The thread
    count is part of what a result depends on (numeric_fingerprint): reductions split their work by it."""
    n = threads or int(os.environ.get("RLHF_THREADS", "2"))
    torch.set_num_threads(n)
    keep_freed_memory()


def numeric_fingerprint() -> dict:
    """What, besides the code, the inputs and the seed, decides the bits of a float result on this machine: the
    torch build, the CPU kernels it dispatched to (ATEN_CPU_CAPABILITY can lower them), the thread count and the
    MKL settings (rlhf/__init__.py). Two runs with the same fingerprint on one machine give the same bits; a
    resumed stage refuses a snapshot taken under another fingerprint, and the audit's cache keys include it."""
    return {"torch": torch.__version__, "cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            **{k: os.environ.get(k) for k in ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "MKL_DYNAMIC", "OMP_DYNAMIC")}}


def keep_freed_memory(threshold: int = 1 << 30) -> bool:
    """glibc serves every allocation above 128 KB with a fresh mmap and returns it to the OS on free, so each
    RL step page-faults its activations in again (measured: 10% of a step's time). Raise the mmap and trim
    thresholds so freed blocks stay in the heap. No-op where glibc's mallopt is not available."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) and bool(libc.mallopt(M_TRIM_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


def progress(iterable=None, total=None, desc: str = "", quiet: bool = False, file=None):
    """A tqdm bar; `file` lets a caller inside pytest's capture write to the real terminal (sys.__stderr__)."""
    return tqdm(iterable, total=total, desc=desc, disable=quiet, leave=False, dynamic_ncols=True, mininterval=1.0,
                file=file)


def file_sha256(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while b := fh.read(chunk):
            h.update(b)
    return h.hexdigest()


def dir_sha256(directory) -> str:
    """Hash of every file under a directory (names and contents), for evidence and cache keys."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(directory)).encode())
            h.update(file_sha256(p).encode())
    return h.hexdigest()


def config_from_dict(cls, d: dict, where: str):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise InputError(f"{where}: unknown config keys {unknown}; known: {sorted(names)}")
    return cls(**d)


def parse_override(items) -> dict:
    """--override key=json_value (a bare word that is not JSON is taken as a string)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"--override {item!r}: expected key=json_value")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out
