# gpu_native.fleet developer entry points.  `make test` does everything on a
# fresh Debian machine (as root): host packages, podman config, .venv, the
# test-host image, then build, unit, integration, sanity, lint and Molecule.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV        ?= .venv
PY          := $(VENV)/bin/python
BIN         := $(VENV)/bin
CACHE       := .cache
COLL_ROOT   := $(CACHE)/collections
SCENARIO    ?=
# pytest-xdist workers for unit and integration (the CI machine has 2 cores; 1 runs them in one process).
TEST_WORKERS ?= 2
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(abspath $(COLL_ROOT))
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH := true
# Tools that install the collection (ansible-lint, Molecule) do it under $ANSIBLE_HOME: one per checkout,
# so checkouts sharing a machine (and CI on it) never load each other's copy from ~/.ansible.
export ANSIBLE_HOME := $(abspath $(CACHE))/ansible-home
export ANSIBLE_NOCOLOR := 1
export PY_COLORS := 0

.PHONY: help test check core-range setup setup-base host venv image collection-link unit integration sanity lint molecule clean build timings demo demo-clean fuzz kube-build kube-up kube-down ee

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

test: setup-base ## everything: setup, build check, unit, fuzz, sanity, lint, the ansible-core range, the EE image, molecule, integration (prints each suite's wall time)
	@tests/tools/kube-build-background.sh start
	@tests/tools/timed build tests/tools/check-build.sh
	@# unit, core-range and ee each leave a third to a half of the CPUs idle (deadline tests, pip, podman): together
	@tests/tools/together "tests/tools/timed unit $(MAKE) --no-print-directory unit" \
	  "tests/tools/timed core-range $(MAKE) --no-print-directory core-range" \
	  "tests/tools/timed ee $(MAKE) --no-print-directory ee"
	@tests/tools/together "tests/tools/timed fuzz $(MAKE) --no-print-directory fuzz" \
	  "tests/tools/timed sanity $(MAKE) --no-print-directory sanity" \
	  "tests/tools/timed lint $(MAKE) --no-print-directory lint"
	@tests/tools/timed molecule $(MAKE) --no-print-directory molecule
	@tests/tools/timed kube-build tests/tools/kube-build-background.sh wait
	@tests/tools/timed integration $(MAKE) --no-print-directory integration
	@tests/tools/timed --summary

check: venv collection-link ## the fast inner loop, no podman, no control plane: build check, unit, fuzz, sanity, lint (make test adds the ansible-core range)
	@tests/tools/timed build tests/tools/check-build.sh
	@tests/tools/timed unit $(MAKE) --no-print-directory unit
	@tests/tools/together "tests/tools/timed fuzz $(MAKE) --no-print-directory fuzz" \
	  "tests/tools/timed sanity $(MAKE) --no-print-directory sanity" \
	  "tests/tools/timed lint $(MAKE) --no-print-directory lint"
	@tests/tools/timed --summary

core-range: venv collection-link ## sanity (validate-modules, ansible-doc, runtime-metadata, import) and plugin unit tests under ansible-core 2.16, 2.17, 2.18 (cached venvs in .cache/core-range)
	@tests/tools/core-range.sh

setup: setup-base ## host packages, podman config, venv, image, Kubernetes binaries (each step timed)
	@tests/tools/timed kube-build $(MAKE) --no-print-directory kube-build

# What every suite needs; `make test` builds the Kubernetes binaries behind the suites that do not need them
# (tests/tools/kube-build-background.sh), and integration, which does, runs last.
setup-base:
	@tests/tools/timed host $(MAKE) --no-print-directory host
	@tests/tools/timed venv $(MAKE) --no-print-directory venv
	@tests/tools/timed image $(MAKE) --no-print-directory image
	@$(MAKE) --no-print-directory collection-link

host: ## Debian packages and podman config (root)
	@tests/tools/setup-host.sh

venv: $(VENV)/.installed ## the Python virtual environment from requirements.txt

$(VENV)/.installed: requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	@touch $@

image: ## the test-host images: Debian 12, Debian 13, Debian 12 + containerd 2.x, Debian 12 + dkms (each cached by input hash)
	@tests/images/build-debian12.sh
	@tests/images/build-test-host.sh debian13
	@tests/images/build-test-host.sh debian12-containerd2
	@tests/images/build-test-host.sh debian12-dkms

image-%: ## one test-host image: image-debian12, image-debian13, image-debian12-containerd2, image-debian12-dkms
	@tests/images/build-test-host.sh $*

kube-build: ## build (or reuse) upstream etcd, kube-apiserver, -controller-manager, -scheduler, kubelet (cached in /var/cache/gpu-native-fleet/kube)
	@tests/tools/kube-build.sh

kube-up: venv kube-build ## start a real control plane on 127.0.0.1 for manual use; prints the admin kubeconfig's path
	@$(PY) tests/kube_cluster.py up --dir $(CACHE)/kube-up

kube-down: venv ## stop the control plane of kube-up and remove its data
	@$(PY) tests/kube_cluster.py down --dir $(CACHE)/kube-up

collection-link: ## expose the checkout as ansible_collections/gpu_native/fleet
	@mkdir -p $(COLL_ROOT)/ansible_collections/gpu_native
	@# left alone when right: suites run together (tests/tools/together) read it while another make re-checks it
	@test "$$(readlink $(COLL_ROOT)/ansible_collections/gpu_native/fleet)" = "$(abspath .)" \
	  || ln -sfn $(abspath .) $(COLL_ROOT)/ansible_collections/gpu_native/fleet

unit: venv collection-link ## pytest tests/unit
	$(BIN)/pytest -q -n $(TEST_WORKERS) tests/unit

integration: venv collection-link kube-build ## pytest tests/integration (roles run by ansible-playbook against the stand-ins and the real control plane)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/integration

fuzz: venv collection-link ## pytest tests/fuzz (property-based; FUZZ_EXAMPLES=n for a longer run)
	$(BIN)/pytest -q tests/fuzz

sanity: venv ## ansible-test sanity in a copy placed under ansible_collections/
	@tests/tools/run-sanity.sh

lint: venv collection-link ## ansible-lint, production profile, offline
	$(BIN)/ansible-lint --offline

molecule: venv image collection-link ## every Molecule scenario, or SCENARIO=name
	@tests/tools/run-molecule.sh $(SCENARIO)

ee: build ## the AWX execution environment image localhost/gpu-native/fleet-ee:latest: ansible-builder, no registry, no index in the build (cached by input hash)
	@tools/ee/build-ee.sh

build: venv ## build the collection tarball into .cache/dist (from the files git would commit)
	@rm -rf $(CACHE)/build-src && mkdir -p $(CACHE)/build-src $(CACHE)/dist
	@tests/tools/checkout-files | rsync -a --from0 --files-from=- ./ $(CACHE)/build-src/
	$(BIN)/ansible-galaxy collection build --force --output-path $(abspath $(CACHE)/dist) $(CACHE)/build-src

demo: setup ## onboard a simulated GPU fleet (podman test hosts, GPUs replayed from real captures) and print the summary
	@tests/tools/demo.sh

demo-clean: ## remove the demo fleet
	@tests/tools/demo.sh clean

clean: ## remove caches and test output (keeps .venv and the image)
	rm -rf $(CACHE) tests/output .pytest_cache
