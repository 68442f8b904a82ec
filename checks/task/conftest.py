"""The task door's claims (SPEC §3): each test is a claim; checks/evidence_plugin.py records them into evidence.json
(loaded by checks/conftest.py, with the provenance both doors record).

    python -m pytest checks/task --task TASK --seed 0 --evidence OUT/evidence.json --audit-out OUT [--audit-preset small]

The session fixture `audit` does the expensive shared work once, cached on disk under OUT/.cache keyed by the
task's input hashes and the audit config (a re-run after a crash resumes)."""
import dataclasses
import json
from pathlib import Path

import pytest

from audit.core.evidence import hash_inputs
from audit.task.session import AuditConfig, AuditSession
from audit.task.task_dir import run_dirs
from rlhf.vocab import FAMILIES


def pytest_addoption(parser):
    g = parser.getgroup("audit")
    g.addoption("--audit-out", default="out/certify", help="output dir (cache, shipped checkpoint)")
    g.addoption("--audit-preset", default="full", choices=["full", "small"], help="small: tiny worlds and tests")
    g.addoption("--stress-examples", type=int, default=None, help="corrupted stress batches besides the clean one "
                "(default: the preset's)")
    g.addoption("--stress-ray", default=None, metavar="ADDRESS", help="run the stress batches on this Ray cluster "
                "('local': a Ray started here; default: stacked, in this process)")


def pytest_collection_modifyitems(items):
    # task.well_formed first: a malformed task is named before anything expensive starts (stable sort)
    items.sort(key=lambda item: item.get_closest_marker("claim") is None
               or item.get_closest_marker("claim").args[:1] != ("task.well_formed",))


def _task_runs(config):
    task = config.getoption("--task")
    return [p.name for p in run_dirs(task)] if task else []     # the runs audit.task.task_dir validated, no other


def pytest_generate_tests(metafunc):
    # runs are discovered from the task, so the claim ids name them: run.passes_release_rule[fourfam-s800]
    if "run_name" in metafunc.fixturenames:
        metafunc.parametrize("run_name", _task_runs(metafunc.config))
    if "run_family" in metafunc.fixturenames:
        pairs = [f"{r}-{f}" for r in _task_runs(metafunc.config) for f in FAMILIES]
        metafunc.parametrize("run_family", pairs)
    if "family" in metafunc.fixturenames:
        metafunc.parametrize("family", FAMILIES)


@pytest.fixture(scope="session")
def audit_config(pytestconfig, audit_seed):
    preset = pytestconfig.getoption("--audit-preset")
    cfg = AuditConfig.small(audit_seed) if preset == "small" else AuditConfig().with_seed(audit_seed)
    n = pytestconfig.getoption("--stress-examples")
    if n is not None:
        cfg = dataclasses.replace(cfg, stress=dataclasses.replace(cfg.stress, examples=n))
    ray = pytestconfig.getoption("--stress-ray")
    if ray:
        cfg = dataclasses.replace(cfg, stress=dataclasses.replace(cfg.stress, ray_address=ray))
    return cfg


@pytest.fixture(scope="session")
def audit_out(pytestconfig):
    out = Path(pytestconfig.getoption("--audit-out"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="session")
def audit(task_dir, audit_config, audit_out, evidence_recorder):
    import dataclasses
    evidence_recorder.config.update({"audit_config": json.loads(json.dumps(dataclasses.asdict(audit_config),
                                                                           default=str)),
                                     "release_rule": audit_config.release_rule.describe()})
    return AuditSession(task_dir, audit_config, audit_out / ".cache", hash_inputs(task_dir),
                        staging=audit_out / ".staging")
