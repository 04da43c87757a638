// Package pool keeps the registry of prefill and decode workers and the router's per-worker
// load accounting.
//
// It is a pure core: no sockets, HTTP, DNS, goroutines or wall-clock reads (every time comes
// from Options.Clock). Its shell, pool/probe, does the I/O and feeds the results through the
// methods below, as kvevents/zmq feeds kvevents: DueProbes, ProbeDone and ProbeCancelled
// (health probes, woken by ProbeKick, counted only between BeginProbing and EndProbing),
// ScrapeTargets and ApplyScrape (/metrics, parsed here by ParseEngineMetrics), Lookups and
// ApplyLookups (DNS), and Expire (the booking TTL). imports_test.go enforces it.
//
// The registry comes from the static worker list of the config; endpoints named by DNS are
// re-resolved on an interval by the shell (one worker per address, "name@ip:port"), so a
// Kubernetes headless Service works. A config entry with data_parallel_size N (a vLLM server with
// --data-parallel-size N) registers one worker per engine rank and address, "<id>/dp<r>" for
// r > 0 (RankID), each with its own event endpoints (ports + r), load, capacity and scrape of
// its engine="r" series (README "Data-parallel ranks"). Each worker has a role, an endpoint, a capacity (num_gpu_blocks and
// max_num_batched_tokens from the config, else scraped from vLLM's /metrics
// vllm:cache_config_info) and a health verdict. Snapshot copies every eligible worker's load for
// policy.Decide; Book, ReleasePrefill, Release and Sweep implement conditional-disagg.md §5.
//
// Health (README "Health", rules H1–H8): pool/probe probes every worker's /health when the
// schedule here says (on by default, every 500 ms, 400 ms timeout; two failures exclude, two
// successes in a row bring back, with exponential backoff while excluded and more successes
// required of a flapping worker); ReportUpstream feeds connect failures and 5xx seen in the
// response phase; RequestProbe asks for an immediate probe (on the loss of a KV event stream,
// which alone excludes nobody). SetHealth and failed /metrics scrapes are further inputs. The
// pure healthState machine (healthstate.go) holds the probe and passive verdict; health.go
// keeps the probe schedule and applies outcomes.
//
// Invariants:
//   - apt(w) is the plain sum of open prefill entries; adb(w) counts each chained block key
//     once however many bypasses share it, plus unique blocks (remote bookings, partial tails).
//   - The active key set of a worker is prefix-closed along every chain, which Snapshot uses to
//     count a request's new blocks with a binary search.
//   - Book of a bypass re-checks the decode-busy guard on current state under the accounting
//     lock and never re-selects; releases are idempotent; bookings older than the TTL expire.
//   - Thresholds and the guard use router-side bookings only. Scraped values fill unknown
//     capacities and raise the active-request count (max of booked and running+waiting while
//     fresh); they never change apt or adb.
//   - A worker that leaves discovery loses its bookings and is excluded from selection at once.
//   - A worker is eligible (in Snapshot, bookable, worker_healthy 1) only while no health input
//     excludes it: SetHealth, the scrape, and the probe-and-passive verdict. Every change of
//     eligibility bumps the snapshot version, closes the Changed channel and counts one
//     condisagg_worker_health_transitions_total{reason}.
//   - Passive signals count only while the shell probes: only probes bring a worker back.
//   - Peer bookings (peer.go, fed by bookbus through ApplyPeer) count in the load exactly as
//     local ones; each holds for a lease measured on Options.Clock from its last delta, so a
//     silent peer's load ends and a peer's clock never enters. Deltas are idempotent; their
//     number is bounded by Config.MaxPeerBookings.
//
// Concurrency: every method is safe for concurrent use. One sync.RWMutex (Pool.mu) guards the
// registry, every worker's load, health state and probe schedule, and the booking table;
// Snapshot takes it shared. The pool starts no goroutine; pool/probe's Run owns the loops.
//
// Imports: policy (its value types) and internal/openaddr (the active key table), no other
// condisagg package; policy never imports pool. No net, net/http, os or syscall.
package pool
