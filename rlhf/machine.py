"""What machine a result was computed on, without importing torch (the samples door never needs it)."""
from __future__ import annotations

import os


def cpu_model() -> str:
    """The CPU's model name (MKL picks its kernels by CPU, not only by instruction set); '' where unknown."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor()


def numpy_fingerprint() -> dict:
    """What, besides the code, the inputs and the seed, decides the bits of a numpy-only result (the samples door):
    numpy's version, the CPU and the thread settings of its BLAS."""
    import numpy as np
    return {"numpy": np.__version__, "cpu": cpu_model(),
            **{k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                              "MKL_CBWR")}}
