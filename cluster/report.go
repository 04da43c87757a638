package cluster

import (
	"time"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/workload"
)

// Report is the outcome of one Run.
type Report struct {
	Results   []workload.Result // one per request, in workload order
	Decisions []route.Record    // one per request, in workload order
	// Span is first arrival to the end of the last step; PrefillBusy and DecodeBusy sum the
	// step time of each pool, and the utilisations divide them by engines·Span.
	Span                    time.Duration
	PrefillBusy, DecodeBusy time.Duration
	PrefillUtil, DecodeUtil float64
	Steps                   uint64 // engine steps over all engines
	Preemptions             uint64
	PrefixHitTokens         uint64 // engine prefix-cache hits over all engines (tokens)
	PromptTokens            uint64 // engine prefix-cache queries over all engines (tokens)
	TransferTokens          int64  // prompt tokens of remote and handoff requests (the KV moved at most)
	Handoffs                int    // requests placed on the handoff route (slo_handoff)
	IndexSkips              int    // KV events the index refused (kvindex.SkipReason != SkipNone)
	// Models, Policy and RouterSeed are the fleets and policy the run routed over: enough to
	// stand up the same router (route.New) outside the simulator and replay the run's Trace.
	Models     []ModelFleet  `json:"-"`
	Policy     policy.Config `json:"-"`
	RouterSeed uint64        `json:"-"`
	// SessionConfig is the router's session affinity (Config.Sessions), for a replay.
	SessionConfig route.SessionConfig `json:"-"`
	// ResidualLoad sums every worker's booked prefill tokens, decode blocks and requests after
	// the run; it is 0 when every booking was released.
	ResidualLoad int64
	// Shadow is the candidate's agreement with the router over the run (Config.Shadow); nil
	// without one.
	Shadow *route.ShadowStats `json:",omitempty"`
	// ShadowPolicy is the candidate's policy configuration as the router got it, for a replay
	// against another router (internal/golden); nil without a candidate.
	ShadowPolicy *policy.Config `json:"-"`
	// Feedback is the slo policy's controller at the end of the run (nil for other policies).
	Feedback []feedback.State `json:",omitempty"`
	// RoleAdvice is what the live service's analytic advice says of the run's mix (slo policy).
	RoleAdvice feedback.RoleAdvice `json:",omitempty"`
	// Sessions is where the follow-up turns of the workload's sessions went.
	Sessions SessionReport
}

// SessionReport counts the follow-up turns (workload.Request.Parent >= 0, both turns routed)
// and those placed on the worker that served their previous turn.
type SessionReport struct {
	FollowUps  int
	OnPrevious int
	Stats      route.SessionStats // the router's session table (zero with affinity off)
}

// Share is OnPrevious / FollowUps (0 without follow-ups).
func (s SessionReport) Share() float64 {
	if s.FollowUps == 0 {
		return 0
	}
	return float64(s.OnPrevious) / float64(s.FollowUps)
}

// ModelFleet is one served model as the router saw it (Config.Models order).
type ModelFleet struct {
	Name string // "": the one unnamed model
	Pool pool.Config
	// LoRAAdapters are Config.LoRAAdapters on the first model, which the router keys
	// requests with.
	LoRAAdapters []string
}
