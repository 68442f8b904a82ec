import os

import rlhf  # noqa: F401  (numeric environment before torch computes: rlhf/__init__.py)
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
torch.set_num_threads(int(os.environ.get("RLHF_THREADS", "2")))

import pytest


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """One tiny world (seed 0) per test session, shared by the world and audit end-to-end tests."""
    from world.build import build
    from world.config import preset
    out = tmp_path_factory.mktemp("worlds") / "tiny"
    build(out, preset("tiny", 0), quiet=True)
    return out


@pytest.fixture(scope="session")
def certified_tiny(tiny_world, tmp_path_factory):
    """One uninterrupted `python -m audit.certify` run on the tiny world (small preset, seed 0), shared: the
    end-to-end tests read it, the crash test compares its interrupted and resumed runs with it."""
    from tests.helpers import run_certify
    out = tmp_path_factory.mktemp("certify")
    r = run_certify(tiny_world / "task", out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r
