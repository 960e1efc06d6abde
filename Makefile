# kopflet: `make dev` runs the local stack and the agent; `make test` runs every test against it.
# Both install what they need (Debian packages, the Python venv, Go-built Kubernetes binaries,
# the project's images) on a fresh machine; later runs reuse the caches.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The benchmarks' agent runs from a venv with the runtime dependencies only (requirements.lock), as `pip install
# kopflet` and the image install it: the development venv also holds the harness's `kubernetes` client, which Kopf
# imports whenever it is installed (18 MiB of the agent's memory that no user's agent carries).
AGENT_VENV ?= .venv-agent
export KOPFLET_AGENT_VENV := $(abspath $(AGENT_VENV))
export KOPFLET_CACHE ?= /var/cache/kopflet
PYTEST_ARGS ?=

.PHONY: dev test bench bench-hollow profile agent-venv conformance conformance-cluster reliability deps venv binaries runtime userns-smoke agent-image proto lint unit down \
	status cluster cluster-down

dev: deps venv binaries
	$(PY) -m devstack dev

test: deps venv binaries runtime agent-image lint
	$(PY) -m devstack run -- $(PY) -m pytest -ra $(PYTEST_ARGS) tests --ignore=tests/cluster
	$(PY) -m devstack cluster run -- $(PY) -m pytest -ra $(PYTEST_ARGS) tests/cluster

# Benchmarks, never part of `make test`: kopflet beside the upstream kubelet of the same release and the
# runtime floor; writes bench/results/<date>.{json,md,png}. BENCH_ARGS=--quick checks the harness in minutes.
BENCH_ARGS ?=
bench: deps venv agent-venv binaries
	bash devstack/build-binaries.sh --kubelet >/dev/null
	$(PY) -m devstack run -- $(PY) -m bench $(BENCH_ARGS)

# `kopflet hollow` nodes beside upstream's kubemark hollow kubelets on one apiserver: per-node memory, CPU and API
# requests, pod start at the scheduler's pace: bench/results/<date>-hollow-<N>.{json,md}. HOLLOW_ARGS: --nodes N,
# --pods-per-node N, --fleets kopflet,kubemark, --quick.
HOLLOW_ARGS ?=
bench-hollow: deps venv agent-venv binaries
	bash devstack/build-binaries.sh --kubemark >/dev/null
	$(PY) -m devstack run -- $(PY) -m bench.hollow $(HOLLOW_ARGS)

# kopflet's stacks sampled (py-spy) through a 110-pod burst: bench/results/<date>-profile.{svg,txt,md}.
# PROFILE_ARGS: --pods N, --rate HZ.
PROFILE_ARGS ?=
profile: deps venv agent-venv binaries
	$(PY) -m devstack run -- $(PY) -m bench.profile $(PROFILE_ARGS)

# Upstream's node conformance specs, never part of `make test`: each pass with kopflet as the node's agent, then
# with the upstream kubelet of the same release; writes docs/conformance.md. CONFORMANCE_ARGS: --pass node|serial
# (default both), --focus REGEX and --agents for a focused rerun, --nodes N.
CONFORMANCE_ARGS ?=
conformance: deps venv binaries
	bash devstack/build-binaries.sh --kubelet --e2e >/dev/null
	$(PY) -m devstack run -- $(PY) -m conformance $(CONFORMANCE_ARGS)

# Every [Conformance] spec but the [Disruptive] ones on a kubeadm cluster (`make cluster`) made for kopflet, then
# one made for the upstream kubelet; the dev stack and any cluster must be down. CONFORMANCE_ARGS as above
# (--agents kubelet runs one half and keeps the other's published one).
conformance-cluster: deps venv binaries
	bash devstack/build-binaries.sh --kubelet --e2e --cluster >/dev/null
	$(PY) -m conformance --pass cluster $(CONFORMANCE_ARGS)

# docs/reliability.md: the fault-injection, kill-matrix, restart and hostile-input tests with what each
# injected and what the user saw, plus a 1,000-cycle churn's leftover counts (RELIABILITY_ARGS=--churn N).
RELIABILITY_ARGS ?=
reliability: deps venv binaries
	$(PY) -m devstack run -- $(PY) -m reliability $(RELIABILITY_ARGS)

# A kubeadm cluster whose kubelet is kopflet (devstack/cluster.py): `kubeadm init` on this machine, the control
# plane as static pods, kube-proxy and CoreDNS on the node. Not with `make dev` (same ports); `make cluster-down`
# is `kubeadm reset` and stops it all. `make test` ends with tests/cluster on one (`cluster run`: up, tests, down).
cluster: deps venv binaries
	$(PY) -m devstack cluster up

cluster-down: venv
	$(PY) -m devstack cluster down

unit: venv
	$(PY) -m pytest -q tests/unit

lint: venv
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

deps:
	bash devstack/install-deps.sh

venv: $(VENV)/.installed

agent-venv: $(AGENT_VENV)/.installed

$(AGENT_VENV)/.installed: setup.cfg pyproject.toml requirements.lock
	python3 -m venv $(AGENT_VENV)
	$(AGENT_VENV)/bin/pip install -q --upgrade pip
	$(AGENT_VENV)/bin/pip install -q --constraint requirements.lock -e .
	touch $@

# Runtime dependencies at requirements.lock's versions, as the image installs them: a fresh machine gets what
# was tested, not whatever was released since.
$(VENV)/.installed: setup.cfg pyproject.toml requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --constraint requirements.lock -e '.[dev]'
	touch $@

binaries:
	bash devstack/build-binaries.sh >/dev/null

# containerd 2.x and runc from Go modules (devstack/versions.env pins them): the runtime for hostUsers: false pods.
# Not the stack's runtime: userns-smoke and tests/e2e/test_user_namespaces.py run pods on a private instance of it
# (devstack/private_containerd.py) and remove everything; `make test` builds it first.
runtime:
	bash devstack/build-runtime.sh >/dev/null

userns-smoke: venv runtime
	$(PY) -m devstack.userns_smoke

# The DaemonSet's image (Containerfile) with buildah; tests/e2e/test_daemonset.py runs it. A rerun takes a second.
agent-image:
	bash images/build-agent-image.sh >/dev/null

proto: venv
	bash cri_client/proto/generate.sh
	bash kopflet/apis/podresources/proto/generate.sh
	bash kopflet/cm/devicemanager/proto/generate.sh
	bash kopflet/pluginmanager/proto/generate.sh
	bash kopflet/volumes/csi/proto/generate.sh

down: venv
	$(PY) -m devstack down

status: venv
	$(PY) -m devstack status
