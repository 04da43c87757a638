package extproc

import (
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// TestBufferedChatDecision is the vertical slice: BUFFERED chat request -> strip at headers,
// decision in the body response, booking held until the response ends.
func TestBufferedChatDecision(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-condisagg-route", "decode",
		"x-gateway-destination-endpoint", "6.6.6.6:1")
	hr := v.recv().GetRequestHeaders().GetResponse()
	if got := hr.GetHeaderMutation().GetRemoveHeaders(); !contains(got, HeaderRoute) || !contains(got, HeaderDestination) {
		t.Fatalf("remove_headers = %v", got)
	}
	if len(hr.GetHeaderMutation().GetSetHeaders()) != 0 || hr.ClearRouteCache {
		t.Fatalf("headers response carries a decision in BUFFERED: %v", hr)
	}
	v.requestBody(chatBody("hello there, how are you?", true), true)
	br := v.recv().GetRequestBody().GetResponse()
	h := setHeaders(br)
	if h[HeaderRoute] != "prefill" || h[HeaderDestination] != p0Addr || h[HeaderPrefillHost] != p0Addr {
		t.Fatalf("decision headers = %v", h)
	}
	if h[HeaderDecodeHost] != d0Addr && h[HeaderDecodeHost] != d1Addr {
		t.Fatalf("decode host = %q", h[HeaderDecodeHost])
	}
	if !br.ClearRouteCache || br.BodyMutation != nil {
		t.Fatalf("body response: clear_route_cache=%v body_mutation=%v", br.ClearRouteCache, br.BodyMutation)
	}
	if e.totalRequests() != 1 {
		t.Fatalf("open bookings = %d, want 1", e.totalRequests())
	}
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
	if got := setHeaders(v.recv().GetResponseHeaders().GetResponse())[HeaderDecision]; got != h[HeaderDecision] ||
		!strings.HasPrefix(got, "route=prefill;reason=remote_ratio_too_high;isl=") {
		t.Fatalf("response decision header %q, request had %q", got, h[HeaderDecision])
	}
	v.responseBody([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"), true)
	v.recv()
	if e.totalRequests() != 0 {
		t.Fatalf("open bookings after the response = %d, want 0", e.totalRequests())
	}
	v.closeAndDrain()
}
