# inferops.serving developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
# the newest ansible-core's venv (test-core-latest, sanity-latest)
VENV_LATEST := .venv-core-latest
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
LINK := collections/ansible_collections/inferops/serving
# awx.awx for playbooks/awx_configure.yml, unpacked from the wheel pinned in tools/awx-collection.txt
AWX_COLLECTION := collections/ansible_collections/awx/awx
# ansible-test refuses symlinks: it gets a copy under a path ending ansible_collections/inferops/serving.
SANITY_ROOT := build/sanity/ansible_collections/inferops/serving
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

VARIANT ?= batched
# pytest-xdist workers of the unit, conformance, AWX and core-latest stages: each was one process on a 2-core
# machine (the integration stage has its own INTEGRATION_WORKERS); the fleet stays one at a time (its tests
# share the test bed's hosts and clean them up whole).
PYTEST_WORKERS ?= 2

.PHONY: help setup gate-setup tiny-model test-packages check check-setup check-units check-smoke test lint sanity units conformance engine-envs router-env integration compare bench-compare molecule awx test-fleet test-core-latest core-latest-units core-latest-integration sanity-latest ee demo demo-stop demo-replicas demo-replicas-stop bench-switch bench-rolling bench-accuracy bench-peers freeze clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

setup: $(STAMP) $(LINK) $(AWX_COLLECTION)/MANIFEST.json ## create .venv with the pinned dev requirements and awx.awx (idempotent)

$(STAMP): requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(LINK):
	mkdir -p $(dir $(LINK))
	ln -sfn ../../.. $(LINK)

# Galaxy is not reachable from CI; the community `ansible` wheel on PyPI carries awx.awx. Only that
# collection is unpacked (not the other ~90), so nothing else changes for ansible-lint or the tests.
$(AWX_COLLECTION)/MANIFEST.json: tools/awx-collection.txt | $(STAMP)
	rm -rf build/awx-wheel $(AWX_COLLECTION)
	$(BIN)/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
	  --require-hashes -r tools/awx-collection.txt -d build/awx-wheel
	$(BIN)/python -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	  z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("ansible_collections/awx/awx/")])' \
	  build/awx-wheel/ansible-*.whl collections
	rm -rf build/awx-wheel
	test -f $@ && touch $@

# The gate: each stage a make target, timed by tools/gate.py, which ends with the table of stages (setup on its
# own row), the load average at the start, the tests each pytest stage ran against its floor (tests/floor.txt)
# and every test over 60 s. Each pytest stage prints its 25 slowest tests (tests/support/pytest_gate.py).
# A group a+b runs its stages at the same time, and a member a>b of a group runs its stages one after the other.
# The fleet (about 30 % of two cores: it mostly waits on its SSH hosts and engines) runs beside the stages that
# keep the cores busy and assert nothing about time: the two sanity runs (each one process, in its own copy of the
# tree), then Molecule and AWX in turn (their own ports and build directories). The units do assert time (the
# client's TPOT against a stand-in that streams every 2 ms) and failed a gate beside the fleet's test bed and both
# sanity runs; core-latest's benchmark assertions (throughput within 6 % of a server of known timing) read
# 953.8 tok/s for 1024 beside the fleet: they, lint, conformance and the integration stage run alone. The ports
# every test takes are handed out once per gate run (tests/support/ports.py), so two stages never share one.
GATE_STAGES := gate-setup lint units conformance test-fleet+sanity+sanity-latest+molecule>awx integration test-core-latest
test: ## everything CI runs, stage by stage, ending with the stage table (about 40 minutes on a quiet 2-core machine; the aim is 25)
	$(PYTHON) tools/gate.py $(foreach stage,$(GATE_STAGES),'$(stage)')

# Everything the stages install or build, so that its time is its own row of the table.
# Four at once: each environment is its own pip download and unpack (network and disk more than CPU), the
# Debian packages an apt run; their prerequisites (.venv first) are declared, so the order holds under -j.
GATE_SETUP := setup router-env engine-envs $(VENV_LATEST)/.installed tiny-model test-packages
gate-setup: ## every environment the gate needs, and the tiny model (four builds at once)
	$(MAKE) --no-print-directory -j4 --output-sync=target $(GATE_SETUP)

tiny-model: setup ## the tiny random Qwen3 of the demo and the tests (build/tiny-model; local, idempotent)
	python tools/build_tiny_model.py --out build/tiny-model >/dev/null

# The quick loop: lint, the units (not the long seeded simulations) and the smoke selection of integration
# tests, end to end on real parts (a switch, a rollback, a benchmark, a replica roll through the real router).
# On a warm checkout (.venv, router-env and the tiny model built) it takes under 5 minutes; `make test` is the gate.
check: ## the quick loop: lint, units without the long simulations, the integration smoke set (under 5 minutes, warm)
	$(PYTHON) tools/gate.py check-setup lint check-units check-smoke

check-setup: setup router-env tiny-model

check-units: setup
	python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) -m "not slow_sim" --stage check-units tests/unit

# Three tests on two workers: xdist's default (load) hands fewer than two tests a worker out round robin, so one
# worker ran the real transformers switch and the replica roll one after the other while the other stood idle
# 141 s; worksteal lets the idle worker take a test still waiting on the busy one.
check-smoke: setup router-env tiny-model
	python -m pytest -q -p no:cacheprovider -n $(INTEGRATION_WORKERS) --dist worksteal -m smoke --stage check-smoke tests/integration

lint: setup ## ansible-lint, production profile, and the changelog's fragments (antsibull-changelog)
	ansible --version | sed -n 1p  # what ansible-lint runs first (ansible-compat); a failure here says why
	ansible-lint --offline --profile production
	antsibull-changelog lint

sanity: setup ## ansible-test sanity on a copy of the tree
	tools/ansible_test_sanity.sh $(SANITY_ROOT)

units: setup ## unit tests
	python -m pytest -q -n $(PYTEST_WORKERS) --stage units tests/unit

# The engines' own argument parsers, without GPUs: each pinned SGLang / vLLM wheel installed --no-deps in a
# side environment with the few pure-Python packages its parser needs (tests/conformance/requirements);
# torch and the rest are faked by tests/conformance/engine_stubs.py, loaded by a .pth file, so the engines'
# own commands (`python -m sglang.launch_server --help`, `vllm serve --help=all`) run there too.
ENGINE_ENVS := build/engine-envs
ENGINE_PROFILES := $(basename $(notdir $(wildcard tests/conformance/requirements/*.txt)))
ENGINE_STAMPS := $(foreach p,$(ENGINE_PROFILES),$(ENGINE_ENVS)/$(p)/.installed)

$(ENGINE_ENVS)/%/.installed: tests/conformance/requirements/%.txt | $(STAMP)
	rm -rf $(ENGINE_ENVS)/$*
	$(PYTHON) -m venv --without-pip $(ENGINE_ENVS)/$*
	$(BIN)/python -m pip --python $(ENGINE_ENVS)/$*/bin/python install -q --disable-pip-version-check --no-deps -r $<
	printf '%s\nimport engine_stubs; engine_stubs.boot("%s")\n' "$(CURDIR)/tests/conformance" "$*" \
	  > "$$($(ENGINE_ENVS)/$*/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/zz_inferops_engine_stubs.pth"
	touch $@

engine-envs: $(ENGINE_STAMPS) ## the side environments holding the pinned SGLang and vLLM parsers (build/engine-envs)

conformance: setup engine-envs ## the real SGLang/vLLM parsers and --help against every example variant and module doc example
	ENGINE_ENVS=$(CURDIR)/$(ENGINE_ENVS) python -m pytest -q -n $(PYTEST_WORKERS) --stage conformance tests/conformance

# The real sglang-router for the replica and router_worker integration tests: its own environment (a Rust
# binary in an abi3 wheel, with aiohttp, fastapi, uvicorn, orjson, setproctitle), pinned in
# tests/support/router-requirements.txt; rebuilt when that file changes.
ROUTER_VENV := build/router-venv

$(ROUTER_VENV)/.installed: tests/support/router-requirements.txt
	rm -rf $(ROUTER_VENV)
	$(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $<
	$(ROUTER_VENV)/bin/python -m sglang_router.launch_router --help >/dev/null
	touch $@

# smg 1.13.0 and vllm-router 0.1.17 beside it, one environment each (their own pins: smg wants grpcio and
# protobuf, vllm-router fastapi and requests), each rebuilt when its requirements file changes.
$(ROUTER_VENV)-smg/.installed: tests/support/router-requirements-smg.txt
	rm -rf $(ROUTER_VENV)-smg
	$(PYTHON) -m venv $(ROUTER_VENV)-smg
	$(ROUTER_VENV)-smg/bin/python -m pip install -q --disable-pip-version-check -r $<
	$(ROUTER_VENV)-smg/bin/smg launch --help >/dev/null
	touch $@

$(ROUTER_VENV)-vllm/.installed: tests/support/router-requirements-vllm.txt
	rm -rf $(ROUTER_VENV)-vllm
	$(PYTHON) -m venv $(ROUTER_VENV)-vllm
	$(ROUTER_VENV)-vllm/bin/python -m pip install -q --disable-pip-version-check -r $<
	$(ROUTER_VENV)-vllm/bin/vllm-router --help >/dev/null
	touch $@

router-env: $(ROUTER_VENV)/.installed $(ROUTER_VENV)-smg/.installed $(ROUTER_VENV)-vllm/.installed ## the side environments holding the pinned sglang-router, smg and vllm-router (build/router-venv, -smg, -vllm)

# Two workers (pytest-xdist): the tests mostly wait on engines and ansible-playbook, and each has its own
# ports, state dirs and fake GPUs. The tiny model is built once first, so the workers do not race to build it.
# The tests marked `timing` (measured times against a server of known timing, to a few per cent) run after,
# alone: on a 2-core machine a second worker's load moves those figures. Three workers kept the cores 98 % busy
# instead of 88 % and saved about 60 s, but under that load a tune's 2-repeat interval widened past significance
# and a drain ended before a second run could be refused: two is what the tests' timing holds to.
INTEGRATION_WORKERS ?= 2
# The real Prometheus parts of the metrics tests (tests/integration/test_metrics.py): node_exporter's textfile
# collector and promtool, the distribution's packages prometheus-node-exporter and prometheus, installed with
# apt-get when missing (CI runs as root with the package archive reachable), as tests/fleet/testbed.sh installs sshd.
test-packages: ## prometheus-node-exporter and promtool (Debian packages) for the metrics tests, installed when missing
	@missing=(); command -v prometheus-node-exporter >/dev/null || missing+=(prometheus-node-exporter); \
	  command -v promtool >/dev/null || missing+=(prometheus); \
	  if [ $${#missing[@]} -gt 0 ]; then \
	    echo "test-packages: installing $${missing[*]}"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$${missing[@]}" >/dev/null; \
	  fi

integration: setup router-env tiny-model test-packages ## integration tests: real ansible-playbook runs on localhost, INTEGRATION_WORKERS at once, then the timing tests alone
	python -m pytest -q -n $(INTEGRATION_WORKERS) -m "not timing" --stage integration tests/integration
	python -m pytest -q -m timing --stage integration-timing tests/integration

molecule: setup ## Molecule scenario extensions/molecule/default: converge -> idempotence -> verify -> cleanup
	cd extensions && MOLECULE_SERVING_PORT=$$($(BIN)/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
	  env -u ANSIBLE_CONFIG molecule test -s default

demo: setup ## the main job here: serve VARIANT (default batched) of the tiny model with transformers serve, benchmark it
	python tools/build_tiny_model.py --out build/tiny-model
	ansible-playbook playbooks/switch_variant.yml -i inventories/local -e variant=$(VARIANT)

demo-stop: setup ## stop the demo server and verify the GPUs
	ansible-playbook playbooks/stop.yml -i inventories/local

demo-replicas: setup $(ROUTER_VENV)-smg/.installed ## two replicas of the tiny model behind smg, switched to the other variant under load: sent, failed, time per replica
	python tools/build_tiny_model.py --out build/tiny-model >/dev/null
	python tools/demo_replicas.py run

demo-replicas-stop: setup ## stop the demo replicas (out of the router first), then the router
	python tools/demo_replicas.py stop

COMPARE_BUDGET_S ?= 1200
compare: setup ## the demo's baseline against batched on the real transformers engine, until decided or COMPARE_BUDGET_S (1200 s) runs out; the verdict and the side-by-side report printed
	python tools/build_tiny_model.py --out build/tiny-model
	ansible-playbook playbooks/compare.yml -i inventories/local -e variants=baseline,batched -e compare_until=decided \
	  -e compare_budget_s=$(COMPARE_BUDGET_S)
	@report=$$(ls -t $${INFEROPS_RESULTS_DIR:-playbooks/results}/*-compare.md | head -1); echo "== $$report"; \
	  sed -n '/^## Comparison/,/^!\[/p' "$$report"

bench-compare: setup ## benchmarks/compare_overhead.py: what compare.yml costs per candidate beyond engine start and benchmark
	python benchmarks/compare_overhead.py

bench-switch: setup ## benchmarks/switch_overhead.py: what a switch and a no-op re-run cost beyond the engine
	python benchmarks/switch_overhead.py

bench-rolling: setup router-env ## benchmarks/rolling_switch.py: failed requests and latency of a rolling switch of 4 replicas behind sglang-router, with and without the drain
	python benchmarks/rolling_switch.py
awx: setup ## AWX as code: awx_configure.yml syntax and arguments, survey vs catalog, ansible-builder create
	python -m pytest -q -n $(PYTEST_WORKERS) --stage awx tests/awx

FLEET_HOSTS ?= 4
test-fleet: setup router-env ## rollout scenarios over real SSH on FLEET_HOSTS network-namespace hosts (root), replicas behind the real sglang-router
	tests/fleet/testbed.sh run $(FLEET_HOSTS) -- python -m pytest -q -rA -p no:cacheprovider --stage fleet tests/fleet

# The newest ansible-core too (the supported range is 2.19 to 2.21): its own venv on Python 3.12, then the
# units (less the seeded statistical simulations, marker slow_sim: pure Python that no ansible-core
# version changes, run once under 2.19 in `units`) and the integration tests of the three modules and the main job (stand-in engines; the real
# transformers engine runs under 2.19 above), and the switch cases that depend on how a module's process
# lives and dies (the host finishing a switch alone, two runs at once).
PYTHON_LATEST ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3) $(shell command -v python3.12))
$(VENV_LATEST)/.installed: requirements-core-latest.txt
	@test -n "$(PYTHON_LATEST)" || { echo "test-core-latest: no Python 3.12 found; set PYTHON_LATEST=/path/to/python3.12"; exit 1; }
	test -x $(VENV_LATEST)/bin/python || $(PYTHON_LATEST) -m venv $(VENV_LATEST)
	$(VENV_LATEST)/bin/python -m pip install -q --disable-pip-version-check -r requirements-core-latest.txt
	touch $@

test-core-latest: core-latest-units core-latest-integration ## units and module/main-job integration tests under ansible-core 2.21 (Python 3.12)

core-latest-units: $(LINK) $(VENV_LATEST)/.installed ## the units under ansible-core 2.21 (Python 3.12), less the seeded simulations
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH $(VENV_LATEST)/bin/ansible --version | sed -n 1p  # sed reads it all: head closing the pipe early broke ansible with EPIPE
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH $(VENV_LATEST)/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) -m "not slow_sim" --stage core-latest-units tests/unit

core-latest-integration: $(LINK) $(VENV_LATEST)/.installed ## the integration and switch-safety selections under ansible-core 2.21 (Python 3.12)
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH $(VENV_LATEST)/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --stage core-latest-integration \
	  tests/integration/test_switch_variant.py tests/integration/test_inference_server.py \
	  tests/integration/test_gpu_idle_check.py tests/integration/test_throughput_bench.py -k "not transformers"
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH $(VENV_LATEST)/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --stage core-latest-safety \
	  tests/integration/test_switch_safety.py -k "kill_9 or two_runs or by_hand"

# ansible-test sanity under that newest core too (part of `make test`): no ignore entries on either core.
sanity-latest: $(LINK) $(VENV_LATEST)/.installed ## ansible-test sanity under ansible-core 2.21 (Python 3.12)
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH tools/ansible_test_sanity.sh build/sanity-latest/ansible_collections/inferops/serving

# The EE build context for AWX: this collection as a tarball at the path execution-environment.yml
# names, then `ansible-builder create` (no container runtime needed; build it with podman/docker).
EE_CONTEXT ?= build/ee/context
ee: setup ## the execution environment's build context in $(EE_CONTEXT) (see docs/awx.md)
	rm -rf build/ee/collection $(EE_CONTEXT)
	ansible-galaxy collection build --force --output-path build/ee/collection .
	cp build/ee/collection/inferops-serving-*.tar.gz build/ee/inferops-serving.tar.gz
	ansible-builder create -f execution-environment.yml -c $(EE_CONTEXT) --output-filename Containerfile
	test -f $(EE_CONTEXT)/_build/collections/inferops-serving.tar.gz
	@echo "build it: podman build -t inferops-serving-ee:latest $(EE_CONTEXT)"

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

freeze: ## re-pin requirements-dev.txt and requirements-core-latest.txt from their .in files
	rm -rf build/freeze && $(PYTHON) -m venv build/freeze
	build/freeze/bin/pip install -q -r requirements-dev.in
	{ echo "# Pinned from requirements-dev.in with Python 3.11 (ansible-core 2.19). Regenerate: make freeze"; \
	  build/freeze/bin/pip freeze; } > requirements-dev.txt
	rm -rf build/freeze-latest && $(PYTHON_LATEST) -m venv build/freeze-latest
	build/freeze-latest/bin/pip install -q -r requirements-core-latest.in
	{ echo "# Pinned from requirements-core-latest.in with Python 3.12 (ansible-core 2.21). Regenerate: make freeze"; \
	  build/freeze-latest/bin/pip freeze; } > requirements-core-latest.txt

clean: ## remove build outputs (keeps .venv)
	rm -rf build tests/output .pytest_cache
