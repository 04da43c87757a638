#!/usr/bin/env bash
# Starts one real vLLM engine (CPU build, from scripts/vllm-venv.sh) in the
# foreground, with KV-cache events on a ZMQ PUB socket and a replay ROUTER.
#
#   scripts/vllm-engine.sh --model DIR [--port 18100] [--kv-port 15557] [--replay-port 15567]
#                          [--blocks 128] [--max-model-len 2048] [--topic kv-events]
#                          [--name NAME] [--opt-level 0] [--buffer-steps N] [-- EXTRA_VLLM_ARGS...]
#
# DIR is a checkpoint from scripts/vllm-tiny-model.py. The HTTP server listens
# on 127.0.0.1:PORT. The event sockets bind tcp://*:KV_PORT and
# tcp://*:REPLAY_PORT: vLLM binds only when the endpoint contains "*" (or "::",
# ipc://, inproc://) and *connects* otherwise, so tcp://127.0.0.1:PORT would
# make the PUB dial out instead of listening (vllm/distributed/kv_events.py,
# ZmqEventPublisher._is_bind_endpoint).
#
# --blocks sets --num-gpu-blocks-override: a small KV cache (default 128 blocks
# of 32 tokens = 4096 tokens) so that evictions (BlockRemoved) are easy to
# force. --max-model-len must fit in it. --kv-cache-memory-bytes (64 MiB by
# default, VLLM_KV_CACHE_BYTES) is passed as well: without it the CPU worker
# insists on reserving --gpu-memory-utilization (0.92) of the NUMA node's
# memory at startup and refuses to start when that much is not free
# (vllm/v1/worker/cpu_worker.py); the override then caps the block count.
#
# --buffer-steps sets the replay ring size (vLLM's default: 10000 batches).
#
# --opt-level is vLLM's -O (default here 0: no torch.compile). On this machine
# the default level (inductor C++ codegen) adds about a minute to every start,
# because this build fails to reload its AOT compile cache ("'function' object
# has no attribute 'finalize_loading'") and compiles again each time; the
# KV-cache behaviour does not depend on it. Pass --opt-level 2 for vLLM's default.
#
# The process runs in the foreground; run it in the background yourself and
# stop it with kill <pid> (it shuts its EngineCore child down on SIGTERM).
# Startup takes about a minute on this 2-core machine; poll GET /health.
#
# The `vllm` console script is not used: this build's fails at import; the
# module entry point works.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
venv="${VLLM_VENV:-$repo/.cache/vllm-venv}"

opt=0 buffer_steps="" model="" port=18100 kv_port=15557 replay_port=15567 blocks=128 max_len=2048 topic="kv-events" name=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --kv-port) kv_port="$2"; shift 2 ;;
    --replay-port) replay_port="$2"; shift 2 ;;
    --blocks) blocks="$2"; shift 2 ;;
    --max-model-len) max_len="$2"; shift 2 ;;
    --topic) topic="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --opt-level) opt="$2"; shift 2 ;;
    --buffer-steps) buffer_steps="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "vllm-engine: unknown argument $1 (extra vLLM flags go after --)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "vllm-engine: --model DIR is required" >&2; exit 2; }
[ -x "$venv/bin/python" ] || { echo "vllm-engine: no venv at $venv (run scripts/vllm-venv.sh)" >&2; exit 1; }

kv_bytes="${VLLM_KV_CACHE_BYTES:-67108864}"
kv_cfg=$(printf '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%s","replay_endpoint":"tcp://*:%s","topic":"%s"%s}' \
  "$kv_port" "$replay_port" "$topic" "${buffer_steps:+,\"buffer_steps\":$buffer_steps}")

# Quieter and self-contained: no usage stats, no hub access (the model is local).
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Compiled graphs and caches stay inside the repo cache dir.
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$repo/.cache/vllm-cache}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$repo/.cache/inductor-cache}"
# Exposes POST /reset_prefix_cache (and the other development routes), which the
# fact probes use to produce AllBlocksCleared; set VLLM_SERVER_DEV_MODE=0 to hide them.
export VLLM_SERVER_DEV_MODE="${VLLM_SERVER_DEV_MODE:-1}"
# The machine has 2 cores shared with other work: a worker bound to one core.
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-auto}"

exec "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$model" \
  ${name:+--served-model-name "$name"} \
  --host 127.0.0.1 --port "$port" \
  --block-size 32 \
  --num-gpu-blocks-override "$blocks" \
  --kv-cache-memory-bytes "$kv_bytes" \
  --max-model-len "$max_len" \
  --enable-prompt-tokens-details \
  -O"$opt" \
  --kv-events-config "$kv_cfg" \
  "$@"
