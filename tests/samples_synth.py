"""Synthetic samples tables with a known truth, for the samples door's tests (no world, no torch)."""
import json
from pathlib import Path

import numpy as np

FAMS = ("f1", "f2", "f3")


def make_table(seed=0, runs=None, n=200, n_gold=40, slope=None, noise=0.05, proxy_noise=0.1, quality=None):
    """rows, gold rows, truth {run: {family: mean}}. quality[run][family] = the cell's true mean; the proxy is
    slope[family] * true + noise (a negative slope = an inverted, gamed proxy)."""
    rng = np.random.default_rng(seed)
    runs = runs or ["reference", "good", "bad"]
    quality = quality or {"reference": {f: 0.3 for f in FAMS}, "good": {f: 0.5 for f in FAMS},
                          "bad": {"f1": 0.5, "f2": 0.5, "f3": 0.1}}
    slope = slope or {f: 1.0 for f in FAMS}
    rows, gold = [], []
    for r in runs:
        for f in FAMS:
            q = np.clip(rng.normal(quality[r][f], 0.15, n), 0, 1)
            proxy = slope[f] * q + rng.normal(0, proxy_noise, n)
            lab = rng.choice(n, n_gold, replace=False)
            for i in range(n):
                sid = f"{r}/{f}/{i}"
                rows.append({"sample_id": sid, "run": r, "family": f, "prompt_id": f"p{f}{i}",
                             "completion": " ".join(rng.choice(["a", "b", "c", "tok"], 4)),
                             "proxy_reward": round(float(proxy[i]), 6), "step": 0})
            gold += [{"sample_id": f"{r}/{f}/{i}", "gold": round(float(q[i] + rng.normal(0, noise)), 6)} for i in lab]
    return rows, gold, quality


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(tmp_path, capsys, s, g, *extra):
    """`python -m audit.samples` on samples file s and gold file g, expected to refuse: exit 2, OUT not created;
    returns the error lines."""
    from audit.samples.certify import main as samples_main
    out = tmp_path / "out"
    rc = samples_main(["--samples", str(s), "--gold", str(g), "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists(), err
    return [line for line in err.splitlines() if line.startswith("error: ")]


def at_the_pinned(package: str) -> bool:
    """Whether `package` is installed at constraints.txt's version: a test that asserts what a hypothesis draw
    turned out to be (its corruptions, not the seeding) holds at that version; other releases draw other
    examples for the same seed (docs/install.md)."""
    from importlib.metadata import version
    pins = dict(line.split("==", 1) for line in (Path(__file__).resolve().parents[1] / "constraints.txt")
                .read_text().splitlines() if "==" in line and not line.startswith("#"))
    return version(package) == pins.get(package)
