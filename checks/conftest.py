"""Audit checks (SPEC §3): each test is a claim; checks/evidence_plugin.py records them into evidence.json."""
pytest_plugins = ["checks.evidence_plugin"]
