package extproc

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/route"
)

// TestRecentRecordsRoutedRequests: every request the server routes is recorded for the status
// page with its x-request-id (a policy decision and a bodyless passthrough alike); a rejected
// request and an Explain-style dry run are not.
func TestRecentRecordsRoutedRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-request-id", "req-decided")
	v.recv()
	v.requestBody(chatBody("a short question about caches", false), true)
	decided := setHeaders(v.recv().GetRequestBody().GetResponse())
	v.closeAndDrain()

	v = e.open(buffered, streamed)
	v.requestHeaders(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-passthrough")
	v.recv()
	v.closeAndDrain()

	v = e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-request-id", "req-rejected")
	v.recv()
	v.requestBody([]byte(`{"model":`), true)
	if v.recv().GetImmediateResponse() == nil {
		t.Fatal("a malformed body was not rejected")
	}
	v.closeAndDrain()

	if _, err := e.router.Decide(context.Background(), &route.Request{Endpoint: route.EndpointChat,
		Body: chatBody("explained, not routed", false), DryRun: true}); err != nil {
		t.Fatal(err)
	}

	got := e.recent.Latest(nil, 10)
	if len(got) != 2 || e.recent.Total() != 2 {
		t.Fatalf("recorded %d (total %d), want the decision and the passthrough: %+v", len(got), e.recent.Total(), got)
	}
	pass, dec := got[0], got[1]
	if pass.RequestID != "req-passthrough" || pass.Record.Reason != "passthrough" || pass.Record.Route != "decode" {
		t.Fatalf("passthrough entry %+v", pass)
	}
	if dec.RequestID != "req-decided" || dec.Record.Route != decided["x-condisagg-route"] ||
		dec.Record.Decode == "" || dec.Record.ISL == 0 || dec.Inputs.ISL != dec.Record.ISL || dec.Latency <= 0 {
		t.Fatalf("decision entry %+v, headers %v", dec, decided)
	}
	mix := e.recent.Mix(dec.At)
	last := mix[len(mix)-1].Counts
	if last[decisionlog.PlacementFallback] != 1 || last[decisionlog.PlacementPrefill]+last[decisionlog.PlacementDecode] != 1 {
		t.Fatalf("mix %v", last)
	}
}
