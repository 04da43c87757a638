package policy

// Route is where Envoy sends the request.
type Route uint8

const (
	RoutePrefill      Route = iota // remote prefill: prefill worker, then KV transfer to the decode worker
	RouteDecode                    // one decode worker runs prefill and decode (bypass, aggregated)
	RoutePrefillLocal              // one prefill worker runs prefill and decode (the whole request)
	// RouteHandoff: the decode worker that holds the prompt's prefix prefills it (mostly a
	// cache hit), and another decode worker pulls the KV and decodes (handoff.go).
	RouteHandoff
	numRoutes
)

func (r Route) String() string {
	switch r {
	case RouteDecode:
		return "decode"
	case RoutePrefillLocal:
		return "prefill_local"
	case RouteHandoff:
		return "handoff"
	}
	return "prefill"
}

// NumRoutes is the number of routes: the length of the arrays indexed by Route.
const NumRoutes = int(numRoutes)

// Routes lists every route, for pre-creating metric label sets.
func Routes() []Route { return []Route{RoutePrefill, RouteDecode, RoutePrefillLocal, RouteHandoff} }

// Cluster is the Envoy cluster a route dials (the x-condisagg-route value): "prefill" for both
// placements whose destination is a prefill worker, "decode" otherwise (a handoff's
// destination is the decode worker, whose sidecar sends the prefill leg to the holder).
func (r Route) Cluster() string {
	if r == RouteDecode || r == RouteHandoff {
		return "decode"
	}
	return "prefill"
}

// PrefillOnDecode reports whether the route's prefill worker (Decision.Prefill, PrefillID) is a
// decode worker: the handoff's holder.
func (r Route) PrefillOnDecode() bool { return r == RouteHandoff }

// Reason is the closed enum of decision reasons (conditional-disagg.md §8.1); its String is the
// `reason` metric label and the x-condisagg-decision value.
type Reason uint8

const (
	ReasonRemotePolicyError Reason = iota // zero value: fail-open to disaggregation
	ReasonBypassISL
	ReasonBypassPrefillBusy
	ReasonBypassISLAndPrefillBusy
	ReasonRemoteISLTooLong
	ReasonRemoteRatioTooHigh
	ReasonRemoteNoKVEvents
	ReasonRemotePrefillNotBusy
	ReasonRemotePrefillBusyUnknown
	ReasonRemoteDecodeBusy
	ReasonRemoteCapacityUnknown
	ReasonRemoteDecodeRejected
	ReasonRemoteNoTokens
	ReasonRemotePrefillPinned
	ReasonRemoteDecodePinUnresolved
	ReasonRemoteDisabled
	ReasonNoPrefillWorkers
	// ReasonPassthrough: a request with no prompt to decide on (other paths, bodyless, a body
	// mode that cannot carry a decision) went to a decode worker chosen by load (Fallback).
	ReasonPassthrough
	// ReasonFailureOpen: the pipeline failed and --failure-mode open sent the request to a
	// decode worker chosen by load (Fallback).
	ReasonFailureOpen
	// ReasonSLOBypass, ReasonSLORemote and ReasonSLOPrefillLocal: the slo policy forecast the
	// most SLO headroom for local prefill on a decode worker, for remote prefill, or for the
	// whole request on a prefill worker (Inputs.Estimates holds the three forecasts).
	ReasonSLOBypass
	ReasonSLORemote
	ReasonSLOPrefillLocal
	// ReasonSLOOverloadBypass and ReasonSLOOverloadPrefillLocal: the slo policy forecast no
	// placement meeting the objective, so the whole request went to the worker of either pool
	// with the lowest aggregated selection cost (a decode worker, or a prefill worker).
	ReasonSLOOverloadBypass
	ReasonSLOOverloadPrefillLocal
	// ReasonRequestTemplate: a chat request brought its own chat template, which the router
	// does not run (vLLM refuses it unless --trust-request-chat-template), so it went to a
	// decode worker chosen by load (Fallback).
	ReasonRequestTemplate
	// ReasonLongPretoken: the prompt holds a pre-token over max_pretoken_bytes, whose BPE
	// would cost CPU out of proportion, so it went untokenized to a decode worker chosen by
	// load (Fallback): the engine, which tokenizes anyway, answers for it.
	ReasonLongPretoken
	// ReasonSLOHandoff: the slo policy (slo_handoff on) forecast the most headroom for the
	// prefill on the decode worker that holds the prefix and the decode on another one.
	ReasonSLOHandoff
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonRemotePolicyError:         "remote_policy_error",
	ReasonBypassISL:                 "bypass_isl",
	ReasonBypassPrefillBusy:         "bypass_prefill_busy",
	ReasonBypassISLAndPrefillBusy:   "bypass_isl_and_prefill_busy",
	ReasonRemoteISLTooLong:          "remote_isl_too_long",
	ReasonRemoteRatioTooHigh:        "remote_ratio_too_high",
	ReasonRemoteNoKVEvents:          "remote_no_kv_events",
	ReasonRemotePrefillNotBusy:      "remote_prefill_not_busy",
	ReasonRemotePrefillBusyUnknown:  "remote_prefill_busy_unknown",
	ReasonRemoteDecodeBusy:          "remote_decode_busy",
	ReasonRemoteCapacityUnknown:     "remote_capacity_unknown",
	ReasonRemoteDecodeRejected:      "remote_decode_rejected",
	ReasonRemoteNoTokens:            "remote_no_tokens",
	ReasonRemotePrefillPinned:       "remote_prefill_pinned",
	ReasonRemoteDecodePinUnresolved: "remote_decode_pin_unresolved",
	ReasonRemoteDisabled:            "remote_disabled",
	ReasonNoPrefillWorkers:          "no_prefill_workers",
	ReasonPassthrough:               "passthrough",
	ReasonFailureOpen:               "failure_open",
	ReasonSLOBypass:                 "slo_bypass",
	ReasonSLORemote:                 "slo_remote",
	ReasonSLOPrefillLocal:           "slo_prefill_local",
	ReasonSLOOverloadBypass:         "slo_overload_bypass",
	ReasonSLOOverloadPrefillLocal:   "slo_overload_prefill_local",
	ReasonRequestTemplate:           "request_chat_template",
	ReasonLongPretoken:              "long_pretoken",
	ReasonSLOHandoff:                "slo_handoff",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every reason, for pre-creating metric label sets.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Route is the route a reason implies.
func (r Reason) Route() Route {
	switch r {
	case ReasonBypassISL, ReasonBypassPrefillBusy, ReasonBypassISLAndPrefillBusy, ReasonNoPrefillWorkers,
		ReasonPassthrough, ReasonFailureOpen, ReasonSLOBypass, ReasonSLOOverloadBypass, ReasonRequestTemplate, ReasonLongPretoken:
		return RouteDecode
	case ReasonSLOPrefillLocal, ReasonSLOOverloadPrefillLocal:
		return RoutePrefillLocal
	case ReasonSLOHandoff:
		return RouteHandoff
	}
	return RoutePrefill
}

// Gate is Dynamo's decode-gate log label (conditional-disagg.md §4.2), for logs and Explain.
type Gate uint8

const (
	GateNotReached                Gate = iota // decided before the policy ran
	GateDeclinedByPolicy                      // bypass_declined_by_policy
	GateAllowedDecodeGateDisabled             // bypass_allowed_decode_gate_disabled
	GateDeniedDecodeBusyUnknown               // bypass_denied_decode_busy_unknown
	GateDeniedDecodeBusy                      // bypass_denied_decode_busy
	GateAllowedDecodeNotBusy                  // bypass_allowed_decode_not_busy
)

func (g Gate) String() string {
	switch g {
	case GateDeclinedByPolicy:
		return "bypass_declined_by_policy"
	case GateAllowedDecodeGateDisabled:
		return "bypass_allowed_decode_gate_disabled"
	case GateDeniedDecodeBusyUnknown:
		return "bypass_denied_decode_busy_unknown"
	case GateDeniedDecodeBusy:
		return "bypass_denied_decode_busy"
	case GateAllowedDecodeNotBusy:
		return "bypass_allowed_decode_not_busy"
	}
	return "not_reached"
}

// Busy is the prefill busy signal: a tri-state plus "not evaluated" (isl_bounding).
type Busy uint8

const (
	BusyNotEvaluated Busy = iota
	BusyFalse
	BusyTrue
	BusyUnknown // preview error or missing signal; policies treat it as false
)

func (b Busy) String() string {
	switch b {
	case BusyFalse:
		return "false"
	case BusyTrue:
		return "true"
	case BusyUnknown:
		return "unknown"
	}
	return "not_evaluated"
}
