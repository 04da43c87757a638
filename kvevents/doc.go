// Package kvevents ingests vLLM KV-cache events over ZeroMQ into the prefix index.
//
// It has three layers (vllm-kv-events.md §1–§4):
//
//   - Decoding and applying (decode*.go, apply*.go): a hand-written, tolerant msgpack decoder
//     for KVEventBatch payloads and the Applier that turns each batch of one stream into
//     kvindex updates.
//   - The stream machine (stream.go): a pure per-stream sequence state machine (§1.6) that
//     decides, for every live message, replayed batch, replay end and transport reconnect,
//     what to apply, when to replay and when to clear. It has no goroutines, I/O, clock,
//     logging or metrics; imports_test.go enforces it, and testdata/stream/*.txt scripts cover
//     its rules.
//   - The shell (frames.go, subscriber*.go): one Subscriber per stream (worker, dp_rank) owns
//     a SUB socket connected to the engine's PUB endpoint, a socket monitor for reconnects,
//     and one DEALER per replay request, all created, used and destroyed on the goroutine that
//     runs it; it parses frames, feeds the machine and carries out its actions. A Group runs one
//     subscriber per stream, so a slow or dead worker never blocks the others, and adds and
//     removes streams as discovery changes. Central is the optional centralized topology: one
//     bound SUB that every engine connects to, streams told apart by topic, one machine each.
//
// Invariants: live batches are never applied ahead of an earlier replayed range; every
// dropped message, skipped event and clear is counted with a reason; every buffer (pending
// live messages during a replay, payload size, decode arenas) is bounded. When history cannot
// be recovered the stream's index is cleared: the index may under-credit a worker, never
// over-credit it.
//
// Concurrency: Subscriber.Status and Wait, every Group method, and Central's Endpoint, Status
// and Subscriber are safe for concurrent use (Subscriber.mu guards its snapshot, Group.mu its
// stream map, Central.mu its bound endpoint). A Stream and an Applier belong
// to their subscriber goroutine. Metrics come from NewMetrics on an injected registry.
//
// kvevents imports kvindex and nothing else of condisagg.
package kvevents
