// Package bookbus shares each router replica's booked load with its peers over NATS, so that
// every replica's decode-busy guard and prefill-busy test see what the whole fleet routed.
//
// It is the I/O shell of the pool's peer bookings (pool.ApplyPeer): the pool reports every
// change of this replica's own bookings through pool.Options.OnLocal (Local here), which
// encodes it (wire.go) into a bounded queue and never blocks the decision; Run's goroutine
// publishes the queue on one subject, sends a heartbeat (the open request ids of each model)
// every Lease/3, and expires peer leases; the subscription's callback decodes peers' deltas
// and applies them to the model's pool. Messages of this very process are ignored.
//
// Invariants:
//   - The decision path never waits on the bus: a full queue or a lost bus drops the delta
//     and counts it (condisagg_bus_deltas_dropped_total{reason}); leases and heartbeats heal
//     what a peer missed, on the receiver's clock.
//   - Losing the bus degrades to local booking (condisagg_bus_connected 0); NATS reconnects
//     forever, and on every (re)connect a replica says hello, heartbeats and re-sends its open
//     bookings; every peer that hears the hello re-sends its own (a resync, at most one per
//     ResyncInterval, bounded), so a joiner or a reconnected replica counts what it missed.
//   - Credentials (a token, a user and password, client certificates) never appear in a URL
//     or a log line.
//
// Concurrency: Local is safe for concurrent use (it is called under the pool's lock and takes
// none of its own beyond a channel send). Attach must happen before Run. One goroutine (Run)
// owns the connection's publishing; NATS owns the subscription's callback goroutine, which
// Run's drain waits for.
//
// Imports: pool (its delta types) and the NATS client; nothing above the pool.
package bookbus
