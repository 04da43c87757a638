package policy

import "errors"

// The pool's view of the workers, as Decide reads it. These value types live here, in the leaf,
// so that pool depends on policy and never the other way round: pool fills a Snapshot and
// enforces a Guard; policy only reads them.

// Booking errors of the decode-busy guard re-check (pool.Pool.Book wraps them); DemoteReason
// maps them to a reason.
var (
	ErrGuardDenied     = errors.New("decode-busy guard denied the booking")
	ErrCapacityUnknown = errors.New("decode-busy guard on but KV capacity unknown")
)

// Snapshot is the per-request view of every eligible (discovered, healthy) worker that
// policy.Decide reads. The pool fills it (pool.Pool.Snapshot); it is reused across requests so the steady
// state allocates nothing. It is a copy: later bookings do not change it.
type Snapshot struct {
	Version uint64 // registry version: bumped on membership and health changes
	Decode  []WorkerLoad
	Prefill []WorkerLoad
}

// WorkerLoad is one worker's capacity and router-booked load at snapshot time.
type WorkerLoad struct {
	ID       string
	Endpoint string // resolved ip:port
	// DPRank and DPSize place the worker among the data-parallel ranks of the server at
	// Endpoint (vLLM --data-parallel-size); DPSize <= 1 means no data parallelism, and then
	// the request carries no rank header.
	DPRank, DPSize int
	// MaxBatchedTokens is mnbt; 0 = unknown.
	MaxBatchedTokens int64
	// KVCapacityBlocks is kvcap; <= 0 = unknown (-1 never learned, 0 vLLM's Ray-DP sentinel).
	KVCapacityBlocks int64
	// ActivePrefillTokens is apt: booked uncached prompt tokens whose prefill has not finished.
	ActivePrefillTokens int64
	// ActiveDecodeBlocks is adb: booked decode blocks (unique, reference-counted).
	ActiveDecodeBlocks int64
	// NewBlocks is the blocks of the request not already active on the worker plus one for a
	// partial tail, so pdb(w,r) = ActiveDecodeBlocks + NewBlocks (on prefill workers it prices
	// the slo policy's whole-request placements).
	NewBlocks int64
	// ActiveRequests is max(booked requests, scraped running+waiting when the scrape is fresh).
	ActiveRequests int64
	// ReportedKVUsage is the worker's own KV cache usage fraction from a fresh /metrics scrape
	// (vllm:kv_cache_usage_perc), -1 unknown: the decode-busy guard's input with
	// decode_busy_source "reported".
	ReportedKVUsage float64
	// DecodeRequests is the booked requests that decode on the worker: every booking of a
	// decode worker, the prefill_local bookings of a prefill worker (the slo policy's batch size).
	DecodeRequests int64
	// NoNIXL: the worker's engine serves no NixlConnector leg (SGLang, TensorRT-LLM behind
	// Dynamo), so it can be neither side of a handoff (slo_handoff). The zero value is vLLM's.
	NoNIXL bool
}

// ProjectedDecodeBlocks is pdb(w,r) of conditional-disagg.md §5.1.
func (l *WorkerLoad) ProjectedDecodeBlocks() int64 { return l.ActiveDecodeBlocks + l.NewBlocks }

// Guard is the decode-busy guard of conditional-disagg.md §4.2: busy when
// pdb(d,r) > Threshold·kvcap(d); capacity unknown or 0 denies. The zero Guard is off.
type Guard struct {
	Threshold float64 // θd, a fraction of kvcap (values > 1 allowed)
	Enabled   bool
	// Reported applies θd to the worker-reported KV usage fraction instead of the booked
	// blocks (Dynamo's newer guard; decode_busy_source "reported"): unknown usage denies.
	Reported bool
}

// Verdict is the guard's answer for one worker.
type Verdict uint8

const (
	VerdictOff             Verdict = iota // guard disabled: not evaluated
	VerdictPass                           // pdb <= θd·kvcap
	VerdictBusy                           // pdb > θd·kvcap
	VerdictCapacityUnknown                // kvcap unknown or 0
)

// CheckLoad applies the guard to a worker: the projected decode blocks and capacity, or with
// Reported its reported KV usage fraction (< 0 unknown). Both comparisons are strict.
func (g Guard) CheckLoad(pdb, kvCap int64, reportedUsage float64) Verdict {
	if !g.Enabled || !g.Reported {
		return g.Check(pdb, kvCap)
	}
	switch {
	case !(reportedUsage >= 0):
		return VerdictCapacityUnknown
	case reportedUsage > g.Threshold:
		return VerdictBusy
	}
	return VerdictPass
}

// Check applies the guard to a projected decode block count and a capacity (strict >).
func (g Guard) Check(pdb, kvCap int64) Verdict {
	switch {
	case !g.Enabled:
		return VerdictOff
	case kvCap <= 0:
		return VerdictCapacityUnknown
	case float64(pdb) > g.Threshold*float64(kvCap):
		return VerdictBusy
	}
	return VerdictPass
}
