package probe

import (
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/condisagg/condisagg/pool"
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
		var addrs atomic.Pointer[[]string] // of decode.svc
		addrs.Store(&[]string{"10.0.0.21"})
		res := resolverFunc(func(host string) ([]string, error) {
			if host != "decode.svc" {
				return nil, fmt.Errorf("lookup %s: no such host", host)
			}
			return slices.Clone(*addrs.Load()), nil
		})
		m := pool.NewMetrics(prometheus.NewRegistry())
		p, err := pool.New(pool.Config{Workers: []pool.WorkerConfig{
			{Name: "decode", Role: pool.RoleDecode, Endpoint: "decode.svc:8000"},
			{Name: "p0", Role: pool.RolePrefill, Endpoint: "10.0.0.11:8000"},
		}}, pool.Options{Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t.Context(), p, Options{Resolver: res, HTTPClient: &http.Client{Transport: &healthTransport{}}})
		synctest.Wait()
		if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "p0"}) {
			t.Fatalf("after start: %v (Run must resolve at once)", got)
		}
		if err := p.Book(pool.Booking{RequestID: "lost", Mode: pool.ModeRemote, Decode: "decode@10.0.0.21:8000", Prefill: "p0", ISL: 32, PrefillTokens: 32}); err != nil {
			t.Fatal(err)
		}
		addrs.Store(&[]string{"10.0.0.21", "10.0.0.23"})
		advance(pool.DefaultResolveInterval)
		if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "decode@10.0.0.23:8000", "p0"}) {
			t.Fatalf("after one resolve interval: %v", got)
		}
		advance(pool.DefaultBookingTTL - pool.DefaultResolveInterval) // t = TTL: not strictly older yet
		if got := testutil.ToFloat64(m.Expired); got != 0 {
			t.Fatalf("expired at exactly the TTL: %v", got)
		}
		advance(pool.DefaultSweepInterval)
		if got := testutil.ToFloat64(m.Expired); got != 1 {
			t.Fatalf("expired after TTL + one sweep = %v, want 1", got)
		}
		stop()
	})
}
