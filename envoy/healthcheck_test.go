package envoy

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestExtProcHealthRecovers is issue 12's startup race through the real Envoy: condisagg answers
// Envoy's first health check NOT_SERVING, then turns SERVING. Envoy must mark it healthy on the
// next check, not after its 60 s no-traffic interval (a cluster that never carried traffic is
// checked that rarely unless the bootstrap says otherwise), or under fail-open every request of
// that minute passes unrouted. The bound is six check intervals; the fault it catches is ~60 s.
func TestExtProcHealthRecovers(t *testing.T) {
	ep, hs := serveGRPC(t, healthpb.HealthCheckResponse_NOT_SERVING, func(*grpc.Server) {})
	const interval = time.Second
	p := testParams(Buffered, true)
	p.ExtProc, p.HealthCheckInterval = ep, interval
	p.DecodeFallback = []Endpoint{newUpstream(t, "fallback").endpoint(t)}
	env := startEnvoy(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stat := func(name string) uint64 {
		v, err := env.Counter(ctx, name)
		if err != nil && !errors.Is(err, ErrNoStat) {
			t.Fatal(err)
		}
		return v
	}
	for stat("cluster.condisagg.health_check.failure") == 0 {
		if ctx.Err() != nil {
			t.Fatal("Envoy never health-checked condisagg")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := stat("cluster.condisagg.membership_healthy"); n != 0 {
		t.Fatalf("membership_healthy %d after a NOT_SERVING answer, want 0", n)
	}
	hs.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_SERVING)
	start := time.Now()
	for stat("cluster.condisagg.membership_healthy") != 1 {
		if ctx.Err() != nil {
			t.Fatalf("condisagg still unhealthy in Envoy %v after it turned SERVING", time.Since(start).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took := time.Since(start); took > 6*interval {
		t.Fatalf("Envoy marked condisagg healthy %v after it turned SERVING; want within a few %v check intervals", took.Round(100*time.Millisecond), interval)
	}
}
