# condisagg — build, test and benchmark entry points.
# `make test` is the one test command; it installs what a fresh Debian machine lacks first.

GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1s

.PHONY: all deps build test test-short test-kube kube-tools vet bench bench-e2e bench-peers bench-curves chaos fuzz demo conformance conformance-vllm conformance-vllm-fields conformance-pd conformance-pd-handoff sim-vs-real image image-test fleet-vllm-args conformance-llmd-sim conformance-engines clean

all: build

# deps is idempotent: every step checks before it installs.
deps:
	@bash scripts/deps.sh

build: deps
	$(GO) build $(PKGS)
	$(GO) build -o bin/ ./cmd/...

vet: deps
	$(GO) vet $(PKGS)
	cd deploy && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# The cores build without cgo (no czmq needed to simulate or decide); internal/layers checks the
# same closure and the allowed package graph.
CORES := ./cost ./policy ./feedback ./kvindex ./pool ./pool/kube ./workload ./sim ./kvevents ./route ./decisionlog ./cluster ./tokenizer ./tune

test: deps vet
	CGO_ENABLED=0 $(GO) build $(CORES)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	cd deploy && $(GO) test -count=1 -timeout 20m ./...

# A real kube-apiserver, etcd and kubectl for the Kubernetes discovery test (docs/discovery.md)
# and the walk through docs/deploy.md (deploy/walk). Not part of deps: kube-apiserver takes
# ~10-17 minutes to build on two cores. make test runs pool/kube TestAPIServer and deploy/walk
# TestDeployWalk when they are installed and skips them otherwise; test-kube requires them.
kube-tools:
	@bash scripts/install-kube-tools.sh >/dev/null

test-kube: deps kube-tools
	CONDISAGG_KUBE_E2E=1 $(GO) test -race -count=1 -run 'TestAPIServer|TestWatcher|TestMembers' -v ./pool/kube
	cd deploy && CONDISAGG_KUBE_E2E=1 $(GO) test -race -count=1 -timeout 15m -run 'TestDeployWalk|TestParseDoc' -v ./walk

test-short: deps
	$(GO) test -short -count=1 $(PKGS)
	cd deploy && $(GO) test -short -count=1 ./...

# Runs every benchmark and rewrites the generated tables of BENCHMARKS.md.
bench: deps
	BENCHTIME=$(BENCHTIME) bash scripts/bench.sh

# Replays a short slice through the live stack (Envoy, condisagg, vllm-sim, pd-sidecar) and through
# the cluster simulator, and compares TTFT p50 / TPOT p50 in simulated time.
bench-e2e: deps
	$(GO) run ./cmd/bench-e2e

# condisagg's KV index against Dynamo's (crates.io dynamo-kv-router, pinned in bench/peers) on
# the same recorded vLLM event batches and lookup sets; prints the ratio table of BENCHMARKS.md
# "Peers". Not part of `make test` (`go test ./...` builds and checks the Go side; the Rust harness
# needs cargo and its first build takes minutes). PEERS_FLAGS narrows the grid, e.g.
# PEERS_FLAGS='-tokens 8192 -workers 64 -overlap 95'.
PEERS_FLAGS ?=
bench-peers: deps
	cd bench/peers && cargo build --release --locked
	$(GO) run ./cmd/bench-peers $(PEERS_FLAGS)

# The scale curves of BENCHMARKS.md "Scale curves": decision p99 (extproc, through gRPC) and the
# overlap lookup next to Dynamo's indexes (bench-peers), against workers (8 to 1,024) and prompt
# length (1k to 128k tokens); raw outputs and SVG files in bench/curves/. Takes about 15 minutes
# here. CURVES_COUNT=3 repeats the decision runs; CURVES_PLOT_ONLY=1 redraws from the raw files.
bench-curves: deps
	cd bench/peers && cargo build --release --locked
	bash scripts/bench-curves.sh

# The chaos suite at full size through the real Envoy (1,000 concurrent streams; kill -9 of
# workers and of condisagg, hostile clients and KV event publishers), then kill -9 of one of two
# replicas behind the Helm chart's Envoy, and rewrites the measured tables of docs/reliability.md. `make test` runs its short size (about a minute).
chaos: deps
	bash scripts/chaos.sh

# Runs every fuzz target briefly (FUZZTIME each); a crasher stays in testdata/fuzz/.
fuzz: deps
	@bash scripts/fuzz.sh $(FUZZTIME)

# Re-runs the reference implementations live: Hugging Face tokenizers/transformers against the
# committed tokenizer fixtures, and the real msgspec encoder against the committed KV event bytes.
conformance: deps
	python3 -m pip install -q tokenizers==0.23.3 transformers==5.24.0 jinja2==3.1.6 msgspec==0.23.0
	python3 tokenizer/testdata/gen_conformance.py --check
	cd kvevents/testdata && python3 gen_fixtures.py
	git diff --exit-code -- kvevents/testdata

# Opt-in, not part of `make test` (a real engine takes minutes and ~3.5 GiB): one real vLLM 0.32
# CPU engine, condisagg serve and the real Envoy in front; every request's predicted cached tokens
# (Admin Explain, and the credit of the request as routed) against the engine's
# usage.prompt_tokens_details.cached_tokens, through a reset, a router and an engine restart. The venv and the tiny model (with its
# LoRA adapter, for CONFORMANCE_VLLM_FLAGS=-lora) are built only when missing. Report:
# docs/conformance.md.
VLLM_VENV_DIR   := .cache/vllm-venv
TINY_QWEN3      := .cache/models/tiny-qwen3
TINY_QWEN3_LORA := .cache/models/tiny-qwen3-lora
conformance-vllm: deps conformance-vllm-fields
	@test -x $(VLLM_VENV_DIR)/bin/python || bash scripts/vllm-venv.sh
	@test -f $(TINY_QWEN3)/model.safetensors -a -f $(TINY_QWEN3_LORA)/adapter_model.safetensors || \
		$(VLLM_VENV_DIR)/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out $(TINY_QWEN3) --lora-out $(TINY_QWEN3_LORA)
	$(GO) build -o bin/ ./cmd/condisagg ./cmd/conformance-vllm
	bin/conformance-vllm $(CONFORMANCE_VLLM_FLAGS)

# Opt-in, not part of `make test`: llm-d's inference simulator (its KV event PUB dials out)
# publishing to serve's bound socket (router.kv_events_bind); per probe, the simulator's own
# cached_tokens against condisagg's overlap for the same token ids, with and without eviction.
# It is built from source snapshots (the Go proxy refuses llm-d modules here): set
# LLMD_SIM_SRC and LLMD_ROUTER_SRC (scripts/llmdsim/run.sh). Report: docs/conformance.md.
conformance-llmd-sim: deps
	bash scripts/llmdsim/run.sh

# Opt-in, not part of `make test`: the other engines' own KV event code against condisagg serve
# (SGLang 0.5.23's RadixCache and publisher, Dynamo 1.6.1's TRT-LLM publisher and key function,
# llm-d's inference simulator), each per probe against the producer's own truth. Creates its
# venvs under .cache/engines (scripts/engines/venvs.sh, every package pinned; SGLang's on top of
# the vLLM venv's torch). ENGINES_STEPS sets the corpus length. Report: docs/conformance.md.
conformance-engines: deps
	bash scripts/engines/run.sh

# vLLM's own pydantic request models (from the vLLM venv, no engine) re-read the corpus of
# route/testdata/vllm_request_fields.jsonl live and must agree with the committed readings that
# route's TestVLLMRequestFields checks condisagg's parsers against (~30 s).
conformance-vllm-fields:
	@test -x $(VLLM_VENV_DIR)/bin/python || bash scripts/vllm-venv.sh
	$(VLLM_VENV_DIR)/bin/python route/testdata/gen_vllm_fields.py --check

# Opt-in, not part of `make test` (two real engines take minutes and ~6 GiB): a real vLLM 0.32
# prefill engine and decode engine moving the KV cache over NixlConnector (UCX on loopback, CPU
# buffers), pd-sidecar, condisagg serve and the real Envoy; every request's route and transfer
# outcome against the decode engine's own counters, injected transfer failures under both
# kv_load_failure_policy values, and SIGKILL of each engine mid-request. NIXL for CPU is the
# PyPI nixl + nixl-cu13 pair (the suffix follows torch's CUDA major), added to the same venv.
# Report: docs/conformance.md.
NIXL := nixl==1.5.1 nixl-cu13==1.5.1
conformance-pd: deps
	@test -x $(VLLM_VENV_DIR)/bin/python || bash scripts/vllm-venv.sh
	@$(VLLM_VENV_DIR)/bin/python -c 'import nixl' 2>/dev/null || \
		$(VLLM_VENV_DIR)/bin/python -m pip install -q --disable-pip-version-check --no-deps $(NIXL)
	@test -f $(TINY_QWEN3)/model.safetensors -a -f $(TINY_QWEN3_LORA)/adapter_model.safetensors || \
		$(VLLM_VENV_DIR)/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out $(TINY_QWEN3) --lora-out $(TINY_QWEN3_LORA)
	$(GO) build -o bin/ ./cmd/condisagg ./cmd/pd-sidecar ./cmd/conformance-pd
	bin/conformance-pd $(CONFORMANCE_PD_MODE) $(CONFORMANCE_PD_FLAGS)

# The handoff placement (slo_handoff) on the same real engines: a prefill engine and two kv_both
# decode engines (three at once, ~3 GiB), a pd-sidecar in front of each worker. Same as
# `make conformance-pd CONFORMANCE_PD_MODE=-handoff`. Report: docs/conformance.md.
conformance-pd-handoff:
	$(MAKE) conformance-pd CONFORMANCE_PD_MODE=-handoff

# Opt-in, not part of `make test` (two real engines, a calibration and 3 repeats of 4 layouts
# take about an hour and ~6 GiB): the simulator against real vLLM 0.32 CPU engines, each pinned
# to its own core, calibrated with `condisagg calibrate` (the pair through pd-sidecar over
# NixlConnector); one Mooncake slice (SIM_VS_REAL_TRACE) replayed through Envoy and condisagg
# aggregated, 1P1D and conditional, and simulated with the calibrated model. Report:
# docs/sim-fidelity.md.
SIM_VS_REAL_TRACE := ../shared/traces/mooncake/conversation_trace.jsonl
sim-vs-real: deps
	@test -x $(VLLM_VENV_DIR)/bin/python || bash scripts/vllm-venv.sh
	@$(VLLM_VENV_DIR)/bin/python -c 'import nixl' 2>/dev/null || \
		$(VLLM_VENV_DIR)/bin/python -m pip install -q --disable-pip-version-check --no-deps $(NIXL)
	@test -f $(TINY_QWEN3)/model.safetensors -a -f $(TINY_QWEN3_LORA)/adapter_model.safetensors || \
		$(VLLM_VENV_DIR)/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out $(TINY_QWEN3) --lora-out $(TINY_QWEN3_LORA)
	$(GO) build -o bin/ ./cmd/condisagg ./cmd/pd-sidecar ./cmd/loadgen ./cmd/sim-vs-real
	bin/sim-vs-real -trace $(SIM_VS_REAL_TRACE) $(SIM_VS_REAL_FLAGS)

# The condisagg-fleet chart's vLLM command lines through vLLM 0.32's own `vllm serve` parser
# (deploy/helm TestFleetVLLMParsesArgs, which make test skips without the venv).
fleet-vllm-args: deps
	@test -x $(VLLM_VENV_DIR)/bin/python || bash scripts/vllm-venv.sh
	cd deploy && FLEET_VLLM_REQUIRED=1 VLLM_VENV=$(abspath $(VLLM_VENV_DIR)) $(GO) test -count=1 -run TestFleetVLLMParsesArgs -v ./helm

# Envoy + condisagg + 2 prefill and 2 decode simulated workers with their sidecars on loopback:
# a multi-turn conversation and fresh prompts, one row per request, then a clean shutdown.
demo: deps
	$(GO) run ./cmd/demo

# The images of condisagg, pd-sidecar and vllm-sim (deploy/image, docs/deploy.md §3), built without
# a container engine or privileges: bin/images/oci (an OCI layout holding all three, tagged
# NAME:VERSION) and bin/images/NAME-VERSION.tar (docker archives for docker/podman load). VERSION
# is the chart's appVersion, so the chart's default image is the one built. `make test` builds
# and checks them too (deploy/image TestImages).
IMAGE_FLAGS ?=
image: deps
	cd deploy && $(GO) run ./cmd/image -out ../bin/images $(IMAGE_FLAGS)

# Opt-in, not part of `make test`: running containers needs root (or user namespaces) and a
# container engine, which a CI machine may not allow. Installs Debian's podman and runc, then
# starts each image (--version) and the e2e stack with condisagg, vllm-sim and pd-sidecar as
# containers behind the real Envoy (deploy/image TestImagesRun, ~1 minute once built).
image-test: deps
	@bash scripts/install-podman.sh >/dev/null
	cd deploy && CONDISAGG_IMAGE_E2E=1 $(GO) test -count=1 -timeout 20m -run 'TestImages' -v ./image

clean:
	rm -rf bin bench.out chaos.out
