// Package sim is a deterministic, clock-free vLLM v1 engine core with the calibrated step cost
// of perf-model.md.
//
// An Engine holds the waiting and running queues and a paged KV cache with prefix caching (full
// blocks only, a hash chain per request, refcounted blocks never evicted while in use, free
// cached blocks evicted least recently freed first, hits capped at L-1 tokens), and Step(now)
// runs one scheduler step (continuous batching, chunked prefill bounded by
// max_num_batched_tokens and max_num_seqs, recompute preemption) and returns its duration from
// the cost formula plus what happened: tokens, finished requests and KV events as values.
// cost.go holds the cost model and the calibrated perf models, blocks.go the block pool,
// engine.go the configuration, requests and queues, step.go the scheduler and the events.
//
// The package is pure: no goroutines, no clock (time arrives as Step's now argument), no I/O,
// no cgo. Callers own the clock: sim/vllmsim drives an Engine in scaled real time behind
// vLLM's HTTP and ZeroMQ surface, and cluster drives many in virtual time.
//
// Concurrency: an Engine is not safe for concurrent use; one goroutine owns it.
//
// Imports: of the project only kvindex (its keys), cost and internal/splitmix (its draws); never net, os, log, sync, prometheus,
// goczmq or a wire encoder. imports_test.go enforces this and the absence of go statements,
// select and wall-clock calls, and the package builds with CGO_ENABLED=0.
package sim
