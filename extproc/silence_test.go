package extproc

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/condisagg/condisagg/policy"
)

// downStreams reports every stream down except the listed workers.
type downStreams struct {
	mu sync.Mutex
	up map[string]bool
}

func (d *downStreams) Stream(w string, now time.Time) policy.Stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	return policy.Stream{Connected: d.up[w], LastStored: now}
}

func (d *downStreams) set(up ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.up = map[string]bool{}
	for _, w := range up {
		d.up[w] = true
	}
}
func (*downStreams) Routed(string) {}

// TestSilentWorkers: K15 / §8.3 — a decode worker whose stream is down is flagged, counted in
// the gauge once per pool, reported once per transition, and gets reason remote_no_kv_events.
func TestSilentWorkers(t *testing.T) {
	streams := &downStreams{}
	streams.set("decode-1", "prefill-0")
	e := newEnv(t, envOptions{streams: streams})
	prev := map[string]bool{}
	if ch := e.server.UpdateSilence(time.Now(), prev); len(ch) != 1 || ch[0] != "decode-0" {
		t.Fatalf("changed %v", ch)
	}
	if ch := e.server.UpdateSilence(time.Now(), prev); len(ch) != 0 {
		t.Fatalf("no transition, changed %v", ch)
	}
	if got := testutil.ToFloat64(e.metrics.SilentWorkers.WithLabelValues("decode")); got != 1 {
		t.Fatalf("silent decode workers = %v", got)
	}
	streams.set("prefill-0")
	v := e.open(buffered, streamed)
	h := decideBuffered(t, v, chatBody("cold prompt", false))
	if !strings.Contains(h[HeaderDecision], "reason=remote_no_kv_events") {
		t.Fatalf("silent previewed worker: %v", h[HeaderDecision])
	}
	v.closeAndDrain()
}

// TestServedEndpointMismatch: envoy-extproc.md §2 — a gateway that served another endpoint
// than the booked one makes us release the booking and count it.
func TestServedEndpointMismatch(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, c := range []struct {
		served   string
		mismatch float64
	}{{p0Addr, 0}, {"10.0.0.99:8000", 1}} {
		v := e.open(buffered, streamed)
		decideBuffered(t, v, chatBody("served check", true))
		st, _ := structpb.NewStruct(map[string]any{ServedKey: c.served})
		v.send(&extprocv3.ProcessingRequest{
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataNamespace: st}},
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrs(":status", "200", "content-type", "text/event-stream")}}})
		v.recv()
		if got := testutil.ToFloat64(e.metrics.ServedMismatch); got != c.mismatch {
			t.Fatalf("served %s: mismatch counter %v, want %v", c.served, got, c.mismatch)
		}
		if want := int64(1 - c.mismatch); e.totalRequests() != want {
			t.Fatalf("served %s: bookings %d, want %d", c.served, e.totalRequests(), want)
		}
		v.responseBody([]byte("data: [DONE]\n\n"), true)
		v.recv()
		v.closeAndDrain()
	}
}
