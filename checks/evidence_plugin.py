"""pytest plugin: every audit check becomes a claim in evidence.json (format: audit/core/evidence.py).

Loaded from checks/conftest.py (``pytest_plugins = ["audit.checks.evidence_plugin"]``) or with
``-p audit.checks.evidence_plugin``. Run the audit as

    python -m pytest checks/task --task TASK_DIR --seed 0 --evidence out/evidence.json

Claim ids are explicit: the claim name comes from ``@pytest.mark.claim("rm.agrees_with_experts")`` on the test and
the param from the parametrize id (the callspec id), so ``test_rm_agrees_with_experts[dune]`` becomes
``rm.agrees_with_experts[dune]``. Without the marker the name is derived from the file and the function
(checks/task/test_rm.py::test_rm_agrees_with_experts -> "rm.agrees_with_experts"; a function that does not repeat the
file's prefix gets it prepended: test_rm.py::test_scale -> "rm.scale").

Fixtures:
  ``evidence``           function-scoped, bound to the test's claim id: ``evidence.record(estimate=..., ci95=...,
                         method=..., n_resamples=..., seed=..., thresholds={...}, details={...}, inputs=[...])``
                         or ``evidence.record_result(stats_result, thresholds=..., details=...)``. Call it before
                         asserting, so a failing claim keeps its numbers.
  ``evidence_recorder``  the session's EvidenceRecorder (``.config`` goes into meta.config).
  ``task_dir``           Path of --task (an error for every check that uses it when --task is absent).
  ``audit_seed``         int of --seed.
(A conftest fixture with the same name overrides these.)

Status of a claim, from the test's reports:
  call passed                                   -> "pass"  (also a non-strict XPASS)
  AssertionError or pytest.fail in the call     -> "fail"  (also XFAIL and strict XPASS: the claim does not hold)
  any other exception in the call               -> "error"
  setup error / teardown error after a pass     -> "error"
  skipped (mark or pytest.skip, in setup or call) -> "error" with message "skipped: <reason>". Chosen over
      leaving the claim out so that a check that could not run is visible in evidence and counted as not passed;
      the renderer never certifies from it either way.
Tests that never call ``evidence.record`` still get a claim with their status. Evidence is written at session end
only when --evidence is given (atomically); input hashes are computed at session start only in that case.
"""
from __future__ import annotations

import platform
from pathlib import Path

import pytest

from audit.core.evidence import BoundEvidence, EvidenceRecorder, hash_inputs, make_claim_id, utc_now

RECORDER_KEY = pytest.StashKey[EvidenceRecorder]()
_MAX_MESSAGE = 2000


def pytest_addoption(parser):
    group = parser.getgroup("evidence", "audit evidence (evidence.json)")
    group.addoption("--evidence", action="store", default=None, metavar="PATH",
                    help="write the claims of this session to PATH (evidence.json)")
    group.addoption("--task", action="store", default=None, metavar="DIR",
                    help="task directory the checks audit (hashed into the evidence meta)")
    group.addoption("--seed", action="store", type=int, default=0, metavar="N",
                    help="seed for the checks' bootstraps (default 0)")


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(name): the evidence claim name this check establishes")
    config.stash[RECORDER_KEY] = EvidenceRecorder()


def recorder_of(config) -> EvidenceRecorder:
    return config.stash[RECORDER_KEY]


def claim_id_for(item) -> str:
    marker = item.get_closest_marker("claim")
    if marker is not None and marker.args:
        name = str(marker.args[0])
    else:
        stem = Path(str(item.path)).stem
        stem = stem[5:] if stem.startswith("test_") else stem
        func = getattr(item, "originalname", None) or item.name.split("[")[0]
        func = func[5:] if func.startswith("test_") else func
        name = f"{stem}.{func[len(stem) + 1:]}" if func.startswith(stem + "_") else f"{stem}.{func}"
    callspec = getattr(item, "callspec", None)
    return make_claim_id(name, callspec.id if callspec is not None else None)


def _short(text: str) -> str:
    text = str(text).strip()
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


def _skip_reason(report) -> str:
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        reason = lr[2]
    else:
        reason = str(lr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def _outcome(call, report) -> tuple[str | None, str]:
    """(status, message) from one phase's report; status None = nothing to record for this phase."""
    when = report.when
    wasxfail = getattr(report, "wasxfail", None)
    if report.skipped:
        if wasxfail is not None:
            return "fail", _short(f"xfail: {wasxfail}" if wasxfail else "xfail")
        return "error", _short(f"skipped: {_skip_reason(report)}")
    if when == "setup":
        if report.failed:
            exc = call.excinfo.exconly() if call.excinfo is not None else str(report.longrepr)
            return "error", _short(f"setup error: {exc}")
        return None, ""
    if when == "call":
        if report.passed:
            return "pass", ""
        if call.excinfo is None:                      # strict XPASS
            return "fail", _short(str(report.longrepr))
        if call.excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
            return "fail", _short(call.excinfo.exconly())
        return "error", _short(call.excinfo.exconly())
    # teardown
    if report.failed:
        exc = call.excinfo.exconly() if call.excinfo is not None else str(report.longrepr)
        return "teardown_error", _short(f"teardown error: {exc}")
    return None, ""


def pytest_collection_modifyitems(session, config, items):
    """Each test's claim id as a property of its test case: a `--junitxml` report (a CI dashboard) names the claims."""
    for item in items:
        item.user_properties.append(("claim", claim_id_for(item)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    rec = recorder_of(item.config)
    cid = claim_id_for(item)
    status, message = _outcome(call, report)
    if status == "teardown_error":
        if rec.status(cid) in (None, "pass"):
            rec.finish(cid, "error", message)
    elif status is not None:
        rec.finish(cid, status, message)
    return report


def pytest_sessionstart(session):
    config = session.config
    rec = recorder_of(config)
    rec.started_at = utc_now()
    task = config.getoption("task")
    hashes, note = {}, None
    if config.getoption("evidence") and task:
        try:
            hashes = hash_inputs(task)
        except OSError as e:
            note = f"input hashing failed: {e}"
    rec.meta = {"task_dir": str(task) if task else None, "seed": int(config.getoption("seed")),
                "input_hashes": hashes}
    rec.config.update({"pytest_args": [str(a) for a in config.invocation_params.args],
                       "rootdir": str(config.rootpath), "python": platform.python_version()})
    if note:
        rec.config["input_hashes_note"] = note


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    path = config.getoption("evidence")
    if not path:
        return
    rec = recorder_of(config)
    meta = dict(rec.meta, started_at=rec.started_at, finished_at=utc_now())
    rec.config["exitstatus"] = int(exitstatus)
    rec.write(path, meta)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path = config.getoption("evidence")
    if path:
        rec = recorder_of(config)
        doc = rec.to_dict()
        counts = {s: sum(c["status"] == s for c in doc["claims"]) for s in ("pass", "fail", "error")}
        terminalreporter.write_line(f"evidence: {len(doc['claims'])} claims ({counts['pass']} pass, "
                                    f"{counts['fail']} fail, {counts['error']} error) -> {path}")


@pytest.fixture
def evidence(request) -> BoundEvidence:
    return BoundEvidence(recorder_of(request.config), claim_id_for(request.node))


@pytest.fixture(scope="session")
def evidence_recorder(request) -> EvidenceRecorder:
    return recorder_of(request.config)


@pytest.fixture(scope="session")
def task_dir(request) -> Path:
    task = request.config.getoption("task")
    if not task:
        raise pytest.UsageError("this check needs the task directory: pass --task DIR")
    path = Path(task)
    if not path.is_dir():
        raise FileNotFoundError(f"--task {task}: not a directory")
    return path


@pytest.fixture(scope="session")
def audit_seed(request) -> int:
    return int(request.config.getoption("seed"))
