package pool

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// advance moves the bubble's fake clock by d and waits until every goroutine is idle again.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// TestRun drives the resolve and sweep loops on synctest's fake clock (probes answered in
// memory); the bubble also proves Run leaves no goroutine behind once its context is cancelled.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{}
		res.set("decode.svc", "10.0.0.21")
		m := NewMetrics(prometheus.NewRegistry())
		p, err := New(Config{Workers: []WorkerConfig{
			{Name: "decode", Role: RoleDecode, Endpoint: "decode.svc:8000"},
			{Name: "p0", Role: RolePrefill, Endpoint: "10.0.0.11:8000"},
		}}, Options{Metrics: m, Resolver: res, HTTPClient: &http.Client{Transport: &healthTransport{}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			p.Run(ctx)
			close(done)
		}()
		synctest.Wait()
		if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "p0"}) {
			t.Fatalf("after start: %v (Run must resolve at once)", got)
		}
		if err := p.Book(Booking{RequestID: "lost", Mode: ModeRemote, Decode: "decode@10.0.0.21:8000", Prefill: "p0", ISL: 32, PrefillTokens: 32}); err != nil {
			t.Fatal(err)
		}
		res.set("decode.svc", "10.0.0.21", "10.0.0.23")
		advance(DefaultResolveInterval)
		if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "decode@10.0.0.23:8000", "p0"}) {
			t.Fatalf("after one resolve interval: %v", got)
		}
		advance(DefaultBookingTTL - DefaultResolveInterval) // t = TTL: not strictly older yet
		if got := testutil.ToFloat64(m.Expired); got != 0 {
			t.Fatalf("expired at exactly the TTL: %v", got)
		}
		advance(DefaultSweepInterval)
		if got := testutil.ToFloat64(m.Expired); got != 1 {
			t.Fatalf("expired after TTL + one sweep = %v, want 1", got)
		}
		cancel()
		<-done
	})
}
