"""The samples front door's claims (SPEC §4): questions 2, 5 and 6 of SPEC §3 on a samples table, recorded by the
same evidence plugin as the task door's (checks/evidence_plugin.py, loaded by checks/conftest.py).

    python -m pytest checks/samples --samples-settings SETTINGS.json --evidence OUT/evidence.json

SETTINGS.json is what `python -m audit.samples` writes (audit/samples/certify.py: settings()). The table is validated when
the settings are read; a table that does not validate makes every claim an error (audit.samples refuses it
before pytest starts)."""
import json

import pytest

SETTINGS_KEY = pytest.StashKey[dict]()
AUDIT_KEY = pytest.StashKey[object]()


def pytest_addoption(parser):
    parser.getgroup("audit").addoption("--samples-settings", default=None, metavar="JSON",
                                       help="settings of a samples audit (written by python -m audit.samples)")
    parser.getgroup("audit").addoption("--samples-table", default=None, metavar="ARROW",
                                       help="the table python -m audit.samples already read and validated "
                                            "(audit.samples.table.save); without it the inputs are read again")


def _settings(config) -> dict:
    if SETTINGS_KEY not in config.stash:
        path = config.getoption("--samples-settings")
        if not path:
            raise pytest.UsageError("checks/samples needs --samples-settings JSON (python -m audit.samples writes it)")
        with open(path) as fh:
            config.stash[SETTINGS_KEY] = json.load(fh)
    return config.stash[SETTINGS_KEY]


def samples_audit_of(config):
    if AUDIT_KEY not in config.stash:
        from audit.samples.session import open_audit
        config.stash[AUDIT_KEY] = open_audit(_settings(config), config.getoption("--samples-table"))
    return config.stash[AUDIT_KEY]


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """The evidence's meta: the two input files' hashes and the settings (after the plugin's own meta)."""
    from audit.samples.session import input_hashes
    from audit.checks.evidence_plugin import recorder_of
    config = session.config
    s = _settings(config)
    rec = recorder_of(config)
    rec.meta.update({"task_dir": None, "samples": s["samples"], "gold": s["gold"],
                     "input_hashes": input_hashes(s)})
    rec.config.update({"samples_settings": s})


def pytest_collection_finish(session):
    """The evidence's meta: what the report says about the table beside the claims (superseded rows left out,
    rows without a proxy, each run's generation settings: SamplesAudit.table_facts)."""
    from audit.checks.evidence_plugin import recorder_of
    try:
        facts = samples_audit_of(session.config).table_facts()
        recorder_of(session.config).meta["table"] = facts
    except Exception:  # noqa: BLE001 - a table that does not load errs every claim; the claims report it
        return


def pytest_generate_tests(metafunc):
    # runs, families and cells come from the table, so the claim ids name them: run.passes_release_rule[ppo-a]
    names = {"sample_family", "sample_cell", "candidate_run", "candidate_cell"} & set(metafunc.fixturenames)
    if not names:
        return
    audit = samples_audit_of(metafunc.config)
    t = audit.t
    if "sample_family" in names:
        metafunc.parametrize("sample_family", t.families)
    if "candidate_run" in names:
        metafunc.parametrize("candidate_run", [r for r in t.runs if r != audit.reference])
    if "candidate_cell" in names:
        cells = [(r, f) for r in t.runs if r != audit.reference for f in t.families]
        metafunc.parametrize("candidate_cell", cells, ids=[f"{r}-{f}" for r, f in cells])
    if "sample_cell" in names:
        metafunc.parametrize("sample_cell", [(r, f) for r in t.runs for f in t.families],
                             ids=[f"{r}-{f}" for r in t.runs for f in t.families])


@pytest.fixture(scope="session")
def samples_audit(pytestconfig):
    return samples_audit_of(pytestconfig)
