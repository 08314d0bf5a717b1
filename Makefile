# Ringmaster's everyday commands. The README names the two that matter most:
#   make demo   the operator's main job end to end on the local cluster
#   make test   the whole test suite (lint, unit, e2e on the local cluster)
SHELL := /bin/bash
PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest
# Every tool runs as a module of this Python: its scripts directory need not be on PATH (CI's is not).
RINGMASTER ?= $(PYTHON) -m ringmaster
# The control-plane binaries: built once per version into ~/.cache/ringmaster (hack/cluster-tools.sh).
BIN_DIR = $(shell bash hack/cluster-tools.sh)
# What a bare cluster needs (no Kueue, LeaderWorkerSet or helm): cluster-up and cluster-down.
CLUSTER_BIN_DIR = $(shell bash hack/cluster-tools.sh etcd kwok kube)
# The tests run on pytest-xdist workers, whole files each, the slowest first; each worker runs its
# e2e files on a local cluster of its own (tests/conftest.py, tests/e2e/conftest.py). `-n auto`
# is 5 workers (PYTEST_XDIST_AUTO_NUM_WORKERS=N for another count), none with
# RINGMASTER_E2E_KUBECONFIG; XDIST= runs everything in one process.
XDIST ?= -n auto --dist loadfile --no-loadscope-reorder

.PHONY: help install tools cluster-up cluster-down demo test test-unit test-e2e lint format bench-engine bench-scale crds

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

install:  ## install the package and its test tools into the current Python
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

tools:  ## build (or find cached) etcd, kube-*, kubectl, kwok, helm, Kueue, LeaderWorkerSet, GIE CRDs
	@bash hack/cluster-tools.sh

cluster-up:  ## bring the local kwok cluster up with its simulated node pools
	RINGMASTER_BIN_DIR=$(CLUSTER_BIN_DIR) $(RINGMASTER) cluster up

cluster-down:  ## delete the local cluster
	RINGMASTER_BIN_DIR=$(CLUSTER_BIN_DIR) $(RINGMASTER) cluster down

demo: install  ## cluster up, CRDs and examples applied, the operator's decisions shown
	bash hack/demo.sh  # builds only the components it runs (etcd kwok kube lws gie)

test: install lint  ## the whole suite: lint, unit tests, e2e tests on local clusters
	RINGMASTER_BIN_DIR=$(BIN_DIR) $(PYTEST) $(XDIST) -m "not bench"

test-unit:  ## the tests that need no cluster
	$(PYTEST) $(XDIST) --ignore=tests/e2e -m "not bench"

test-e2e:  ## the tests on local clusters
	RINGMASTER_BIN_DIR=$(BIN_DIR) $(PYTEST) $(XDIST) tests/e2e

lint:  ## ruff and mypy
	$(PYTHON) -m ruff check operator tests benchmarks
	$(PYTHON) -m ruff format --check operator tests benchmarks
	$(PYTHON) -m mypy

format:  ## apply ruff's formatting and safe fixes
	$(PYTHON) -m ruff check --fix operator tests benchmarks
	$(PYTHON) -m ruff format operator tests benchmarks

bench-engine:  ## the engine's speed: evaluations per second, one plan's latency, import time
	$(PYTHON) benchmarks/bench_engine.py

bench-scale:  ## the operator on 2000 simulated A100 hosts in blocks of 16 with 300 gangs (about 20 minutes)
	RINGMASTER_BIN_DIR=$(BIN_DIR) $(PYTHON) benchmarks/bench_scale.py

crds:  ## regenerate crds/ and docs/api.md from the API models, and the chart's copy of crds/
	$(RINGMASTER) crds --output-dir crds --reference docs/api.md
	cp crds/*.yaml charts/ringmaster/crds/
