#!/usr/bin/env bash
# Opt-in (make conformance-llmd-sim; not part of make test): llm-d's inference simulator, whose
# KV event PUB dials out, publishing to `condisagg serve`'s bound socket (router.kv_events_bind).
# Two runs of probe.py: a cache large enough to keep everything (every probe must agree), then a
# small one that evicts (no probe may over-credit; docs/conformance.md explains the simulator's
# under-counted probes there).
#
# The simulator is built from source, github.com/llm-d/llm-d-inference-sim at commit eec055a
# (its go.mod requires github.com/llm-d/llm-d-router v0.10.0):
# - by default the source comes from the Go module proxy (`go mod download`);
# - LLMD_SIM_SRC=/path/to/a/snapshot uses a local copy instead, and LLMD_ROUTER_SRC=/path
#   replaces the llm-d-router dependency with a local copy too (where the proxy refuses llm-d
#   modules, as on the machine the results of docs/conformance.md were measured on).
# Both are copied into a temporary directory (never modified) and built with CGO_ENABLED=0
# (~1.5 min once the modules are cached, ~10 min on two cores from cold).
# Without network access to huggingface.co the simulator tokenizes with its own dummy
# tokenizer; probe.py keys both sides by the simulator's token ids, so that does not matter.
set -euo pipefail
LLMD_SIM_VERSION=eec055a
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

if [ -z "${LLMD_SIM_SRC:-}" ]; then
	if ! LLMD_SIM_SRC=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/llm-d/llm-d-inference-sim@$LLMD_SIM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'); then
		echo "llmdsim: the Go module proxy did not serve github.com/llm-d/llm-d-inference-sim@$LLMD_SIM_VERSION;" \
			"set LLMD_SIM_SRC (and LLMD_ROUTER_SRC for its llm-d-router v0.10.0) to source snapshots" >&2
		exit 2
	fi
fi
cp -r "$LLMD_SIM_SRC" "$work/sim"
chmod -R u+w "$work/sim"
if [ -n "${LLMD_ROUTER_SRC:-}" ]; then
	cp -r "$LLMD_ROUTER_SRC" "$work/router"
	(cd "$work/sim" && go mod edit -replace github.com/llm-d/llm-d-router=../router)
fi
(cd "$work/sim" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$work/llm-d-inference-sim" ./cmd/llm-d-inference-sim)
(cd "$root" && go build -o "$work/condisagg" ./cmd/condisagg)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(free_port) bind_port=$(free_port) grpc=$(free_port) admin=$(free_port) http=$(free_port)
cat >"$work/c.yaml" <<YAML
listen: 127.0.0.1:$grpc
admin_listen: 127.0.0.1:$http
admin_grpc_listen: 127.0.0.1:$admin
pool: {health_interval: -1s}
model: {tokenizer: $root/tokenizer/testdata/models/qwen3, block_size: 16}
router:
  kv_events: true
  kv_events_bind: tcp://127.0.0.1:$bind_port
  kv_events_topics:
    - {topic: "kv@127.0.0.1:$sim_port@fake-model", worker: sim-0}
workers:
  - {name: sim-0, role: decode, endpoint: 127.0.0.1:$sim_port, num_gpu_blocks: 1024}
YAML
"$work/condisagg" serve --config "$work/c.yaml" 2>"$work/serve.log" &
pids+=($!)

wait_http() { for _ in $(seq 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
wait_http "http://127.0.0.1:$http/healthz"

status=0
for run in "1024 1 --require-all" "48 2"; do
	set -- $run
	echo "== kv-cache-size $1 (seed $2)" >&2
	POD_IP=127.0.0.1 "$work/llm-d-inference-sim" --model fake-model --port "$sim_port" --enable-kvcache \
		--zmq-endpoint "tcp://127.0.0.1:$bind_port" --block-size 16 --kv-cache-size "$1" --max-model-len 8192 \
		2>"$work/sim.log" &
	sim=$!
	pids+=($sim)
	wait_http "http://127.0.0.1:$sim_port/health"
	python3 "$root/scripts/llmdsim/probe.py" --sim "http://127.0.0.1:$sim_port" --condisagg "$work/condisagg" \
		--admin "127.0.0.1:$admin" --probes 60 --seed "$2" ${3:-} >"$work/probe-$1.json" || status=1
	"$work/condisagg" workers --addr "127.0.0.1:$admin" >&2
	kill "$sim"; wait "$sim" 2>/dev/null || true   # the next run is a restart: its seq starts at 1 again
done
curl -s "http://127.0.0.1:$http/metrics" | grep -E '^condisagg_kv_(stream_clears|events|messages_dropped)_total' | grep -v ' 0$' >&2
exit $status
