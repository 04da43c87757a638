// Package policy decides, per request, between remote prefill and a local-prefill bypass on one
// decode worker, following conditional-disagg.md (Dynamo's --router-conditional-disagg).
//
// Decide runs the decision procedure (no prefill workers, disabled, preconditions, decode
// preview, eff/ratio, prefill preview for load policies, the policy with strict comparisons,
// the decode-busy guard on a bypass) and selects workers with the §6 cost for both pools. It
// returns the route, the chosen decode and prefill workers, a Reason from a closed enum, the
// Dynamo gate label and every input it used (for Explain, the decision header and logs).
//
// Invariants:
//   - The package is pure: no I/O, clock, goroutines, logging or metrics. Time arrives in
//     Input.Now and randomness in a caller-owned *rand.Rand; import_test.go fails on net, os,
//     log/slog, prometheus and goczmq imports. Decide allocates nothing.
//   - Every comparison is strict: eff < eff_isl_threshold, ratio < eff_isl_ratio_threshold,
//     apt > θp·mnbt is busy, pdb > θd·kvcap is busy. The guard never turns remote into bypass.
//   - cached(w) is the engine's truth: the credited blocks are capped at (ISL−1)/bs
//     (CacheableBlocks), because vLLM computes a prompt's last token itself and never serves it
//     from cache. The selection cost keeps Dynamo's uncapped credit (it ranks workers; every
//     worker is capped alike).
//   - A worker whose KV event stream is silent or down gets no overlap credit and is flagged
//     (Inputs.Silent, reason remote_no_kv_events when the ISL test fails).
//   - Config texts (ParseDisagg, Config.Validate) are the field/value/rule messages of §7,
//     all problems at once via errors.Join.
//
// Concurrency: Decide, Demote and a validated *Config are safe for concurrent use as long as
// each goroutine passes its own *rand.Rand, Input and Decision. A Config is never modified after
// Validate; reloads swap in a new one.
//
// Imports: no package of the project. Snapshot, WorkerLoad and Guard (load.go) are policy's
// own value types; pool fills and enforces them. The caller (route) fills Input.Decode from
// kvindex.WorkerOverlap in the order of Snapshot.Decode.
package policy
