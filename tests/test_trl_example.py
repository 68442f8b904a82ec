"""examples/trl end to end: a tiny randomly initialised GPT-2 trained by TRL's GRPOTrainer against a reward
corrupted on two slices, its checkpoints' samples logged by a TRL callback, a random subset labelled with the true
function, then python -m audit.samples. The example exits 0 only when the audit named exactly the corrupted
slices and shipped no checkpoint whose true quality fell on them (examples/trl/run.py). Needs .[trl]:
`make test-trl` (deselected from make test by the `trl` marker)."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.trl
def test_trl_example_names_corrupted_slices(tmp_path):
    r = subprocess.run([sys.executable, "examples/trl/run.py", "--out", str(tmp_path / "trl")], cwd=ROOT,
                       capture_output=True, text=True)
    tail = "\n".join(line for line in r.stdout.splitlines() if line.startswith("[trl]"))
    assert r.returncode == 0, tail + r.stderr[-3000:]
    assert "flagged slices: delta, gamma (corrupted: gamma, delta)" in tail
