"""rlhf-audit tests (a regular package: ppi-python installs a top-level `tests` package of its own into
site-packages, which would otherwise shadow this directory in `from tests.helpers import ...`)."""
