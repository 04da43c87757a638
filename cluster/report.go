package cluster

import (
	"time"

	"github.com/condisagg/condisagg/workload"
)

// Decision is what the router decided for one request.
type Decision struct {
	Route  string // "decode" (bypass, aggregated) or "prefill" (remote)
	Reason string
	ISL    int
	// Eff and Ratio are eff and eff/ISL on the previewed decode worker; Previewed is false when
	// the decision had no decode preview (aggregated, disaggregated), and Eff and Ratio are then
	// 0.
	Eff       int
	Ratio     float64
	Previewed bool
	Decode    string // decode worker
	Prefill   string // prefill worker (remote path)
}

// Report is the outcome of one Run.
type Report struct {
	Results   []workload.Result // one per request, in workload order
	Decisions []Decision        // one per request, in workload order
	// Span is first arrival to the end of the last step; PrefillBusy and DecodeBusy sum the
	// step time of each pool, and the utilisations divide them by engines·Span.
	Span                    time.Duration
	PrefillBusy, DecodeBusy time.Duration
	PrefillUtil, DecodeUtil float64
	Steps                   uint64 // engine steps over all engines
	Preemptions             uint64
	PrefixHitTokens         uint64 // engine prefix-cache hits over all engines (tokens)
	PromptTokens            uint64 // engine prefix-cache queries over all engines (tokens)
	TransferTokens          int64  // prompt tokens of remote requests (the KV moved at most)
	IndexSkips              int    // KV events the index refused (kvindex.SkipReason != SkipNone)
	// ResidualLoad sums every worker's booked prefill tokens, decode blocks and requests after
	// the run; it is 0 when every booking was released.
	ResidualLoad int64
}
