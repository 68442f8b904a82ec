"""The claims of both doors as pytest checks (task/: python -m audit.certify, samples/: python -m audit.samples).
Installed inside the audit package as audit.checks (pyproject.toml); audit.core.resources finds it there, and the
doors run pytest on that directory."""
