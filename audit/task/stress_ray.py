"""The stress batches on a Ray cluster: `python -m audit.certify --ray ADDRESS` (or "local": a Ray started here).

Each corrupted or clean batch is one Ray task running the one-batch path (audit.task.stress_batch.batch_outcome: its RM, the
hazard run against it, the diagnostic), and the hazard run against the recovered rubric is one more; a cluster's
CPUs run batches side by side, where the local default stacks them into one model on this machine's cores. A task
needs only the reference policy and the prompt pool: they travel as one tar (a few MB) in Ray's object store, and
the audit's own packages as runtime_env py_modules, so the cluster needs no shared filesystem, only the pinned
Python packages (pyproject.toml). What comes back (the RM directory, the gains, the diagnostic) is written into the
local stress cache exactly as the local path writes it, each file atomically, and the label-side inputs (the RM
against the task's gold rows) are computed here: the gold never leaves this machine. A batch whose result is cached
is not sent again, so a re-run after a crash sends only what is missing.

Each task runs on one thread (num_cpus=1). A batch's numbers depend on its spec and the seed, not on which worker
ran it; a worker under other float kernels gives other bits, the same decisions (docs/determinism.md), and each
result records the worker's numeric fingerprint.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from audit.core.ray_cluster import check_reachable, connect  # noqa: F401 - audit.certify checks the address here
from rlhf.atomic import atomic_write_text



def _tar(paths: dict) -> bytes:
    """{name in the archive: path} -> tar bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, p in paths.items():
            tf.add(str(p), arcname=name)
    return buf.getvalue()


def _untar(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(dest, filter="data")


def _task_payload(task_root: Path) -> bytes:
    """What a batch needs of the task: the reference policy and the prompt pool (never gold, QA or runs)."""
    return _tar({"policy": task_root / "policy", "data/prompts_train.jsonl": task_root / "data" / "prompts_train.jsonl"})


@contextlib.contextmanager
def _unpacked(payload: bytes):
    """On the worker: one thread (num_cpus=1), the task's payload in a temp dir. Yields (that dir, the task root)."""
    from rlhf.common import setup_torch
    setup_torch(1)
    with tempfile.TemporaryDirectory(prefix="rlhf-stress-") as tmp:
        _untar(payload, Path(tmp) / "task")
        yield Path(tmp), Path(tmp) / "task"


def _remote_batch(payload: bytes, rubrics: dict, spec: dict, cfg, diag_cfg) -> dict:
    from rlhf.common import numeric_fingerprint
    from .stress_batch import batch_outcome
    with _unpacked(payload) as (work, root):
        rm_dir, gain, d = batch_outcome(root, rubrics, spec, cfg, diag_cfg, work)
        return {"rm": _tar({rm_dir.name: rm_dir}), "gain": gain, "diagnostic": d, "numeric": numeric_fingerprint()}


def _remote_rubric_gain(payload: bytes, rubrics: dict, cfg) -> dict:
    from .stress_batch import rl_gains
    with _unpacked(payload) as (_, root):
        return rl_gains(root, {f: r.posterior for f, r in rubrics.items()}, cfg, None)


def run_on_ray(task, rubrics: dict, specs: list, cfg, diag_cfg, work: Path, say=print) -> None:
    """Every batch of `specs` not yet in `work`, and the rubric run if missing, as Ray tasks on cfg.ray_address;
    writes each batch's RM dir and result, and rubric_gain.json, as audit.task.stress's local paths do."""
    from .stress_batch import _result, spec_key
    keys = [spec_key(s) for s in specs]
    todo = [(k, s) for k, s in zip(keys, specs) if not (work / f"{k}.json").exists()]
    rubric_file = work / "rubric_gain.json"
    if not todo and rubric_file.exists():
        return
    ray = connect(cfg.ray_address)
    try:
        payload = ray.put(_task_payload(task.root))
        batch = ray.remote(num_cpus=1)(_remote_batch)
        refs = {batch.remote(payload, rubrics, s, cfg, diag_cfg): (k, s) for k, s in todo}
        rubric_ref = None if rubric_file.exists() else ray.remote(num_cpus=1)(_remote_rubric_gain).remote(payload, rubrics, cfg)
        if rubric_ref is not None:
            rubric_gain = ray.get(rubric_ref)
            atomic_write_text(rubric_file, json.dumps(rubric_gain))
        rubric_gain = json.loads(rubric_file.read_text())
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            out = ray.get(ready[0])
            k, spec = refs[ready[0]]
            rm_dir = work / f"rm-{k}"
            if not (rm_dir / "train.jsonl").exists():       # unpacked aside and renamed: never half an RM
                part = work / f".rm-{k}.partial"
                shutil.rmtree(part, ignore_errors=True)
                shutil.rmtree(rm_dir, ignore_errors=True)
                _untar(out["rm"], part)
                (part / rm_dir.name).rename(rm_dir)
                shutil.rmtree(part)
            res = {**_result(spec, out["gain"], rubric_gain, out["diagnostic"], rm_dir, task, cfg),
                   "numeric": out["numeric"]}
            atomic_write_text(work / f"{k}.json", json.dumps(res, indent=2))
            say(f"stress batch {len(refs) - len(pending)}/{len(refs)} done on Ray ({cfg.ray_address})")
    finally:
        ray.shutdown()
