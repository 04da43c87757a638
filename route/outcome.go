package route

import (
	"time"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
)

// Worker names a chosen worker.
type Worker struct {
	ID       string
	Endpoint string // resolved ip:port
	// DPRank and DPSize: the worker is data-parallel rank DPRank of the DPSize ranks behind
	// Endpoint (pool.WorkerConfig.DataParallelSize); DPSize <= 1 = no data parallelism.
	DPRank, DPSize int
}

// Ranked reports whether requests to w must name its data-parallel rank (X-data-parallel-rank):
// true whenever the server runs more than one rank, rank 0 included, since vLLM would
// otherwise balance the request over its ranks itself.
func (w Worker) Ranked() bool { return w.DPSize > 1 }

// Outcome is one routing decision: what extproc turns into headers, what Explain prints and
// what the simulator schedules.
type Outcome struct {
	BookingID string // the pool booking's request id; "" when nothing was booked
	Route     policy.Route
	Reason    string // Decision.Reason's text
	Body      Body   // the body's routing fields (zero for token-only requests)
	// Model is the name of the model that routed the request ("" for the catch-all model of a
	// one-model router); LoRA is the adapter the request named ("" for the base model).
	Model string
	LoRA  string
	// UnknownModel: Body.Model names no served model and the request was passed through
	// (route.UnknownPassthrough) to Model's decode workers without cache credit.
	UnknownModel bool
	Decode       Worker // every route but prefill_local
	Prefill      Worker // remote and prefill_local routes; the holder (a decode worker) on handoff
	Decision     policy.Decision
	Tokens       int // ISL
	Keys         int // full-block keys
	Overlaps     []kvindex.WorkerOverlap
	Stages       [NumStages]time.Duration
	// Shadow is what the candidate config would have done (nil without one, for Explain and
	// for fallbacks).
	Shadow *ShadowChoice
	// Ticket follows the request after the decision and ends its booking (nil when nothing
	// was booked). Copies of an Outcome share it.
	Ticket *Ticket
	// Session is the request's session and what became of its binding (zero without a
	// session id or with affinity off).
	Session Session
}

// IsFallback reports whether the outcome came from Fallback (no policy decision).
func (o *Outcome) IsFallback() bool {
	r := o.Decision.Reason
	return r == policy.ReasonPassthrough || r == policy.ReasonFailureOpen || r == policy.ReasonRequestTemplate ||
		r == policy.ReasonLongPretoken
}

// Destination is the worker Envoy must dial for this outcome: the decode worker on the
// decode and handoff routes (a handoff's sidecar, in front of it, sends the prefill leg to the
// holder), else the prefill worker.
func (o *Outcome) Destination() Worker {
	if o.Route != policy.RouteDecode && o.Route != policy.RouteHandoff {
		return o.Prefill
	}
	return o.Decode
}

// Record is the decision record: every value of a decision that does not depend on wall time
// or on which process made it. Two runs of the same request sequence against the same state
// give equal records, which is how the server and the simulator are proven to decide alike.
type Record struct {
	BookingID string `json:"booking_id,omitempty"`
	Route     string `json:"route"` // "decode" (bypass, aggregated), "prefill" (remote), "prefill_local" or "handoff"
	Reason    string `json:"reason"`
	Gate      string `json:"gate,omitempty"`
	ISL       int    `json:"isl"`
	Keys      int    `json:"keys"`
	Decode    string `json:"decode"`            // decode worker ("" for prefill_local)
	Prefill   string `json:"prefill,omitempty"` // prefill worker (remote and prefill_local), the holder (handoff)
	// Previewed is false when the decision had no decode preview (aggregated, disaggregated);
	// Overlap, Cached, Eff and Ratio are then 0.
	Previewed bool    `json:"previewed"`
	Overlap   int     `json:"overlap_blocks"`
	Cached    int     `json:"cached"`
	Eff       int     `json:"eff"`
	Ratio     float64 `json:"ratio"`
	// PrefillBusy is the prefill preview's verdict ("" when it did not run).
	PrefillBusy   string `json:"prefill_busy,omitempty"`
	PrefillTokens int64  `json:"prefill_tokens"`
	// Session is the session affinity outcome ("" without a session id or with affinity off).
	Session string `json:"session,omitempty"`
}

// Record returns the outcome's decision record.
func (o *Outcome) Record() Record {
	in := &o.Decision.Inputs
	r := Record{BookingID: o.BookingID, Route: o.Route.String(), Reason: o.Reason, ISL: o.Tokens, Keys: o.Keys,
		Decode: o.Decode.ID, Prefill: o.Prefill.ID, PrefillTokens: o.Decision.PrefillTokens}
	if o.Session.ID != "" {
		r.Session = o.Session.Outcome.String()
	}
	if o.IsFallback() {
		return r
	}
	r.Gate = o.Decision.Gate.String()
	if in.PreviewDecode != "" {
		r.Previewed, r.Overlap, r.Cached, r.Eff, r.Ratio = true, in.Overlap, in.Cached, in.Eff, in.Ratio
	}
	if in.PrefillPreviewed {
		r.PrefillBusy = in.PrefillBusy.String()
	}
	return r
}

// Decision stages timed by condisagg_decision_seconds{stage}.
const (
	StageTokenize = iota
	StageOverlap  // keys + index lookup
	StageDecide   // snapshot + policy
	StageBook
	NumStages
)

// StageNames label the stages.
var StageNames = [NumStages]string{"tokenize", "overlap", "decide", "book"}

// stageClock measures consecutive stages of one decision.
type stageClock struct {
	now  func() time.Time
	last time.Time
}

func newStageClock(now func() time.Time) stageClock { return stageClock{now: now, last: now()} }

func (c *stageClock) lap() time.Duration {
	t := c.now()
	d := t.Sub(c.last)
	c.last = t
	return d
}
