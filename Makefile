# fleetbreaker: the commands a person (and CI, through .ci/run) types.
# `make help` lists the targets. Everything installs from the repo's own pins, so a fresh
# clone on a Debian machine needs only python3, node/npm and apt-get.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTEST := $(PY) -m pytest
# Stamps make a second `make deps` a no-op unless the pins changed.
VENV_STAMP := $(VENV)/.stamp
NODE_STAMP := node_modules/.stamp
# Extra arguments: `make test PYTEST_ARGS='-k redis -x'`, `make demo ARGS='--help'`.
PYTEST_ARGS ?=
# The suite's workers (pytest-xdist): tests that share a costly fixture stay on one worker
# (--dist loadgroup; tests/conftest.py's SHARED_FIXTURES). `make test WORKERS=` runs serially.
# Why 4 on 2 cores: docs/testing.md, "Speed".
PYTEST_WORKERS ?= 4
WORKERS ?= -n $(PYTEST_WORKERS) --dist loadgroup
# Branch coverage of layer/fleetbreaker and functions/ (pyproject's [tool.coverage]): the
# table, and a failure below its fail_under. A partial run (PYTEST_ARGS='-k ...') falls
# below the floor: pass COVERAGE= to leave coverage out.
COVERAGE ?= --cov --cov-report=term
ARGS ?=
# apt-get needs root; use sudo when not root (CI and the dev machines run as root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help venv node redis deps lint test test-quick time-tests rehearse test-deployed mutate demo bench scale figures dist constraints clean distclean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' \
		$(MAKEFILE_LIST)

venv: $(VENV_STAMP) ## python venv in .venv with the package (editable) and pinned dev tools

$(VENV_STAMP): pyproject.toml constraints.txt
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	@# devtools/ (servers, fakes, function loader for tests, bench and scripts) is never
	@# packaged: the repository root goes on the venv's path instead, for the dev venv only.
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "fleetbreaker-dev.pth").write_text("$(CURDIR)\n")'
	touch $@

node: $(NODE_STAMP) ## node_modules from package-lock.json (dynalite)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

redis: ## install Debian's redis-server if missing (tests start their own, on free ports)
	@if command -v redis-server >/dev/null; then \
		echo "redis-server: $$(command -v redis-server)"; \
	else \
		$(SUDO) apt-get update -q; \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends \
			redis-server; \
		: "the tests never use the system service; stop it if the postinst started one"; \
		$(SUDO) systemctl disable --now redis-server >/dev/null 2>&1 \
			|| $(SUDO) invoke-rc.d redis-server stop >/dev/null 2>&1 || true; \
	fi

# The tests need all of it: dynalite (node), redis-server, and checkov (tests/sam runs it from
# .venv-tools). The demo needs none of it: see demo below.
deps: venv node redis tools ## everything the tests need (venv, dynalite, redis-server, checkov)

lint: venv ## ruff (lint + format check) and mypy (strict on layer/fleetbreaker)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Dummy credentials and a fixed region so nothing can reach, or ask for, a real AWS account;
# tests/conftest.py enforces the same when pytest is run directly.
test: export SAM_CLI_TELEMETRY := 0
test: export AWS_DEFAULT_REGION := us-east-1
test: export AWS_ACCESS_KEY_ID := testing
test: export AWS_SECRET_ACCESS_KEY := testing
# Bytecode is written (an environment may forbid it, as this machine's does): hundreds of
# processes the tests start (the CLI, the deploy rehearsal's functions, the workers) then
# read the package, the functions and the tests compiled instead of compiling them again.
test: export PYTHONDONTWRITEBYTECODE :=
test: deps lint ## lint, then every test except the deployed-stack suite
	@# pytest exits 5 when no test ran; make treats any non-zero exit as a failure.
	$(PYTEST) -m "not deployed" $(WORKERS) $(COVERAGE) $(PYTEST_ARGS)

# The inner loop (docs/testing.md, "Speed"): the unit tests, the rules and the store contract
# on MemoryStore; the unit tests' Hypothesis machines on DynamoDB and Redis are left to
# `make test`. No server, no coverage, two workers.
QUICK_TESTS := tests/unit tests/contract \
	-k "(memory or not contract) and not dynamodb_store and not redis_store"
test-quick: export AWS_DEFAULT_REGION := us-east-1
test-quick: export AWS_ACCESS_KEY_ID := testing
test-quick: export AWS_SECRET_ACCESS_KEY := testing
test-quick: export PYTHONDONTWRITEBYTECODE :=
test-quick: venv ## the unit tests, the rules and the store contract on MemoryStore, no server
	$(PYTEST) -n 2 $(QUICK_TESTS) $(PYTEST_ARGS)

# The figures of docs/testing.md's "Speed": `make test`'s pytest run timed (after its set-up
# and lint), with its CPU time, the load beside it and the slowest tests
# (ARGS='--runs 3 --busy' beside a loop spinning one core; scripts/time_tests.py --help).
time-tests: deps ## time make test's pytest run: wall and CPU time, load, the 25 slowest tests
	$(PY) scripts/time_tests.py $(ARGS)

# `make test` runs it too; this runs it alone (docs/testing.md, "The deploy rehearsal").
rehearse: export SAM_CLI_TELEMETRY := 0
rehearse: export AWS_DEFAULT_REGION := us-east-1
rehearse: export AWS_ACCESS_KEY_ID := testing
rehearse: export AWS_SECRET_ACCESS_KEY := testing
rehearse: deps ## the deploy rehearsal: every function run as its stack configures it, IAM enforced
	$(PYTEST) -m rehearsal tests/rehearsal $(PYTEST_ARGS)

test-deployed: export SAM_CLI_TELEMETRY := 0
test-deployed: venv ## opt-in: tests against a deployed stack (needs FLEETBREAKER_STACK + AWS creds)
	@[ -n "$${FLEETBREAKER_STACK:-}" ] || { echo "set FLEETBREAKER_STACK to the deployed stack's name" >&2; exit 2; }
	$(PYTEST) -m deployed $(PYTEST_ARGS)

# Not part of CI (tens of minutes): docs/testing.md#mutation-testing records the last run.
mutate: venv ## mutation testing of layer/fleetbreaker with mutmut, module by module (ARGS='rules admission')
	$(PIP) install --quiet -c constraints.txt -e '.[dev,mutate]'
	$(PY) scripts/mutate.py $(ARGS)

# The demo runs on the venv alone (moto's server and the payment API are Python): no dynalite,
# no checkov. Only `--store redis` needs redis-server, so only that option installs it.
DEMO_NEEDS := $(if $(filter redis --store=redis,$(ARGS)),redis)

demo: venv $(DEMO_NEEDS) ## an outage seen by 16 containers, shared vs per-container breakers, or rate vs count (ARGS='--help')
	$(PY) -m bench.demo $(ARGS)

# make bench times this revision's package beside today's import (the package before the rate
# policy; docs/benchmarks.md, "Cold-start cost"), where the checkout's history has it.
IMPORT_REFERENCE ?= a405ffb^
HAVE_REFERENCE = $(shell git rev-parse --verify --quiet '$(IMPORT_REFERENCE)^{commit}' 2>/dev/null)

bench: venv ## import cost next to boto3, then fleetbreaker vs Powertools' circuit breaker on moto (bench/README.md)
	$(PY) bench/import_time.py $(if $(HAVE_REFERENCE),--reference '$(IMPORT_REFERENCE)') $(if $(shell command -v valgrind),--instructions)
	$(PY) bench/fleet_vs_powertools.py $(ARGS)

scale: venv ## simulated fleet of 100-5,000 containers, count vs rate policy (bench/README.md)
	$(PY) bench/scale.py $(ARGS)

# Every measured figure README.md, docs/ and bench/README.md quote is marked in the page and
# rendered from bench/results/*.json (bench/README.md says which benchmark writes which file);
# tests/docs/test_figures.py fails while a page and the JSON disagree.
figures: venv ## re-render the figures the docs quote from bench/results/*.json
	$(PY) bench/figures.py

# The install outside Lambda (docs/deploying.md, "Install outside Lambda"): a wheel and an
# sdist of the package, to `pip install dist/fleetbreaker-*.whl` (or with an extra,
# 'dist/fleetbreaker-*.whl[redis]') where the clone is not. tests/install builds them as
# this does and installs them into a clean venv.
dist: venv ## build the wheel and the sdist into dist/ (pip install dist/fleetbreaker-*.whl)
	rm -rf dist
	$(PY) -m build --outdir dist .

constraints: venv ## regenerate constraints.txt from the current venv
	{ echo "# Full resolved pin set for the dev environment, so a fresh clone installs what was tested."; \
	  echo "# Used as: pip install -c constraints.txt -e '.[dev]'.  Regenerate with: make constraints"; \
	  $(PIP) freeze --exclude-editable | grep -viE '^fleetbreaker([=@ ]|$$)'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean: ## remove caches and build output (keeps .venv and node_modules)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .aws-sam build dist demo-output
	find . -path ./.venv -prune -o -path ./node_modules -prune -o \
		\( -name __pycache__ -o -name '*.egg-info' \) -type d -print0 | xargs -0 rm -rf

distclean: clean ## clean, and remove .venv and node_modules too
	rm -rf $(VENV) node_modules

# ------------------------------------------------------------------ SAM application
# template.yaml: the CircuitBreakers table, the layers (layer/Makefile, one pair per runtime),
# the payment function (functions/payment/Makefile) behind an HTTP API, and the payment
# workflow with its gate and charge functions (their Makefiles copy app.py; payment and charge
# also functions/shared's payments.py). `sam build` needs neither Docker nor the runtime's own
# Python: the Makefiles install pure-Python wheels only.

TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.stamp
SAM := $(VENV)/bin/sam
CFN_LINT := $(VENV)/bin/cfn-lint
CHECKOV := $(TOOLS_VENV)/bin/checkov
# `make invoke-local EVENT=events/payment-bad-body.json`; a glob runs several in one go.
EVENT ?= events/payment-ok.json
# `make invoke`: sam local invoke's --env-vars file (table, endpoint, payment API URL), the
# function (PaymentFunction, BreakerGateFunction or ChargeFunction) and the architecture of the
# local Docker image: this machine's by default, so no emulation is needed (arm64 on an x86_64
# machine runs only with QEMU's binfmt handlers installed for Docker).
ENV_VARS ?= events/env.json
FUNCTION ?= PaymentFunction
LOCAL_ARCH ?= $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x86_64)

.PHONY: tools constraints-tools build validate checkov env-json deploy deploy-guided docker-check invoke invoke-local

# checkov's pins clash with the dev tools' (boto3, networkx, packaging), so it lives apart.
tools: $(TOOLS_STAMP) ## checkov in its own venv (.venv-tools), from constraints-tools.txt

$(TOOLS_STAMP): constraints-tools.txt
	[ -x $(TOOLS_VENV)/bin/python ] || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/pip install --quiet -c constraints-tools.txt checkov
	touch $@

constraints-tools: tools ## regenerate constraints-tools.txt from .venv-tools
	{ sed -n '1,3p' constraints-tools.txt; $(TOOLS_VENV)/bin/pip freeze; } > constraints-tools.txt.new
	mv constraints-tools.txt.new constraints-tools.txt

# The build Makefiles run pip with $(PYTHON): the venv's, whose pip version is pinned.
# Then the sizes of the layers it made, measured as bench/layer_sizes.py measures the ones the
# docs quote (it leaves bench/results alone here).
# `make invoke` checks for Docker before this (below): a build is no use without it.
build: export SAM_CLI_TELEMETRY := 0
build: export PYTHON := $(CURDIR)/$(PY)
build: $(if $(filter invoke,$(MAKECMDGOALS)),docker-check) venv ## sam build: the layers and the functions into .aws-sam/build (no Docker needed); prints the layers' sizes
	$(SAM) build
	$(PY) bench/layer_sizes.py --build-dir .aws-sam/build --print-only

# One fixed region when none is configured, so the lint does not depend on the shell's
# (sam validate --lint also runs without one).
validate: export SAM_CLI_TELEMETRY := 0
validate: export AWS_DEFAULT_REGION ?= us-east-1
validate: venv ## sam validate --lint, then cfn-lint with informational findings included
	$(SAM) validate --lint
	$(CFN_LINT) --include-checks I -- template.yaml

# --skip-download and BC_SKIP_MAPPING keep checkov off the network (no platform calls).
# checkov leaves out the resources whose condition is false, so the template alone never shows
# it defer mode's queues, table, consumer and role: it also scans SAM's translation of every
# parameter set (devtools/sam_template.py's PARAMETER_SETS), the set's values as defaults.
CHECKOV_TRANSLATIONS := .aws-sam/checkov
checkov: export BC_SKIP_MAPPING := TRUE
checkov: export AWS_DEFAULT_REGION ?= us-east-1
checkov: export SAM_CLI_TELEMETRY := 0
checkov: tools venv ## checkov, offline, on template.yaml and on SAM's translation of every parameter set
	$(CHECKOV) -f template.yaml --framework cloudformation --skip-download --quiet --compact
	rm -rf $(CHECKOV_TRANSLATIONS)
	$(PY) -m devtools.sam_template translations $(CHECKOV_TRANSLATIONS)
	$(CHECKOV) -d $(CHECKOV_TRANSLATIONS) --framework cloudformation --skip-download --quiet --compact

env-json: venv ## regenerate events/env.json from template.yaml (tests fail when it drifts)
	$(PY) -m devtools.sam_template env-json

deploy: export SAM_CLI_TELEMETRY := 0
deploy: build ## sam deploy with samconfig.toml's defaults (first time: make deploy-guided)
	$(SAM) deploy

deploy-guided: export SAM_CLI_TELEMETRY := 0
deploy-guided: build ## sam deploy --guided: asks for stack name, region and parameters
	$(SAM) deploy --guided

invoke: export SAM_CLI_TELEMETRY := 0
# scripts/local_services.py starts moto and the fake payment API where ENV_VARS says, around
# the command. The container shares the host's network, so 127.0.0.1 there is this machine.
# sam local passes a function only the variables its template declares: the template
# declares AWS_ENDPOINT_URL for this (parameter LocalEndpointUrl, empty in AWS).
# docker-check comes first, before the build: build depends on it too when `invoke` is a goal,
# so even `make -j` checks for Docker before it builds.
docker-check:
	@docker info >/dev/null 2>&1 || { echo "sam local invoke runs the function in a Docker container, and Docker is not available here. Use: make invoke-local EVENT=$(EVENT)" >&2; exit 2; }

invoke: docker-check build ## sam local invoke FUNCTION with EVENT, ENV_VARS (needs Docker; else invoke-local)
	$(PY) scripts/local_services.py --env-vars $(ENV_VARS) -- \
		$(SAM) local invoke $(FUNCTION) --event $(EVENT) --env-vars $(ENV_VARS) \
		--docker-network host \
		--parameter-overrides Architecture=$(LOCAL_ARCH)

invoke-local: venv ## the payment handler in-process on EVENT, against moto and a fake payment API
	$(PY) scripts/invoke_local.py $(EVENT) $(ARGS)

distclean: distclean-tools
.PHONY: distclean-tools
distclean-tools:
	rm -rf $(TOOLS_VENV)
