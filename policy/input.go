package policy

import (
	"errors"
	"strconv"
	"time"
)

// Stream is a worker's KV event stream state as seen by the subscriber.
type Stream struct {
	Connected  bool      // the subscription is up
	LastStored time.Time // last accepted BlockStored; zero = never
	// RoutedSinceStored counts the requests routed to the worker since LastStored.
	RoutedSinceStored int
}

// Silent reports whether a stream is silent at now (§8.3): the subscription is down, or it
// accepted no BlockStored within s.After while at least s.MinRequests requests were routed.
func Silent(st Stream, now time.Time, s Silence) bool {
	if !st.Connected {
		return true
	}
	return st.RoutedSinceStored >= s.MinRequests && now.Sub(st.LastStored) > s.After
}

// Signal is one worker's prefix overlap with the request and its event-stream state. The
// caller fills it from kvindex.WorkerOverlap{Worker, GPU, CPU, Disk}: GPU is overlap(w), the
// number of leading full blocks on device; Host and Disk are CPU and disk/remote blocks that
// continue the device prefix contiguously.
type Signal struct {
	Worker string
	GPU    int
	Host   int
	Disk   int
	Stream Stream
}

// Pin restricts a decision to trusted pinned workers (off unless extproc trusts pin headers).
type Pin struct {
	Prefill string // a pinned prefill worker ID ⇒ remote_prefill_pinned
	Decode  string // a pinned decode worker ID restricts decode selection
}

// Input is the per-request input of Decide.
type Input struct {
	Now time.Time // wall clock, for stream silence
	ISL int       // prompt tokens after templating; 0 ⇒ remote_no_tokens
	// Decode[i] describes snapshot.Decode[i] (same order, same Worker ID). A mismatch is a
	// policy error (remote_policy_error).
	Decode []Signal
	// Prefill[i] describes snapshot.Prefill[i]; nil = no overlap known on the prefill pool.
	// A mismatch makes the prefill preview fail (prefill busy unknown) and drops prefill credit.
	Prefill []Signal
	Pin     Pin
	// SLO is the request's own objective (x-slo-ttft-ms, x-slo-tpot-ms) for the slo policy;
	// zero fields take the configured one.
	SLO SLO
	// Feedback are the slo policy's corrections per placement (indexed by Route), from the
	// latencies the response phase observed; applied when Disagg.SLOFeedback is on.
	Feedback [numRoutes]Correction
	// Affinity is the worker that served the request's session last ("" : no binding). The
	// decision prefers it while the decode-busy guard admits it and, under the slo policy,
	// while its forecast meets the objective (affinity.go).
	Affinity string
	// Fleet is the fleet's recent steady state (package fleet), used by the slo policy when
	// Disagg.SLOFleet is on; a zero Window: none.
	Fleet FleetView
}

// Decision-time errors, reported in Inputs.Err (immutable sentinels: no allocation).
var (
	ErrSignalsMismatch = errors.New("policy: overlap signals do not match the snapshot's workers")
	ErrPinUnresolved   = errors.New("policy: pinned worker not in the snapshot")
	ErrNoThreshold     = errors.New("policy: prefill busy threshold unresolved")
	ErrNoTarget        = errors.New("policy: no eligible worker for the route")
	ErrInvalidConfig   = errors.New("policy: config not validated (block size < 1)")
)

// Inputs records every value a decision used, for Explain, the decision header and logs.
type Inputs struct {
	Policy          Kind
	SnapshotVersion uint64
	ISL             int
	// Previewed decode worker d (bypass-mode selection) and its prefix: overlap(d) device blocks,
	// Host/Disk continuation blocks, cached(d), eff and ratio.
	PreviewDecode    string
	Overlap          int
	HostBlocks       int
	DiskBlocks       int
	Cached           int
	Eff              int
	Ratio            float64
	EffISLThreshold  int64
	RatioThreshold   float64
	Silent           bool   // d's event stream is silent or down: no overlap credit, flagged
	PrefillPreviewed bool   // step 6 ran (never for isl_bounding)
	PreviewPrefill   string // the previewed prefill worker p
	PrefillBusy      Busy
	PrefillRejected  bool // every prefill worker over --router-queue-threshold·mnbt
	PrefillActive    int64
	PrefillBudget    float64 // θp·mnbt(p) of the previewed p
	PrefillCached    int     // cached(p) of the chosen prefill worker (remote path)
	ProjectedBlocks  int64   // pdb(d,r) of the previewed d
	KVCapacity       int64   // kvcap(d); <= 0 unknown
	ReportedKVUsage  float64 // d's reported KV usage fraction; -1 unknown (decode_busy_source reported)
	DecodeBusy       float64 // θd
	GuardEnabled     bool
	Err              error // the policy error behind remote_policy_error, or a note (pin, threshold)
	// SLO and Estimates: the slo policy's objective and its forecast per placement (indexed by
	// Route); zero for the other policies.
	SLO       SLO
	Estimates [numRoutes]Estimate
	// Affinity is what the decision made of Input.Affinity (AffinityNone without one); route
	// sets AffinityMiss for a session without a binding and settles the outcome after the
	// commit. AffinityWorker is the bound worker.
	Affinity       Affinity
	AffinityWorker string
	// Fleet is the slo policy's steady-state forecast (slo_fleet; zero when off or without a
	// view).
	Fleet FleetForecast
}

// Decision is the outcome of Decide.
type Decision struct {
	Route  Route
	Reason Reason
	Gate   Gate
	// Decode and Prefill index the snapshot's Decode and Prefill slices; -1 = none. A decode
	// route needs Decode >= 0, a prefill route both; otherwise no target exists and the caller
	// applies --failure-mode. On the handoff route (Route.PrefillOnDecode) Prefill and PrefillID
	// name the holder, a worker of the Decode slice.
	Decode, Prefill     int
	DecodeID, PrefillID string
	// PrefillTokens is the prefill entry to book: eff on d for a decode route,
	// ISL − min(cached(p), ISL) on p for a prefill or prefill_local route. A prefill_local
	// decision names no decode worker (Decode -1): p decodes too.
	PrefillTokens int64
	// Guard is the decode-busy guard the bypass commit must re-check (off for non-policy routes).
	Guard  Guard
	Inputs Inputs

	remoteHint int // 1 + the remote-decode choice computed with the preview; 0 = none
}

// Routable reports whether the decision names every worker its route needs.
func (d *Decision) Routable() bool {
	switch d.Route {
	case RouteDecode:
		return d.Decode >= 0
	case RoutePrefillLocal:
		return d.Prefill >= 0
	}
	return d.Decode >= 0 && d.Prefill >= 0
}

// UnknownSignals reports which busy signals were missing, for
// condisagg_busy_signal_unknown_total{signal="prefill"|"decode_capacity"}.
func (d *Decision) UnknownSignals() (prefill, decodeCapacity bool) {
	return d.Inputs.PrefillBusy == BusyUnknown, d.Gate == GateDeniedDecodeBusyUnknown
}

// AppendHeader appends the x-condisagg-decision value (ARCHITECTURE §2):
// route=…;reason=…;isl=…;eff_isl=…;overlap_blocks=….
func (d *Decision) AppendHeader(dst []byte) []byte {
	dst = append(dst, "route="...)
	dst = append(dst, d.Route.String()...)
	dst = append(dst, ";reason="...)
	dst = append(dst, d.Reason.String()...)
	dst = append(dst, ";isl="...)
	dst = strconv.AppendInt(dst, int64(d.Inputs.ISL), 10)
	dst = append(dst, ";eff_isl="...)
	dst = strconv.AppendInt(dst, int64(d.Inputs.Eff), 10)
	dst = append(dst, ";overlap_blocks="...)
	return strconv.AppendInt(dst, int64(d.Inputs.Overlap), 10)
}
