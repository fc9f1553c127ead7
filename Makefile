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

VARIANT ?= batched

.PHONY: help setup test lint sanity units integration molecule demo demo-stop bench-switch freeze clean

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

test: setup lint sanity units integration molecule ## everything CI runs

lint: setup ## ansible-lint, production profile
	ansible-lint --offline --profile production

sanity: setup ## ansible-test sanity on a copy of the tree
	tools/ansible_test_sanity.sh $(SANITY_ROOT)

units: setup ## unit tests
	python -m pytest -q tests/unit

integration: setup ## integration tests: real ansible-playbook runs on localhost
	python -m pytest -q tests/integration

molecule: setup ## Molecule scenario extensions/molecule/default: converge -> idempotence -> verify -> cleanup
	cd extensions && MOLECULE_SERVING_PORT=$$($(BIN)/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
	  env -u ANSIBLE_CONFIG molecule test -s default

demo: setup ## the main job here: serve VARIANT (default batched) of the tiny model with transformers serve, benchmark it
	python tools/build_tiny_model.py --out build/tiny-model
	ansible-playbook playbooks/switch_variant.yml -i inventories/local -e variant=$(VARIANT)

demo-stop: setup ## stop the demo server and verify the GPUs
	ansible-playbook playbooks/stop.yml -i inventories/local

bench-switch: setup ## benchmarks/switch_overhead.py: what a switch and a no-op re-run cost beyond the engine
	python benchmarks/switch_overhead.py

freeze: ## re-pin requirements-dev.txt from requirements-dev.in
	rm -rf build/freeze && $(PYTHON) -m venv build/freeze
	build/freeze/bin/pip install -q -r requirements-dev.in
	{ echo "# Pinned from requirements-dev.in with Python 3.11 (ansible-core 2.19). Regenerate: make freeze"; \
	  build/freeze/bin/pip freeze; } > requirements-dev.txt

clean: ## remove build outputs (keeps .venv)
	rm -rf build tests/output .pytest_cache
