"""rlhf: a tiny pure-torch RLHF pipeline (policy, reward model, SFT, RM training, KL-regularised REINFORCE,
best-of-n, dev evaluation). See docs/task-format.md for the vocabulary, record formats and checkpoint format.

Importing this package fixes how the math libraries under torch may vary from run to run on one machine, before
any of them computes (MKL reads these at its first call, so this works even after `import torch`):

* MKL_CBWR=AUTO,STRICT: oneMKL's conditional numerical reproducibility. Without it MKL gives no run-to-run
  guarantee: its results may depend on memory alignment (which heap state and address-space randomisation
  change between two processes of the same program) and on the number of threads it actually uses (measured
  here: a weight-gradient-shaped sgemm, 96x28672 @ 28672x192, gives other bits on 1 thread than on 2). Strict
  CNR makes ?gemm independent of both on one machine. It does not make two *CPUs* agree: AVX2 and AVX-512 paths
  still round differently, which is why the tests compare trained weights by meaning, never by bits.
* MKL_DYNAMIC=FALSE, OMP_DYNAMIC=FALSE: the thread count set by rlhf.common.setup_torch is the one used, never
  lowered at run time by the runtime's own heuristics (e.g. under load).
A value already in the environment is respected (setdefault), and rlhf.common.numeric_fingerprint() records
what was in force with every result.
"""
import os as _os

NUMERIC_ENV = {"MKL_CBWR": "AUTO,STRICT", "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}
for _k, _v in NUMERIC_ENV.items():
    _os.environ.setdefault(_k, _v)
