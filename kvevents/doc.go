// Package kvevents turns vLLM KV-cache event batches into prefix-index updates and decides, per
// stream, which batches to apply, when to replay and when to clear.
//
// It is the functional core of event ingestion (vllm-kv-events.md §1–§4); the transport lives
// in kvevents/zmq (package kvzmq), which owns every socket and goroutine and calls in here:
//
//   - Decoding (decode*.go, event.go): a hand-written, tolerant msgpack decoder for
//     KVEventBatch payloads of every vLLM era, into a reused Batch.
//   - Applying (apply*.go): the Applier turns each batch of one stream into kvindex updates
//     under one index write lock per batch, and counts every skipped event by reason.
//   - Frames (frames.go): parsing of live messages and replay replies given as frame lists,
//     and the replay request frames.
//   - The stream machine (stream.go): a pure per-stream sequence state machine (§1.6) that
//     decides, for every live message, replayed batch, replay end and transport reconnect,
//     what to apply, when to replay and when to clear. It has no goroutines, I/O, clock,
//     logging or metrics; testdata/stream/*.txt scripts cover its rules.
//
// Invariants: live batches are never applied ahead of an earlier replayed range; every skipped
// event and dropped batch is counted with a reason; every buffer (pending live messages during
// a replay, payload size, decode arenas) is bounded. When history cannot be recovered the
// machine asks for the stream's index to be cleared: the index may under-credit a worker,
// never over-credit it.
//
// Concurrency: nothing here starts a goroutine or takes a lock of its own. A Stream and an
// Applier belong to the goroutine that feeds them; the kvindex.Index they write to is safe for
// concurrent use. Metrics come from NewMetrics on an injected registry.
//
// kvevents imports kvindex and nothing else of condisagg; it uses no cgo, no ZeroMQ, no
// network, file system, clock or logging, and builds with CGO_ENABLED=0. imports_test.go
// enforces this.
package kvevents
