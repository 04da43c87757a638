// Package pool keeps the registry of prefill and decode workers and the router's per-worker
// load accounting.
//
// The registry comes from the static worker list of the config; endpoints named by DNS are
// re-resolved on an interval (one worker per address, "name@ip:port"), so a Kubernetes headless
// Service works. A config entry with data_parallel_size N (a vLLM server with
// --data-parallel-size N) registers one worker per engine rank and address, "<id>/dp<r>" for
// r > 0 (RankID), each with its own event endpoints (ports + r), load, capacity and scrape of
// its engine="r" series (README "Data-parallel ranks"). Each worker has a role, an endpoint, a capacity (num_gpu_blocks and
// max_num_batched_tokens from the config, else scraped from vLLM's /metrics
// vllm:cache_config_info) and a health verdict. Snapshot copies every eligible worker's load for
// policy.Decide; Book, ReleasePrefill, Release and Sweep implement conditional-disagg.md §5.
//
// Health (README "Health", rules H1–H8): Run probes every worker's /health (on by default,
// every 500 ms, 400 ms timeout; two failures exclude, two successes in a row bring back, with
// exponential backoff while excluded and more successes required of a flapping worker);
// ReportUpstream feeds connect failures and 5xx seen in the response phase; RequestProbe asks
// for an immediate probe (on the loss of a KV event stream, which alone excludes nobody).
// SetHealth and failed /metrics scrapes are further inputs. The pure healthState machine
// (healthstate.go) holds the probe and passive verdict; the prober (health.go) is its shell.
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
//   - Passive signals count only while Run probes: only probes bring a worker back.
//
// Concurrency: every method is safe for concurrent use. One sync.RWMutex (Pool.mu) guards the
// registry, every worker's load, health state and probe schedule, and the booking table;
// Snapshot takes it shared. Run is the only method that starts goroutines (resolve, sweep,
// probe and scrape loops, and at most 32 probes in flight, one per worker); they stop when its
// context is cancelled and Run returns after they have exited.
//
// Imports: policy (its value types) and no other condisagg package; policy never imports pool.
package pool
