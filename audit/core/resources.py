"""Where the installed audit keeps what is not Python code it imports: the claims (checks/) and the report templates
(templates/). Both stay top-level in the repository and install inside the audit package as audit.checks and
audit.templates (pyproject.toml's package-dir): found through the installed package, a wheel and an editable
install (`pip install -e .`, what `make install` does) look the same to the code."""
from __future__ import annotations

import importlib.util
from pathlib import Path


class NotInstalled(RuntimeError):
    """A package the audit ships is not importable: the code runs from a tree that was never installed."""


def package_dir(name: str) -> Path:
    """The directory of an installed package of this distribution (audit.checks, audit.templates)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"{name} is not installed: install rlhf-audit (`pip install rlhf-audit`, or `make install` "
                           f"/ `pip install -e .` in a clone) and run it from that environment")
    return Path(next(iter(spec.submodule_search_locations)))


def checks_dir() -> Path:
    return package_dir("audit.checks")


def templates_dir() -> Path:
    return package_dir("audit.templates")


def claims_pytest_args(door: str) -> list[str]:
    """pytest's arguments for running one door's claims (door: 'task' or 'samples') from the installed package:
    the claims' directory, rootdir and configuration there (checks/pytest.ini), so that no pytest configuration of
    the directory the user runs from, or above the environment, reaches the claims."""
    checks = checks_dir()
    return [str(checks / door), "--rootdir", str(checks), "-c", str(checks / "pytest.ini"), "-p", "no:cacheprovider"]
