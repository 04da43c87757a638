// Package kvzmq receives vLLM KV events over ZeroMQ and feeds them to the kvevents core: it is
// the imperative shell around kvevents' stream machine and Applier (vllm-kv-events.md §1).
//
// One Subscriber per stream (worker, dp_rank) owns a SUB socket connected to the engine's PUB
// endpoint, a socket monitor for transport reconnects, and one DEALER per replay request, all
// created, used and destroyed on the goroutine that runs it. It parses frames with kvevents,
// feeds the stream's kvevents.Stream and carries out the actions it returns: apply a batch
// through the stream's kvevents.Applier, request a replay, clear the stream's index. A Group
// runs one subscriber per stream, so a slow or dead worker never blocks the others, and adds
// and removes streams as discovery changes. Central is the optional centralized topology: one
// bound SUB that every engine connects to, streams told apart by topic, one machine each.
//
// Every decision about sequence numbers, gaps, replays and restarts is the core's; this
// package only moves bytes, keeps time (replay timeouts) and publishes status and metrics.
//
// Concurrency: Subscriber.Status and Wait, every Group method, and Central's Endpoint, Status
// and Subscriber are safe for concurrent use (Subscriber.mu guards its snapshot, Group.mu its
// stream map, Central.mu its bound endpoint). Every goroutine belongs to a Group (stopped by
// Remove or Close) or to the caller of Subscriber.Run or Central.Run (stopped by its context).
// Metrics come from NewMetrics on an injected registry.
//
// kvzmq imports kvevents and kvindex (the index handle each Applier writes to) and nothing else
// of condisagg. It links czmq through goczmq and cgo (monitor.go).
package kvzmq
