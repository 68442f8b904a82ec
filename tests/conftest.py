import fcntl
import json
import os
import shutil

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs pytest -n JOBS (pytest-xdist): each worker, and every command it starts, gets one thread.
    # Two 2-thread torch processes on two cores ran ~50x slower than one (OpenMP threads spin-wait on each other).
    for _k in ("RLHF_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_k, "1")

if "RAY_TMPDIR" not in os.environ:
    # Ray keeps a session dir (logs, sockets) of every cluster it starts under /tmp/ray and never removes it: the
    # `--ray local` tests' clusters (this process's and the CLIs' it starts) go to a dir of this process instead,
    # removed when it ends. Short, under /tmp: Ray's socket paths must stay under 107 characters.
    import atexit
    import tempfile
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rlhf-audit-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)

import rlhf  # noqa: F401  (numeric environment before torch computes: rlhf/__init__.py)
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
torch.set_num_threads(int(os.environ.get("RLHF_THREADS", "2")))

import pytest


def _built_once(tmp_path_factory, name: str, make):
    """make(dir) once per test run. Under pytest-xdist the workers share the run's base temp dir: the first to get
    here builds while the others wait on a lock file, then all read the same dir. `make` must be deterministic
    and the dir read-only afterwards."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    out, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            make(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """One tiny world (seed 0) per test run, shared by the world and audit end-to-end tests."""
    from world.build import build
    from world.config import preset
    return _built_once(tmp_path_factory, "tiny-world", lambda out: build(out, preset("tiny", 0), quiet=True))


@pytest.fixture(scope="session")
def certified_tiny(tiny_world, tmp_path_factory):
    """One uninterrupted `python -m audit.certify` run on the tiny world (small preset, seed 0), shared: the
    end-to-end tests read it, the crash test compares its interrupted and resumed runs with it.
    Returns (OUT, {"stdout", "stderr"} of that run)."""
    from tests.helpers import run_certify

    def make(out):
        r = run_certify(tiny_world / "task", out)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        (out.parent / f"{out.name}.log.json").write_text(json.dumps({"stdout": r.stdout, "stderr": r.stderr}))

    out = _built_once(tmp_path_factory, "certify", make)
    return out, json.loads((out.parent / f"{out.name}.log.json").read_text())


# Long tests that need the tiny world, in the order they should start once it exists (measured by
# `make test` with --durations: the wheel installed and audited ~106 s, the diagnosis bench ~56-90 s, the crash chain
# ~40-70 s, a stress round ~30-60 s a worker).
_LONG_FIRST = ("test_packaging.py", "test_diagnosis_bench.py", "test_crash_safety.py", "test_stress.py", "test_world.py")


def pytest_collection_modifyitems(session, config, items):
    """Order the run for pytest-xdist's workers (they take tests round robin, in this order): first one test
    that needs the shared certify run, so one worker builds the tiny world and certifies it at once; then every
    test that needs no world, which the other workers run meanwhile instead of waiting on the build's lock; then
    the tests that need the world, the long ones first so that none of them starts last. Same order in every
    worker (a pure function of the collected items)."""
    def needs(item, name):
        return name in getattr(item, "fixturenames", ())
    first = next((i for i in items if needs(i, "certified_tiny")), None)

    def key(pair):
        k, item = pair
        if item is first:
            return (0, 0, k)
        if not needs(item, "tiny_world"):
            return (1, 0, k)
        mod = item.path.name
        return (2, _LONG_FIRST.index(mod) if mod in _LONG_FIRST else len(_LONG_FIRST), k)
    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
