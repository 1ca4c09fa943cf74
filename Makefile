# Nezha — multi-rail networking for distributed training on Kubernetes.
# `make help` lists the targets. Everything installs what it needs through hack/setup.sh
# (idempotent, cached in ~/.cache/nezha), so `make test` works on a fresh machine.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Pinned versions and cache paths come from one place.
NEZHA_CACHE     ?= $(HOME)/.cache/nezha
KUBE_VERSION    := $(shell source hack/versions.sh && echo $$KUBE_VERSION)
KUBE_BIN        := $(NEZHA_CACHE)/kube-$(KUBE_VERSION)/bin
KUBE_OLDEST_VERSION := $(shell source hack/versions.sh && echo $$KUBE_OLDEST_VERSION)
KUBE_OLDEST_BIN := $(NEZHA_CACHE)/kube-$(KUBE_OLDEST_VERSION)/bin
TOOLS_BIN       := $(NEZHA_CACHE)/tools/bin
PYTHON          := /usr/bin/python3
RUNTIME_BUILD   := build/runtime
CMAKE_FLAGS     ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEZHA_WERROR=ON
GO_TEST_FLAGS   ?= -count=1 -p 1
FUZZ_SECONDS    ?= 60
# make e2e's kind part: auto (where `docker info` answers), 1 (required), 0 (skip). Checked when
# the makefile is read, so a mistyped value fails before any build (with -j too).
E2E_KIND        ?= auto
ifneq ($(filter e2e,$(MAKECMDGOALS)),)
ifneq ($(words $(E2E_KIND))$(filter auto 1 0,$(E2E_KIND)),1$(strip $(E2E_KIND)))
$(error make e2e: E2E_KIND must be auto, 1 or 0, not '$(E2E_KIND)')
endif
endif
FUZZ_TARGETS    := fuzz_table fuzz_algo_table fuzz_env fuzz_rendezvous fuzz_handshake fuzz_mesh_frame fuzz_http fuzz_nccl_handle fuzz_qp_address
# Sanitizer builds at -O1 with line tables only (-g1): what the sanitizers' docs advise, enough for
# symbolized reports, and about 45 % less compile time than RelWithDebInfo's -O2 -g (two of the
# three C++ builds in `make test` are sanitizer builds).
SAN_OPT         := -O1 -g1 -DNDEBUG
SAN_FLAGS       := -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEZHA_WERROR=ON \
                   -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT)" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_OPT)"
# The ThreadSanitizer run: the multi-threaded suites, and the only binaries that hold them.
TSAN_TESTS      := Failover|StripedStream|ControlMesh|Control|Listener|Acceptor|Alltoall|RailWorker
TSAN_BINARIES   := nezha_unit_tests nezha_inprocess_tests nezha_tools_tests nezha_verbs_tests
export NEZHA_CACHE

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Install Debian packages, Go tools and envtest binaries (idempotent, cached).
	hack/setup.sh

##@ Build

.PHONY: build
build: build-go build-runtime ## Build everything (Go binaries into bin/, runtime into build/runtime).

.PHONY: build-go
build-go: ## Build the operator, CNI plugin and rail agent into bin/.
	mkdir -p bin
	go build -o bin/ ./operator/cmd/... ./cni/cmd/...

.PHONY: build-runtime
build-runtime: ## Build libnezha, nezha-bench and nezha-tune with CMake (warnings are errors).
	cmake -S runtime -B $(RUNTIME_BUILD) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(RUNTIME_BUILD) -j2

# Image names in one place: `make images REGISTRY=host[:port][/path] TAG=x` names them
# REGISTRY/nezha/<name>:TAG (default nezha/<name>:<chart appVersion>); the chart takes the same
# REGISTRY as image.registry and TAG as image.tag.
IMAGE_ENV = $(if $(REGISTRY),NEZHA_IMAGE_PREFIX=$(REGISTRY)/nezha) $(if $(TAG),NEZHA_IMAGE_TAG=$(TAG))

.PHONY: images
images: build-go build-runtime ## Build the operator, rail-agent and runtime images as tarballs (no Docker needed).
	$(IMAGE_ENV) hack/images.sh

.PHONY: images-train-example
images-train-example: build-torch ## The demo's worker image nezha/train-example (python3, torch, the nezha backend, examples/; ~3 GB, so not in `make images`).
	$(IMAGE_ENV) hack/images.sh train-example

.PHONY: push
push: images ## Push the image tarballs to REGISTRY (crane) and print their digests: make push REGISTRY=... TAG=...
	$(IMAGE_ENV) hack/images.sh push

.PHONY: build-bench
build-bench: ## Build the Gloo baseline (gloo-bench) the benchmarks compare against.
	cmake -S bench/baselines/gloo -B build/bench $(CMAKE_FLAGS) >/dev/null
	cmake --build build/bench -j2

.PHONY: manifests
manifests: ## Regenerate deepcopy code, CRDs (config/crd/bases), RBAC (config/rbac) and the chart's copies.
	operator/hack/manifests.sh
	# The chart installs exactly what was generated: same CRDs, same operator RBAC rules.
	cp config/crd/bases/*.yaml charts/nezha/crds/
	sed -n '/^rules:/,$$p' config/rbac/role.yaml > charts/nezha/files/operator-rules.yaml

##@ Test

.PHONY: test
test: setup lint test-go test-runtime test-python test-torch test-asan test-tsan fuzz-ci ## Lint, every test suite, the sanitizer runs and a short fuzz run (needs root).
	@echo "make test: all suites passed"

.PHONY: test-go
test-go: ## Go tests: operator, rail agent and chart against a real kube-apiserver (envtest), CNI plugin in netns.
	KUBEBUILDER_ASSETS=$(KUBE_BIN) go test $(GO_TEST_FLAGS) ./operator/... ./cni/... ./hack/... ./charts/...

.PHONY: test-chart-matrix
test-chart-matrix: ## The chart on the oldest and newest Kubernetes it claims: helm renders against each API server (envtest; builds the oldest kube-apiserver once), server-side dry-run apply, Pod Security enforced, a real helm install.
	hack/setup.sh
	hack/build-kube.sh envtest-oldest >/dev/null
	NEZHA_CHART_MATRIX=$(KUBE_OLDEST_VERSION)=$(KUBE_OLDEST_BIN),$(KUBE_VERSION)=$(KUBE_BIN) \
	  go test $(GO_TEST_FLAGS) -run 'TestChartInstallsOnEveryClaimedVersion|TestChartClaimsExactlyTheTestedRange' -v ./charts/

.PHONY: test-runtime
test-runtime: build-runtime ## C++ runtime: unit + in-process multi-rank tests, then test-bed integration.
	ctest --test-dir $(RUNTIME_BUILD) --output-on-failure -L unit
	ctest --test-dir $(RUNTIME_BUILD) --output-on-failure -L testbed

.PHONY: test-asan
test-asan: ## Runtime unit and in-process tests under AddressSanitizer + UndefinedBehaviorSanitizer.
	cmake -S runtime -B build/asan $(SAN_FLAGS) -DNEZHA_SANITIZE=address,undefined >/dev/null
	cmake --build build/asan -j2
	ctest --test-dir build/asan --output-on-failure -L unit

.PHONY: test-tsan
test-tsan: ## The multi-threaded failover (engine and striped stream too), control-mesh, listener, alltoall and rail-worker tests under ThreadSanitizer.
	cmake -S runtime -B build/tsan $(SAN_FLAGS) -DNEZHA_SANITIZE=thread >/dev/null
	cmake --build build/tsan -j2 --target $(TSAN_BINARIES)
	ctest --test-dir build/tsan --output-on-failure -L unit -R '$(TSAN_TESTS)'

.PHONY: fuzz
fuzz: ## Every libFuzzer target (runtime/fuzz, clang) for FUZZ_SECONDS (default 60) each.
	cmake -S runtime -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DNEZHA_FUZZ=ON -DNEZHA_BUILD_TESTS=OFF >/dev/null
	cmake --build build/fuzz -j2 --target $(FUZZ_TARGETS)
	runtime/fuzz/run.sh build/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

.PHONY: fuzz-ci
fuzz-ci: ## The C++ fuzz targets for 15 s each and the Go ones for 20,000 inputs each (what `make test` runs).
	$(MAKE) fuzz FUZZ_SECONDS=15
	# A count, not a duration: with -fuzztime=10s Go's fuzzer can end a healthy run with "context
	# deadline exceeded" when the time runs out mid-input (seen once in CI on FuzzParseStatus).
	$(MAKE) fuzz-go GO_FUZZ_TIME=20000x

GO_FUZZ_TIME ?= 60s
.PHONY: fuzz-go
fuzz-go: ## Every Go fuzz target (func FuzzX) for GO_FUZZ_TIME each, from its seeds.
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' operator cni hack internal | xargs -n1 dirname | sort -u); do \
	  for fn in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$pkg/*_test.go | sed 's/^func //'); do \
	    echo "fuzz-go: ./$$pkg $$fn for $(GO_FUZZ_TIME)"; \
	    go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(GO_FUZZ_TIME) ./$$pkg || exit 1; \
	  done; \
	done

# The PyTorch 2 backend: built with scikit-build-core against the pinned torch venv
# (hack/setup-torch.sh) into build/python-torch, tested with that interpreter.
TORCH_VENV      := $(shell source hack/versions.sh && echo $$NEZHA_TORCH_VENV)
TORCH_PY        := $(TORCH_VENV)/bin/python

.PHONY: test-python
test-python: build-runtime build-bench ## Python tests: test bed acceptance, benchmark harness, the nezha package's ctypes binding.
	$(PYTHON) -m pytest -q hack/tests bench/tests runtime/tools/nezha_control_sign_test.py
	hack/setup-torch.sh
	$(TORCH_PY) -m pytest -q runtime/python/tests

.PHONY: build-torch
build-torch: ## The nezha Python package with its c10d backend nezha._C, against the pinned torch, into build/python-torch.
	hack/setup-torch.sh
	CMAKE_ARGS="$${CMAKE_ARGS:--G Ninja}" $(TORCH_PY) -m pip install -q --no-build-isolation --no-deps --upgrade --target build/python-torch ./runtime/python

.PHONY: test-torch
test-torch: build-torch ## PyTorch 2 backend: every collective vs gloo, DDP and FSDP2 vs gloo, subgroups, both rails used, a rail cut mid-DDP.
	PYTHONPATH=$(CURDIR)/build/python-torch $(TORCH_PY) -m pytest -q runtime/python/tests_torch2

.PHONY: e2e
e2e: build-go build-runtime ## End-to-end: the single-node local cluster (the cluster, the product, Kubeflow), then the 3-node kind cluster where Docker answers (E2E_KIND=auto|1|0).
	hack/setup.sh cluster
	$(PYTHON) -m pytest -q e2e --ignore=e2e/demo --ignore=e2e/kind
	@if [ "$(E2E_KIND)" = 0 ]; then echo "make e2e: the kind part was not run (E2E_KIND=0)"; \
	elif [ "$(E2E_KIND)" = auto ] && ! docker info >/dev/null 2>&1; then \
	  echo "make e2e: the kind part was NOT run: no Docker engine answers 'docker info' (E2E_KIND=1 makes this an error)"; \
	else $(MAKE) e2e-kind; fi

.PHONY: e2e-oldest
e2e-oldest: build-go build-runtime ## `make e2e`'s local-cluster part on the oldest Kubernetes the chart claims (KUBE_OLDEST_VERSION; builds its node binaries once, ~25 CPU-minutes cold).
	NEZHA_KUBE_RELEASE=oldest hack/setup.sh cluster
	NEZHA_KUBE_RELEASE=oldest $(PYTHON) -m pytest -q e2e --ignore=e2e/demo --ignore=e2e/kind

.PHONY: kind
kind: images ## A 3-node kind cluster (needs Docker) with two rails, Multus, whereabouts and the chart: hack/kind.sh up (down: make kind-down).
	hack/setup.sh kind
	hack/kind.sh up

.PHONY: kind-down
kind-down: ## Delete the kind cluster and its rail networks (hack/kind.sh down).
	hack/kind.sh down

.PHONY: e2e-kind
e2e-kind: build-go build-runtime ## End-to-end on the 3-node kind cluster (needs Docker): jobs on two nodes over two rails; a cut, a gray rail and a down rail on one node.
	hack/setup.sh kind
	NEZHA_KIND_REQUIRED=1 $(PYTHON) -m pytest -q e2e/kind

.PHONY: e2e-kubeflow
e2e-kubeflow: build-go build-runtime ## Only the Kubeflow e2e: real Trainer v2 + JobSet and training-operator controllers (hack/kubeflow.sh) on the local cluster.
	hack/setup.sh cluster
	$(PYTHON) -m pytest -q e2e/nezha/test_kubeflow.py

# The bed's hosts run reno unless told otherwise: BBR v1 (this VM's default) cuts every flow to
# 4 packets for ~200 ms every 10 s (PROBE_RTT), which swamps the few-percent ratios the suite
# judges (bench/results/issue18-perf/README.md, "The 10 s stall"). BENCH_TCP_CC= measures the
# machine's own default; every report names the one it ran.
BENCH_TCP_CC ?= reno
BENCH_CC_FLAG = $(if $(BENCH_TCP_CC),--tcp-cc $(BENCH_TCP_CC))

# make bench judges the host-default targets twice, side by side: once with the bed on the
# machine's own default congestion control (what users run) and once on BENCH_TCP_CC (reno),
# bench/README.md "Targets on the host default and on reno".
.PHONY: bench
bench: build-runtime build-bench build-torch ## The targets on the machine's default congestion control and on BENCH_TCP_CC side by side: suite (vs Gloo, MPTCP, hand-split, static), fault timing, unshaped CPU per byte with a profile, DDP step; then the NCCL plugin benchmark (~2 h measured; quiet machine).
	$(PYTHON) -m bench.run_targets --second-cc $(or $(BENCH_TCP_CC),reno) --torch-python $(TORCH_PY)
	$(PYTHON) -m bench.run_nccl_bench $(BENCH_CC_FLAG)

.PHONY: bench-cc
bench-cc: build-runtime build-bench ## Congestion control for striping, bed on the machine's default: Nezha adaptive with the runtime's choice (NEZHA_TCP_CONGESTION=auto) vs the host's default vs cubic, Gloo on the best rail; 3 ranks, 1-64 MiB; latest-cc.* (~4 min).
	NEZHA_BENCH_RANKS=3 $(PYTHON) -m bench.run_bench --kind cc --scenario homogeneous --scenario heterogeneous \
	  --series nezha-adaptive --series nezha-adaptive-hostcc --series nezha-adaptive-cubic --series gloo-best-rail \
	  --min-bytes 1M --max-bytes 64M

.PHONY: bench-faults
bench-faults: build-runtime build-bench bench-faults-run ## Fault timing (cut, black hole, gray) with the bed on the machine's default congestion control: stall, pace while out, share back after the heal, PASS/MISS; latest-faults.* (~5 min; make bench runs it too, and the chaos run on BENCH_TCP_CC).

.PHONY: bench-faults-run
bench-faults-run:
	$(PYTHON) -m bench.run_bench --chaos --kind faults --series nezha-adaptive --series gloo-best-rail

.PHONY: bench-failover
bench-failover: build-runtime ## Failure timing: all rails down -> error on every rank, restore -> share back; vs the knobs off, PASS/MISS (~3 min).
	$(PYTHON) -m bench.run_failover_timing --repeats 3 --baseline

.PHONY: bench-unshaped
bench-unshaped: build-runtime build-bench ## One rail vs Gloo on UNSHAPED rails (CPU-bound): nezha single/adaptive vs Gloo, busbw + CPU cycles/byte, PASS/MISS, and where rank 0's cycles go at 16 MiB (perf) (~2 min).
	$(PYTHON) -m bench.run_unshaped --profile 16M

.PHONY: bench-split
bench-split: build-runtime ## Learned split: the adaptive split's per-op curve vs the best of a static-split sweep (2 ranks, 800/300 and 600/200/400 Mbit/s, 16 MiB), PASS if within 5 % by op 50 (~5 min).
	$(PYTHON) -m bench.run_split_curve $(BENCH_CC_FLAG)

.PHONY: bench-alltoall
bench-alltoall: build-runtime ## Alltoall: the direct data path vs the allgather-composed one, side by side at 2 and 4 ranks on 500/250 Mbit/s rails, PASS/MISS; then nezha-tune --algorithms at both (~3 min).
	$(PYTHON) -m bench.run_alltoall --tune

.PHONY: bench-nccl
bench-nccl: build-runtime ## The NCCL net plugin benchmark: ring allreduce through it on 2 rails vs 1 rail vs a plain socket, and a cut, black-holed and gray rail mid-loop (~4 min).
	$(PYTHON) -m bench.run_nccl_bench $(BENCH_CC_FLAG)

.PHONY: bench-ddp
bench-ddp: build-torch ## DDP step time: wide MLP on 2 ranks x 2 rails of 400 Mbit/s, nezha vs gloo on one rail vs gloo over MPTCP (~1 min after build-torch).
	$(PYTHON) -m bench.run_ddp_bench --python $(TORCH_PY)

.PHONY: bench-talb
bench-talb: build-torch ## Priority scheduling (TaLB): time until DDP's first-needed bucket is reduced, with vs without priorities (2 ranks x 2 rails of 400 Mbit/s).
	$(PYTHON) -m bench.run_talb_bench --python $(TORCH_PY)

.PHONY: bench-signature
bench-signature: build-torch ## What the torch backend's cross-rank signature check costs an allreduce, checked vs unchecked group in one launch (2 ranks x 2 rails of 500 Mbit/s, ~0.5 min).
	$(PYTHON) -m bench.run_signature_cost --python $(TORCH_PY)

.PHONY: bench-sim
bench-sim: ## Simulators: analytic alpha-beta model + discrete-event simulator (bench/sim/des), fitted to bench/results, validated at 2-8 ranks, run to 1,024; control traffic per rank; plots + report (~2 min).
	$(PYTHON) -m bench.sim.run_sim
	$(PYTHON) -m bench.sim.run_des

.PHONY: bench-scale-runtime
bench-scale-runtime: build-runtime ## Runtime at 8-64 ranks on the test bed (4 ranks per host, 2 rails): start-up, sockets/threads/RSS per rank, 1 KiB latency, five collectives checked, rail cut, rank kill; PASS/MISS and the simulator's error (root; heavy lock; SCALE_RANKS=8,16,32,64).
	flock /tmp/nezha-heavy.lock $(PYTHON) -m bench.run_scale_runtime --ranks $(SCALE_RANKS)
SCALE_RANKS ?= 8,16,32,64

.PHONY: bench-scale
bench-scale: ## Operator at scale: SCALE_WORKERS (1000; the target is 10000) workers on SCALE_NODES (500) kwok nodes, real kube-apiserver; PASS/MISS.
	mkdir -p bench/results
	out=bench/results/scale-$$(date -u +%Y%m%dT%H%M%SZ)-$(SCALE_WORKERS).txt; \
	  operator/hack/scale-bench.sh --workers $(SCALE_WORKERS) --nodes $(SCALE_NODES) | tee "$$out"; \
	  cp "$$out" bench/results/latest-scale-$(SCALE_WORKERS).txt
SCALE_WORKERS ?= 1000
SCALE_NODES   ?= 500

.PHONY: demo
demo: ## The product demo: kind (where Docker works; else the local cluster, root), helm install, a job on 2 rails, a rail cut mid-training, the story and a plot (DEMO_CLUSTER=kind|local, DEMO_KEEP=1 keeps the cluster).
	$(MAKE) images images-train-example
	hack/setup.sh cluster
	hack/demo.sh

.PHONY: demo-runtime
demo-runtime: build-runtime build-bench ## Runtime-only demo: 4 ranks on a 800/300 Mbit/s two-rail test bed, Nezha vs single rail.
	$(PYTHON) -m bench.run_bench --quick

.PHONY: test-demo
test-demo: images images-train-example ## Runs `make demo`'s script end to end and checks its story (root; ~5 min warm).
	hack/setup.sh cluster
	$(PYTHON) -m pytest -q e2e/demo

##@ Quality

.PHONY: lint
lint: lint-chart ## go vet, gofmt, clang-format check, the runtime's layering (includes vs runtime/src/README.md), shellcheck on hack/ and the test-bed scripts, and lint-chart.
	$(PYTHON) runtime/tools/check_layers.py
	$(PYTHON) -m pytest -q runtime/tools/check_layers_test.py
	go vet ./...
	@out=$$(gofmt -l operator cni hack); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	find runtime bench -name '*.cc' -o -name '*.h' | grep -v '/build/' | xargs -r clang-format --dry-run --Werror
	shellcheck -x hack/*.sh hack/kind-sandbox/*.sh .ci/run runtime/tests/testbed/*.sh runtime/fuzz/*.sh

.PHONY: lint-chart
lint-chart: ## kube-score on the rendered chart (oldest and newest Kubernetes claimed, each certificate mode): no finding but those charts/nezha/README.md justifies.
	hack/lint-chart.sh

.PHONY: clean
clean: ## Remove build outputs (caches in ~/.cache/nezha are kept).
	rm -rf bin build
