package extproc

import (
	"encoding/json"
	"github.com/condisagg/condisagg/route"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/condisagg/condisagg/policy"
)

// Header names of the contract (ARCHITECTURE §2).
const (
	// HeaderRoute is the Envoy cluster the request goes to ("prefill" or "decode"): the route
	// table matches on it. HeaderPlacement says what runs where: "prefill" (remote prefill,
	// then decode), "decode" (local prefill on the decode worker), "prefill_local" (the
	// whole request on the prefill worker, which HeaderDecodeHost then names) or "handoff"
	// (route "decode": the decode worker of HeaderPrefillHost, which holds the prefix,
	// prefills, and the one of HeaderDecodeHost pulls the KV and decodes).
	HeaderRoute        = "x-condisagg-route"
	HeaderPlacement    = "x-condisagg-placement"
	HeaderDestination  = "x-gateway-destination-endpoint"
	HeaderDecodeHost   = "x-condisagg-decode-host"
	HeaderPrefillHost  = "x-condisagg-prefill-host"
	HeaderPrefillerLLD = "x-prefiller-host-port"
	HeaderDecision     = "x-condisagg-decision"
	// HeaderDPRank is the header vLLM's OpenAI server reads to pin a request to one
	// data-parallel engine (X-data-parallel-rank; header names are case-insensitive). Set on
	// the decode route when the decode worker is a rank of a data-parallel server.
	HeaderDPRank = "x-data-parallel-rank"
	// HeaderDecodeRank and HeaderPrefillRank name the chosen workers' data-parallel ranks for
	// pd-sidecar, which sends each leg its own X-data-parallel-rank (only when the worker's
	// server runs more than one rank).
	HeaderDecodeRank  = "x-condisagg-decode-rank"
	HeaderPrefillRank = "x-condisagg-prefill-rank"
	HeaderError       = "x-condisagg-error"
	// HeaderSLOTTFT and HeaderSLOTPOT are a client's own latency objective in milliseconds,
	// read by the slo policy (other policies ignore them); passed upstream unchanged.
	HeaderSLOTTFT = "x-slo-ttft-ms"
	HeaderSLOTPOT = "x-slo-tpot-ms"
	// MetadataNamespace carries the destination as dynamic metadata (GIE endpoint picker).
	MetadataNamespace = "envoy.lb"
	// SubsetNamespace and SubsetKey carry the gateway's subset hint.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// ServedKey is the endpoint a gateway reports it actually used (envoy.lb namespace).
	ServedKey = "x-gateway-destination-endpoint-served"
	// MaxChunkBytes bounds one full-duplex streamed_response chunk (envoy-extproc.md §1).
	MaxChunkBytes = 62000
)

// stripHeaders is conditional-disagg.md §3 step 0: every router-owned header a client may
// send. Any other x-condisagg-* header the client sent is stripped too.
var stripHeaders = [...]string{HeaderRoute, HeaderDecodeHost, HeaderPrefillHost, HeaderDecision,
	HeaderDestination, HeaderPrefillerLLD, "x-bypass-remote-prefill", "x-prefill-continue",
	HeaderDPRank, HeaderDecodeRank, HeaderPrefillRank}

// phase is the ext_proc message a response answers.
type phase uint8

const (
	phaseRequestHeaders phase = iota
	phaseRequestBody
	phaseRequestTrailers
	phaseResponseHeaders
	phaseResponseBody
	phaseResponseTrailers
)

// wrap builds the one response of phase p around common (nil = continue unchanged). It is the
// only place that picks the oneof of a ProcessingResponse for a phase.
func wrap(p phase, common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch p {
	case phaseRequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case phaseResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case phaseRequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: common}}}
	case phaseResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: common}}}
	case phaseRequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
	default:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
}

// fixedResponses are the answers that are the same for every stream: continue unchanged for
// each phase, and the strip-only request-headers answer when the client sent no router header
// beyond the contract's list. Built once by NewServer and never modified: streams share them
// (gRPC only reads a message to marshal it).
type fixedResponses struct {
	cont  [phaseResponseTrailers + 1]*extprocv3.ProcessingResponse
	strip *extprocv3.ProcessingResponse
}

func newFixedResponses() fixedResponses {
	var f fixedResponses
	for p := range f.cont {
		f.cont[p] = wrap(phase(p), nil)
	}
	f.strip = stripResponse(stripHeaders[:])
	return f
}

// stripResponse answers request headers whose decision comes later (BUFFERED): only the
// client's router headers are removed.
func stripResponse(strip []string) *extprocv3.ProcessingResponse {
	return wrap(phaseRequestHeaders, &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: strip}})
}

// decisionResponse carries a routing outcome in phase p (request headers or, in BUFFERED,
// the request body): strip + set headers, clear_route_cache, and the destination mirrored in
// dynamic metadata envoy.lb. A non-nil body sets Content-Length to its size: in full duplex the
// caller writes it back as streamed chunks; otherwise (BUFFERED, a cleaned body) it replaces
// the buffered body here.
func decisionResponse(p phase, set *Settings, out *route.Outcome, strip []string, body []byte, fullDuplex bool) *extprocv3.ProcessingResponse {
	dest := out.Destination().Endpoint
	// The worker that decodes: the prefill worker itself for prefill_local, so a sidecar in
	// front of it passes the request to its own engine.
	decoder := out.Decode
	if out.Route == policy.RoutePrefillLocal {
		decoder = out.Prefill
	}
	hs := make([]*corev3.HeaderValueOption, 0, 11)
	hs = append(hs,
		header(HeaderRoute, out.Route.Cluster()),
		header(HeaderPlacement, out.Route.String()),
		header(HeaderDestination, dest),
		header(HeaderDecodeHost, decoder.Endpoint))
	if decoder.Ranked() {
		rank := strconv.Itoa(decoder.DPRank)
		hs = append(hs, header(HeaderDecodeRank, rank))
		if !twoLegs(out.Route) { // a sidecar gives each leg its rank
			hs = append(hs, header(HeaderDPRank, rank))
		}
	}
	// The prefill leg's host: the prefill worker, or on a handoff the decode worker holding
	// the prefix (Envoy dials the decoder, whose sidecar runs both legs).
	if twoLegs(out.Route) {
		hs = append(hs, header(HeaderPrefillHost, out.Prefill.Endpoint))
		if out.Prefill.Ranked() {
			hs = append(hs, header(HeaderPrefillRank, strconv.Itoa(out.Prefill.DPRank)))
		}
		if set.LLMDCompat {
			hs = append(hs, header(HeaderPrefillerLLD, out.Prefill.Endpoint))
		}
	}
	if set.DebugHeaders {
		hs = append(hs, header(HeaderDecision, decisionText(out)))
	}
	if body != nil {
		hs = append(hs, header("content-length", strconv.Itoa(len(body))))
	}
	common := &extprocv3.CommonResponse{
		HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: hs, RemoveHeaders: strip},
		ClearRouteCache: true,
	}
	if body != nil && !fullDuplex {
		common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
	}
	resp := wrap(p, common)
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			HeaderDestination: structpb.NewStringValue(dest)}})}}
	return resp
}

// responseHeadersResponse answers the upstream's response headers, echoing the decision
// header with --debug-headers.
func responseHeadersResponse(decision string) *extprocv3.ProcessingResponse {
	if decision == "" {
		return wrap(phaseResponseHeaders, nil)
	}
	return wrap(phaseResponseHeaders, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{header(HeaderDecision, decision)}}})
}

// streamedBody writes body back in full-duplex mode as streamed_response chunks of at most
// MaxChunkBytes, end_of_stream on the last one only when eos. An empty body with eos is one
// empty chunk; an empty body without eos writes nothing.
func streamedBody(p phase, body []byte, eos bool) []*extprocv3.ProcessingResponse {
	var out []*extprocv3.ProcessingResponse
	for len(body) > 0 || (eos && out == nil) {
		n := min(len(body), MaxChunkBytes)
		chunk := append([]byte(nil), body[:n]...)
		body = body[n:]
		out = append(out, wrap(p, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
				Body: chunk, EndOfStream: eos && len(body) == 0}}}}))
	}
	return out
}

// errorBody is the OpenAI error object.
type errorBody struct {
	Error struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   *string         `json:"param"`
		Code    json.RawMessage `json:"code"` // condisagg's reason string, or vLLM's numeric status
	} `json:"error"`
}

// immediateResponse answers the client directly with an OpenAI-style JSON error.
func immediateResponse(e *httpError) *extprocv3.ProcessingResponse {
	var b errorBody
	b.Error.Message, b.Error.Type = e.Message, e.Type
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.VLLMCode {
		b.Error.Code = strconv.AppendInt(nil, int64(e.Status), 10)
	} else {
		b.Error.Code, _ = json.Marshal(e.Reason) // cannot fail: a string
	}
	body, _ := json.Marshal(&b) // cannot fail: strings and a number
	hs := []*corev3.HeaderValueOption{header("content-type", "application/json"), header(HeaderError, e.Reason)}
	if e.Status == 429 || e.Status == 503 {
		hs = append(hs, header("retry-after", "1"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: hs},
			Body:    body,
			Details: "condisagg_" + e.Reason,
		}}}
}

// header is one overwriting header mutation, value in raw_value only.
func header(key, value string) *corev3.HeaderValueOption {
	// One allocation holds the option and its header value.
	h := &struct {
		opt corev3.HeaderValueOption
		hv  corev3.HeaderValue
	}{}
	h.hv.Key, h.hv.RawValue = key, []byte(value)
	h.opt.Header, h.opt.AppendAction = &h.hv, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	return &h.opt
}

// decisionText is the x-condisagg-decision value.
func decisionText(out *route.Outcome) string {
	in := &out.Decision.Inputs
	return "route=" + out.Route.String() + ";reason=" + out.Reason + ";isl=" + strconv.Itoa(out.Tokens) +
		";eff_isl=" + strconv.Itoa(in.Eff) + ";overlap_blocks=" + strconv.Itoa(in.Overlap)
}

// bodyReplacement answers a request body message of a route already fixed with the cleaned
// body in its place; in BUFFERED mode (setLength) the whole body, whose Content-Length it sets.
func bodyReplacement(body []byte, setLength bool) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}}
	if setLength {
		common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			header("content-length", strconv.Itoa(len(body)))}}
	}
	return wrap(phaseRequestBody, common)
}

// removeContentLength drops the client's Content-Length with a request headers answer whose
// body will be rewritten chunk by chunk (its length is not known yet; upstream gets it chunked).
func removeContentLength(resp *extprocv3.ProcessingResponse) {
	hm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if hm == nil {
		return
	}
	hm.RemoveHeaders = append(hm.RemoveHeaders[:len(hm.RemoveHeaders):len(hm.RemoveHeaders)], "content-length")
}
