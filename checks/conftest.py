"""What both doors' claims share: the evidence plugin (checks/evidence_plugin.py records every claim into
evidence.json) and the provenance it records. Each door's own options and fixtures live beside its claims:
checks/task/conftest.py (python -m audit.certify) and checks/samples/conftest.py (python -m audit.samples); pytest
loads only the conftest of the door it is pointed at, so neither door sees the other's options."""
from pathlib import Path

from audit.core.evidence import code_hash, package_versions

pytest_plugins = ["audit.checks.evidence_plugin"]


def pytest_addoption(parser):
    parser.getgroup("audit").addoption("--audit-command", default=None, help="the command line that started the "
                                       "audit (audit.certify passes its own), recorded in the evidence")


def pytest_ignore_collect(collection_path, config):
    # checks/samples/ holds the samples door's claims (python -m audit.samples): never part of a task's audit
    if collection_path == Path(__file__).parent / "samples" and not config.getoption("--samples-settings", None):
        return True
    return None


def pytest_sessionstart(session):
    """Provenance in the evidence (meta.config): what ran, with which code and which packages."""
    from audit.checks.evidence_plugin import recorder_of
    config = session.config
    if config.getoption("--samples-settings", None):
        # the samples door's statistics are numpy's: starting torch would cost seconds of every samples audit
        from rlhf.machine import numpy_fingerprint
        numeric = numpy_fingerprint()
    else:
        from rlhf.common import numeric_fingerprint, setup_torch
        setup_torch()
        numeric = numeric_fingerprint()
    recorder_of(config).config.update({"command": config.getoption("--audit-command"), "code_sha256": code_hash(),
                                       "package_versions": package_versions(), "numeric": numeric})
