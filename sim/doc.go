// Package sim simulates a vLLM v1 worker: a deterministic engine core with the calibrated step
// cost of perf-model.md, and the shell that serves it as vllm-sim.
//
// The core (cost.go, blocks.go, engine.go, step.go) is clock-free and I/O-free: an Engine holds
// the waiting and running queues and a paged KV cache with prefix caching (full blocks only, a
// hash chain per request, refcounted blocks never evicted while in use, free cached blocks
// evicted least recently freed first, hits capped at L-1 tokens), and Step(now) runs one
// scheduler step (continuous batching, chunked prefill bounded by max_num_batched_tokens and
// max_num_seqs, recompute preemption) and returns its duration from the cost formula plus what
// happened: tokens, finished requests and KV events as values. vllm-sim drives it in scaled
// real time; a discrete-event simulator drives the same Engine in virtual time.
//
// The shell turns this into a vLLM worker: encode.go writes events as vLLM's msgpack wire bytes
// (array or map form, int or bytes hashes); publisher.go publishes them over ZeroMQ with vLLM's
// PUB and replay ROUTER protocol (vllm-kv-events.md §1); worker.go runs an Engine in scaled
// real time (--time-scale); server.go and server_resp.go serve the OpenAI API (streaming SSE
// and not), /tokenize, /health, /v1/models and /reset_prefix_cache, with NixlConnector
// kv_transfer_params; metrics.go exposes /metrics under vLLM's own metric names (the simulated
// vLLM surface, hence no condisagg_ prefix); words.go picks output words that re-tokenize to the
// same ids; instance.go wires one vllm-sim process.
//
// Concurrency: an Engine belongs to one goroutine. A Worker owns its Engine on its run
// goroutine and is safe for concurrent use; a Publisher owns each socket on one goroutine.
//
// sim imports tokenizer (the shell) and no other condisagg package; the core files import
// neither net, os, log/slog, prometheus nor goczmq.
package sim
