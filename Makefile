# lakeq — the two commands: `make run` (local stack) and `make test` (whole suite).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
SAMVENV := .venv-sam
SAM := $(SAMVENV)/bin/sam
SAM_VERSION := 1.170.0
export LAKEQ_PORT ?= 3000
export LAKEQ_ADMIN_KEY ?= local-admin-key

.PHONY: run test unit integration e2e lint sam-build bench jobs clean

$(VENV)/.stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + [r for extra in p["optional-dependencies"].values() for r in extra]))' > $(VENV)/requirements.txt
	$(PY) -m pip install -q -r $(VENV)/requirements.txt
	touch $@

$(SAMVENV)/.stamp:
	test -x $(SAMVENV)/bin/python || $(PYTHON) -m venv $(SAMVENV)
	$(SAMVENV)/bin/pip install -q "aws-sam-cli==$(SAM_VERSION)"
	touch $@

run: $(VENV)/.stamp
	$(PY) -m infra.local

lint: $(VENV)/.stamp
	$(VENV)/bin/cfn-lint template.yaml

sam-build: $(SAMVENV)/.stamp
	$(SAM) build --template-file template.yaml --build-dir .aws-sam/build

test: $(VENV)/.stamp lint sam-build
	$(PY) -m pytest -q

unit: $(VENV)/.stamp
	$(PY) -m pytest -q tests/unit

integration: $(VENV)/.stamp
	$(PY) -m pytest -q tests/integration

e2e: $(VENV)/.stamp
	$(PY) -m pytest -q tests/e2e

bench: $(VENV)/.stamp
	$(PY) bench/queue.py --quick
	$(PY) bench/bitmap.py --quick
	$(PY) bench/matcher.py --quick
	$(PY) bench/rebalance.py --quick

# the data-lake jobs once, on local[2], against the stack `make run` serves on LAKEQ_PORT
jobs: $(VENV)/.stamp
	$(PY) -m glue_jobs.local --port $(LAKEQ_PORT)

clean:
	rm -rf .aws-sam .pytest_cache .hypothesis
