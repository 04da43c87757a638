// Package e2e runs the whole condisagg system on loopback and checks every decision path
// through a real Envoy.
//
// A Stack is Envoy 1.40 (BUFFERED ext_proc, fail-open, plus an optional fail-closed twin),
// `condisagg serve`, simulated vLLM workers (vllm-sim with KV events over ZeroMQ and
// NixlConnector P/D roles) and one pd-sidecar per prefill worker, every process on 127.0.0.1
// with ephemeral ports. Prefill-first layout: the router advertises each prefill worker at its
// sidecar's address (Envoy's prefill route dials x-gateway-destination-endpoint), and the
// sidecar dials the simulator behind it (--dial) and forwards header-less requests there
// (--default-decode-host).
//
// The tests (e2e_test.go) build the binaries once per run and assert through Envoy, with the
// worker that served (each simulator's finished-request counter), the decision header
// (--debug-headers) and `condisagg explain` / `condisagg workers`. cmd/demo uses the same
// Stack. Processes are owned by the Stack and stopped by Close; nothing outlives a test.
//
// Each process is an internal/proc supervisor: output tail, parsed log lines, pause/resume,
// SIGTERM then SIGKILL, and death with the test binary on Linux.
//
// e2e imports envoy, proto, internal/proc and internal/repo; it is imported only by cmd/demo and
// cmd/bench-e2e.
package e2e
