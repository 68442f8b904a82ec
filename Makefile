# rlhf-audit. Every target installs what it needs first, so a fresh clone needs nothing else.
PY      := .venv/bin/python
STAMP   := .venv/.installed
SEED    ?= 0
WORLD   ?= worlds/canonical
TASK    ?= $(WORLD)/task
OUT     ?= out/certify

.PHONY: help install test bench world certify clean

help:
	@echo "make certify   audit the canonical world (built if missing) -> $(OUT)/answer.json, summary.md"
	@echo "make test      unit, property and end-to-end tests on the tiny world"
	@echo "make bench     RL step speed: fast path vs the naive reference path"
	@echo "make world     build the canonical world into $(WORLD) (seed $(SEED))"
	@echo "make install   create .venv with the pinned dependencies (idempotent)"

$(STAMP): pyproject.toml
	test -x $(PY) || python3.11 -m venv .venv || python3 -m venv .venv
	$(PY) -m pip install -q --disable-pip-version-check -e .
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) -m rlhf.bench --steps 20

clean:
	rm -rf out .pytest_cache
