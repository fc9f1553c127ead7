# inferops.serving developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
LINK := collections/ansible_collections/inferops/serving
# ansible-test refuses symlinks: it gets a copy under a path ending ansible_collections/inferops/serving.
SANITY_ROOT := build/sanity/ansible_collections/inferops/serving
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help setup test lint sanity units integration bench-accuracy bench-peers freeze clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

setup: $(STAMP) $(LINK) ## create .venv with the pinned dev requirements (idempotent)

$(STAMP): requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(LINK):
	mkdir -p $(dir $(LINK))
	ln -sfn ../../.. $(LINK)

test: setup lint sanity units integration ## everything CI runs

lint: setup ## ansible-lint, production profile
	ansible-lint --offline --profile production

sanity: setup ## ansible-test sanity on a copy of the tree
	tools/ansible_test_sanity.sh $(SANITY_ROOT)

units: setup ## unit tests
	python -m pytest -q tests/unit

integration: setup ## integration tests: real ansible-playbook runs on localhost
	python -m pytest -q tests/integration

# Benchmarks: not part of `make test`. Run them on a quiet machine (they print its load average).
PEERS_VENV := build/peers-venv
AIPERF_VERSION := 0.13.0
GUIDELLM_VERSION := 0.8.1

bench-accuracy: setup ## our client vs a server of known timing: expected vs measured throughput and TPOT
	python benchmarks/bench_accuracy.py $(BENCH_ARGS)

bench-peers: setup $(PEERS_VENV)/aiperf/bin/aiperf $(PEERS_VENV)/guidellm/bin/guidellm ## the same, with AIPerf and GuideLLM beside ours
	python benchmarks/bench_accuracy.py --peers --peers-venv $(PEERS_VENV) $(BENCH_ARGS)

# each peer in its own venv: their dependency pins conflict
$(PEERS_VENV)/aiperf/bin/aiperf:
	rm -rf $(PEERS_VENV)/aiperf && $(PYTHON) -m venv $(PEERS_VENV)/aiperf
	$(PEERS_VENV)/aiperf/bin/pip install -q --disable-pip-version-check aiperf==$(AIPERF_VERSION)

$(PEERS_VENV)/guidellm/bin/guidellm:
	rm -rf $(PEERS_VENV)/guidellm && $(PYTHON) -m venv $(PEERS_VENV)/guidellm
	$(PEERS_VENV)/guidellm/bin/pip install -q --disable-pip-version-check guidellm==$(GUIDELLM_VERSION)

freeze: ## re-pin requirements-dev.txt from requirements-dev.in
	rm -rf build/freeze && $(PYTHON) -m venv build/freeze
	build/freeze/bin/pip install -q -r requirements-dev.in
	{ echo "# Pinned from requirements-dev.in with Python 3.11 (ansible-core 2.19). Regenerate: make freeze"; \
	  build/freeze/bin/pip freeze; } > requirements-dev.txt

clean: ## remove build outputs (keeps .venv)
	rm -rf build tests/output .pytest_cache
