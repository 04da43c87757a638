// Package vllmsim serves a sim.Engine as a simulated vLLM worker (vllm-sim): vLLM's OpenAI
// HTTP API, /metrics, and KV events over ZeroMQ with vLLM's replay protocol.
//
// It is the imperative shell around the pure engine of package sim. worker.go runs an Engine in
// scaled real time (--time-scale) on one goroutine and hands tokens to per-request Streams;
// encode.go writes the engine's events as vLLM's msgpack KVEventBatch (array or map form, int
// or bytes hashes); publisher.go publishes them with vLLM's PUB and replay ROUTER protocol
// (vllm-kv-events.md §1) and parses --kv-events-config; server.go and server_resp.go serve
// /v1/completions and /v1/chat/completions (streaming SSE and not), /tokenize, /health,
// /v1/models and /reset_prefix_cache, with NixlConnector kv_transfer_params; metrics.go
// exposes /metrics under vLLM's own metric names (the simulated vLLM surface, hence no
// condisagg_ prefix); words.go picks output words that re-tokenize to the same ids; instance.go
// wires one vllm-sim process.
//
// Concurrency: a Worker owns its Engine on its run goroutine and is safe for concurrent use; a
// Publisher owns each of its sockets on one goroutine; Instance.Run starts and waits for both.
//
// Imports: of the project sim, tokenizer, kvevents and internal/splitmix, nothing of the router
// (imports_test.go).
package vllmsim
