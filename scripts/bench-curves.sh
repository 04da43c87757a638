#!/usr/bin/env bash
# Measures and draws the scale curves of BENCHMARKS.md "Scale curves" (`make bench-curves`):
# decision latency through gRPC (extproc BenchmarkDecisionLatency + BenchmarkDecisionScale) and
# the overlap lookup of condisagg and Dynamo's indexes (cmd/bench-peers, 50 % shared prefix),
# against the fleet size (8k tokens) and against the prompt length (64 workers). The raw outputs
# and the four SVG files go to bench/curves/. CURVES_COUNT (default 1) repeats the decision
# benchmarks; the curves take the median run's p99 per point. CURVES_PLOT_ONLY=1 redraws the
# SVG files from the committed raw outputs without measuring.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/curves
mkdir -p "$out"
if [[ "${CURVES_PLOT_ONLY:-}" != 1 ]]; then
  {
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "go: $(go version)"
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$out/conditions.txt"
  CONDISAGG_SCALE_BENCH=1 go test -run '^$' -bench 'DecisionLatency|DecisionScale' -benchtime 1x -count "${CURVES_COUNT:-1}" -timeout 2h ./extproc/ | tee "$out/decisions.txt"
  rm -f "$out/lookups.jsonl"
  go build -o "$out/.bench-peers" ./cmd/bench-peers
  "$out/.bench-peers" -tokens 8192 -workers 8,64,256,1024 -overlap 50 -indexes radix,crtc -out "$out/lookups.jsonl" | tee "$out/lookups-workers.txt"
  "$out/.bench-peers" -tokens 1024,32768,131072 -workers 64 -overlap 50 -indexes radix,crtc -out "$out/lookups.jsonl" | tee "$out/lookups-tokens.txt"
  rm -f "$out/.bench-peers"
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/conditions.txt"
fi
go run ./cmd/bench-curves -decisions "$out/decisions.txt" -lookups "$out/lookups.jsonl" -dir "$out"
echo "bench-curves: $out/*.svg written"
