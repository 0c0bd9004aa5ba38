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
# `make test`: pytest-xdist workers for unit, contract and integration; spark and e2e beside them, one
# process each (one JVM for the Spark tests: a JVM per worker warmed its JIT twice)
TEST_WORKERS ?= 2
# this machine's environment sets PYTHONDONTWRITEBYTECODE=1: every process of the suite (xdist workers,
# each e2e stack's processes, Spark's Python workers) then compiled the repo's own modules from source
# again (an import of the handlers and tests.conftest: 0.79-1.03 s CPU a process without their .pyc,
# 0.75-0.79 s with; .gitignore keeps __pycache__ out of git)
unexport PYTHONDONTWRITEBYTECODE
# pip installs without compiling every module it installs (--no-compile): the modules a process
# imports are compiled then, once (the .pyc written, as above). Measured here: pip's compile of the
# whole .venv 19-21 CPU-s (52.3 -> 31.4 CPU-s for the install), of .venv-sam 11 (42.3 -> 30.6);
# the suite's usual import set compiled lazily 6.5-7 CPU-s; `sam build` the same either way

.PHONY: run test test-ready unit integration e2e lint sam-build bench jobs clean chromium

$(VENV)/.stamp: pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + [r for extra in p["optional-dependencies"].values() for r in extra]))' > $(VENV)/requirements.txt
	$(PY) -m pip install -q --no-compile -r $(VENV)/requirements.txt
	$(PY) -m pip install -q --no-compile -e ./clients/python  # the Python client and the `lakeq` CLI
	touch $@

$(SAMVENV)/.stamp:
	test -x $(SAMVENV)/bin/python || $(PYTHON) -m venv $(SAMVENV)
	$(SAMVENV)/bin/pip install -q --no-compile "aws-sam-cli==$(SAM_VERSION)"
	touch $@

# WITH_JOBS=1 (or LAKEQ_WITH_JOBS=1): also run the Glue jobs on their triggers' schedules
# (LAKEQ_JOBS_EVERY=<seconds> for a shorter interval; LAKEQ_SCHEDULE_SCALE compresses all schedules)
# SQS_ANY_SIGNATURE=1: the SQS endpoint accepts any well-formed SigV4 signature (conformance runs only)
run: $(VENV)/.stamp
	$(PY) -m infra.local $(if $(filter-out 0 no false,$(WITH_JOBS)),--with-jobs) $(if $(filter-out 0 no false,$(SQS_ANY_SIGNATURE)),--sqs-any-signature)

lint: $(VENV)/.stamp
	$(VENV)/bin/cfn-lint template.yaml

# the Glue jobs' single-file scripts (glue_jobs/dist/, ScriptLocation: sam deploy uploads them)
# are regenerated from the current sources first
sam-build: $(SAMVENV)/.stamp
	$(PYTHON) -m glue_jobs.package
	$(SAM) build --template-file template.yaml --build-dir .aws-sam/build

# Debian's Chromium for the console's browser test (tests/e2e/test_console_e2e.py; Playwright
# never downloads a browser here). Installed with apt-get only when /usr/bin/chromium is missing
# (CI runs as root; elsewhere run `sudo make chromium` once).
CHROMIUM := /usr/bin/chromium
chromium: $(CHROMIUM)
$(CHROMIUM):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

# what the suite needs, two at a time (the two venvs' installs, then cfn-lint beside sam build):
# each is one process, and the machine has two cores
test-ready: $(VENV)/.stamp lint sam-build $(CHROMIUM)

test:
	@$(MAKE) --no-print-directory -j2 test-ready
	$(VENV)/bin/ruff check layers/
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules layers/
	@echo "tests/e2e and tests/spark run beside the others, one process each (their output: .e2e.log and .spark.log, printed at the end)"
	@$(PY) -m pytest -q -p no:cacheprovider --durations=20 tests/e2e > .e2e.log 2>&1 & e2e=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests/spark > .spark.log 2>&1 & spark=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=30 tests/unit tests/contract tests/integration; rc=$$?; \
	echo "waiting for tests/spark"; wait $$spark; spark_rc=$$?; echo "--- tests/spark:"; cat .spark.log; \
	echo "waiting for tests/e2e"; wait $$e2e; e2e_rc=$$?; echo "--- tests/e2e:"; cat .e2e.log; \
	test $$rc -eq 0 -a $$spark_rc -eq 0 -a $$e2e_rc -eq 0

unit: $(VENV)/.stamp
	$(PY) -m pytest -q tests/unit

integration: $(VENV)/.stamp
	$(PY) -m pytest -q tests/integration

e2e: $(VENV)/.stamp $(CHROMIUM)
	$(PY) -m pytest -q tests/e2e

# every benchmark's --quick (each under a minute on an idle machine once lake and replay have
# generated their 1M lakes, which the first run does; docs/benchmarks.md)
BENCHES := queue bitmap matcher rebalance idle coldstart fanout group_storage imports push sqs_endpoint ceiling lake replay
bench: $(VENV)/.stamp
	set -e; for b in $(BENCHES); do $(PY) bench/$$b.py --quick; done

# the data-lake jobs once, on local[2], against the stack `make run` serves on LAKEQ_PORT
jobs: $(VENV)/.stamp
	$(PY) -m glue_jobs.local --port $(LAKEQ_PORT)

clean:
	rm -rf .aws-sam .pytest_cache .hypothesis
