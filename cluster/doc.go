// Package cluster simulates a prefill/decode fleet in virtual time with the real router in the
// loop, so that routing modes and conditional-disaggregation thresholds can be compared on a
// trace before production.
//
// A Cluster holds N prefill and M decode sim.Engines (the calibrated step-time model of
// perf-model.md) and one event queue in virtual time: request arrivals, engine step
// completions, KV transfer wake-ups and the delivery of each engine's KV events to a
// kvindex.Index after Config.EventDelay. Every arrival is routed as extproc routes it:
// kvindex.AppendKeys and Index.Overlap, pool.Snapshot, policy.Decide, pool.Book (a denied bypass
// is demoted with policy.Demote and booked again). The remote path runs a PrefillOnly request
// on the prefill engine, then the same prompt as a RemotePrefill request on the decode engine,
// whose engine models the KV transfer (CostModel.TransferTime of the blocks it does not hold)
// and caches the received blocks, emitting BlockStored. A bypass runs the whole request on the
// decode engine. The request's route.Ticket gets the answer's events on the virtual clock, as
// extproc reports them on the response stream (the sidecar reports the end of the prefill leg
// on the response headers): the prefill leg's end (remote path) or the first output token ends
// the prefill booking, completion (Finish, with the output length) the rest, and the ticket
// teaches the router's feedback.Learner what extproc's tickets teach it.
//
// Invariants: a run is deterministic for a Config (seed included) and a workload; every
// request either finishes or carries an error in its Result; after Run returns every booking
// has been released, so the pool's load is zero (Report.ResidualLoad).
//
// Deviations from a live fleet, by design: the transfer is not overlapped with the prefill
// (layer-wise streaming would hide part of it), the network adds nothing, steps have no noise,
// the booking TTL sweep never runs (every request completes), and KV event streams are never
// silent.
//
// Concurrency: a Cluster is used by one goroutine; Run builds a fresh one per call, so
// concurrent Runs are independent.
//
// Imports: sim, policy, pool, kvindex and workload; never extproc or cmd.
package cluster
