"""The package as a user installs it (issue 46): the wheel holds the claims (checks/) and the templates, installs into
a fresh venv outside the repository, runs the samples door with no torch installed (the core) and the task door
with the [task] extra, from another directory, to the same answer.json as the repository's own run; the claims'
JUnit XML names every claim with the pass/fail of evidence.json; requires-python is what vermin reads."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from tests.samples_synth import make_table, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
SOURCES = ("pyproject.toml", "README.md", "constraints.txt", "audit", "checks", "templates", "rlhf", "world")


def test_requires_python_is_the_lowest_vermin_reads():
    """The code's own minimum (annotations evaluated, `X | Y` unions counted) is what pyproject declares."""
    vermin = [Path(sys.executable).parent / "vermin", "--no-tips", "--eval-annotations", "--feature", "union-types"]
    r = subprocess.run([*vermin, "audit", "checks", "rlhf", "world", "examples"], cwd=ROOT, capture_output=True,
                       text=True)
    found = re.search(r"Minimum required versions: (\d+\.\d+)", r.stdout)
    assert found, r.stdout + r.stderr
    assert PYPROJECT["project"]["requires-python"] == f">={found.group(1)}"


def _package_of(path: Path) -> str:
    """The installed name of a source package directory (pyproject's package-dir maps checks/ and templates/)."""
    rel = path.relative_to(ROOT).as_posix()
    for name, src in SETUPTOOLS["package-dir"].items():
        if rel == src or rel.startswith(src + "/"):
            return name + rel[len(src):].replace("/", ".")
    return rel.replace("/", ".")


def test_every_package_of_the_tree_is_listed():
    tree = {_package_of(p.parent) for d in ("audit", "checks", "templates", "rlhf", "world")
            for p in (ROOT / d).rglob("__init__.py") if "__pycache__" not in p.parts}
    assert tree == set(SETUPTOOLS["packages"])


def test_the_core_dependencies_hold_no_heavy_stack():
    """The samples door's install pulls neither torch nor ray nor the reference implementations."""
    core = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in PYPROJECT["project"]["dependencies"]}
    assert not core & {"torch", "ray", "ppi-python", "safetensors", "trl", "transformers", "pytest-xdist"}
    assert all(re.search(r">=", d) for d in PYPROJECT["project"]["dependencies"])     # ranges, not pins
    assert not any("==" in d for extra in PYPROJECT["project"]["optional-dependencies"].values() for d in extra)


def _run(cmd, cwd, **kw):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _junit_matches_evidence(junit: Path, evidence: Path) -> None:
    cases = ET.parse(junit).findall(".//testcase")
    passed = {}
    for case in cases:
        claim = [p.get("value") for p in case.findall("properties/property") if p.get("name") == "claim"]
        assert len(claim) == 1, ET.tostring(case)[:300]
        passed[claim[0]] = not any(case.find(t) is not None for t in ("failure", "error", "skipped"))
    claims = json.loads(evidence.read_text())["claims"]
    assert passed == {c["id"]: c["status"] == "pass" for c in claims}      # one case per claim, same verdicts


@pytest.mark.slow
def test_the_wheel_installed_outside_the_repository(tmp_path, tiny_world, certified_tiny):
    # a wheel built from a copy of the tracked sources (building in the tree would leave build/ behind)
    src = tmp_path / "src"
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(p, src / name)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", dist, src],
         tmp_path)
    wheel = next(dist.glob("rlhf_audit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("audit/templates/summary.md.j2", "audit/templates/answer.schema.json", "audit/checks/pytest.ini",
              "audit/checks/conftest.py", "audit/checks/task/test_rm.py", "audit/checks/samples/test_runs.py"):
        assert f in names, f
    assert not any(n.startswith(("checks/", "templates/", "tests/")) for n in names)

    # a fresh venv with the core only: no torch; the samples door from a directory that is not the repository
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    _run([sys.executable, "-m", "venv", venv], tmp_path)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check", "-c",
           ROOT / "constraints.txt"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([*pip, wheel], work, env=env)
    r = subprocess.run([py, "-c", "import torch"], cwd=work, capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "No module named 'torch'" in r.stderr
    rows, gold, _ = make_table(seed=3)
    s, g = write_jsonl(work / "samples.jsonl", rows), write_jsonl(work / "gold.jsonl", gold)
    args = ["-m", "audit.samples", "--samples", s.name, "--gold", g.name, "--seed", "0", "--stress-examples", "3",
            "--no-figures"]
    _run([py, *args, "--out", "wheel-out", "--junitxml", "claims.xml"], work, env=env)
    _run([sys.executable, *args, "--out", "repo-out"], work)                  # the repository's own install
    assert (work / "wheel-out" / "answer.json").read_bytes() == (work / "repo-out" / "answer.json").read_bytes()
    _junit_matches_evidence(work / "claims.xml", work / "wheel-out" / "evidence.json")

    # then the [task] extra: the task door on the tiny world, the same answer as the repository's run
    _run([*pip, f"{wheel}[task]"], work, env=env)
    out, _ = certified_tiny
    r = _run([py, "-m", "audit.certify", "--task", tiny_world / "task", "--out", "task-out", "--preset", "small",
              "--seed", "0", "--junitxml", "task-claims.xml"], work, env=env)
    assert (work / "task-out" / "answer.json").read_bytes() == (out / "answer.json").read_bytes()
    _junit_matches_evidence(work / "task-claims.xml", work / "task-out" / "evidence.json")
