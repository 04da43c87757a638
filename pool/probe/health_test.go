package probe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// engine is a worker's HTTP endpoint on 127.0.0.1 whose /health answers by mode: "ok" (200),
// "503", or "hang" (until the prober gives up). Every /health request is announced on probes.
type engine struct {
	srv    *httptest.Server
	mode   atomic.Value // string
	okSent atomic.Int64 // 200 answers
	probes chan struct{}
}

func newEngine(t *testing.T, mode string) *engine {
	t.Helper()
	e := &engine{probes: make(chan struct{}, 64)}
	e.mode.Store(mode)
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		select {
		case e.probes <- struct{}{}:
		default:
		}
		switch e.mode.Load() {
		case "hang":
			<-r.Context().Done()
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			e.okSent.Add(1)
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) endpoint() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// running is a pool of real engines driven by Run with the default health configuration.
type running struct {
	p    *pool.Pool
	m    *pool.Metrics
	stop func()
}

// runPool starts Run on one decode worker per engine (d0, d1, ...) with cfg's knobs; stop (also
// a cleanup) cancels it and waits for it to return.
func runPool(t *testing.T, cfg pool.Config, engines ...*engine) *running {
	t.Helper()
	for i, e := range engines {
		cfg.Workers = append(cfg.Workers, pool.WorkerConfig{Name: "d" + string(rune('0'+i)), Role: pool.RoleDecode, Endpoint: e.endpoint()})
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r := &running{m: pool.NewMetrics(prometheus.NewRegistry())}
	p, err := pool.New(cfg, pool.Options{Metrics: r.m})
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	r.stop = run(context.Background(), p, Options{HTTPClient: &http.Client{Transport: tr}})
	t.Cleanup(r.stop)
	return r
}

// waitFor waits on Changed until id's eligibility is want, at most limit, and returns how
// long it took.
func (r *running) waitFor(t *testing.T, id string, want bool, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(limit)
	for {
		changed := r.p.Changed()
		if info(t, r.p, id).Healthy == want {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("worker %s not healthy=%v within %v: %+v", id, want, limit, info(t, r.p, id))
		}
	}
}

// waitProbe waits until e has received a probe.
func (e *engine) waitProbe(t *testing.T) {
	t.Helper()
	select {
	case <-e.probes:
	case <-time.After(5 * time.Second):
		t.Fatal("no probe within 5s")
	}
}

func inSnapshot(p *pool.Pool, id string) bool {
	var s policy.Snapshot
	p.Snapshot(&s, pool.Request{})
	for _, w := range s.Decode {
		if w.ID == id {
			return true
		}
	}
	return false
}

// TestDeadWorkerLeavesSelection is the case with the default configuration: a decode
// worker whose listener goes away (like an engine killed with -9) leaves Snapshot within 2 s,
// and the other decode worker keeps the service up.
func TestDeadWorkerLeavesSelection(t *testing.T) {
	dead, alive := newEngine(t, "ok"), newEngine(t, "ok")
	r := runPool(t, pool.Config{}, dead, alive)
	dead.waitProbe(t)
	dead.waitProbe(t) // two rounds: the probe connection is kept alive when the engine dies
	dead.srv.Close()
	took := r.waitFor(t, "d0", false, 2*time.Second)
	t.Logf("closed listener excluded after %v (default interval %v, failures %d)", took, pool.DefaultHealthInterval, pool.DefaultHealthFailures)
	if inSnapshot(r.p, "d0") || !inSnapshot(r.p, "d1") {
		t.Fatal("snapshot still has the dead worker, or lost the live one")
	}
	if w := info(t, r.p, "d0"); w.HealthReason != pool.ReasonProbeRefused {
		t.Errorf("reason = %s, want probe_refused", w.HealthReason)
	}
	if got := r.p.HealthyCount(pool.RoleDecode); got != 1 {
		t.Errorf("HealthyCount(decode) = %d, want 1", got)
	}
	if got := testutil.ToFloat64(r.m.Healthy.WithLabelValues("d0", "decode")); got != 0 {
		t.Errorf("worker_healthy{d0} = %v", got)
	}
}

// TestHungWorkerLeavesSelection: a /health that never answers is a failure at HealthTimeout;
// with the defaults the worker leaves within 2 s and returns once it answers again.
func TestHungWorkerLeavesSelection(t *testing.T) {
	e := newEngine(t, "ok")
	r := runPool(t, pool.Config{}, e)
	e.waitProbe(t)
	e.mode.Store("hang")
	took := r.waitFor(t, "d0", false, 2*time.Second)
	t.Logf("hung /health excluded after %v (timeout %v)", took, pool.DefaultHealthTimeout)
	if w := info(t, r.p, "d0"); w.HealthReason != pool.ReasonProbeTimeout {
		t.Errorf("reason = %s, want probe_timeout", w.HealthReason)
	}
	if r.p.HealthyCount(pool.RoleDecode) != 0 {
		t.Error("HealthyCount(decode) != 0 with the only decode worker hung")
	}
	e.mode.Store("ok")
	took = r.waitFor(t, "d0", true, 5*time.Second)
	t.Logf("answering again, back after %v", took)
}

// TestUnhealthyAnswerAndRecovery: a 503 from /health excludes the worker; it returns after
// exactly HealthSuccesses good probes (H4).
func TestUnhealthyAnswerAndRecovery(t *testing.T) {
	e := newEngine(t, "503")
	r := runPool(t, pool.Config{}, e)
	r.waitFor(t, "d0", false, 2*time.Second)
	if w := info(t, r.p, "d0"); w.HealthReason != pool.ReasonProbeFailed {
		t.Errorf("reason = %s, want probe_failed", w.HealthReason)
	}
	e.mode.Store("ok")
	took := r.waitFor(t, "d0", true, 5*time.Second)
	if got := e.okSent.Load(); got != pool.DefaultHealthSuccesses {
		t.Errorf("back after %d good probes, want %d", got, pool.DefaultHealthSuccesses)
	}
	t.Logf("503 then 200: back after %v", took)
	if w := info(t, r.p, "d0"); w.HealthReason != pool.ReasonRecovered {
		t.Errorf("reason = %s, want recovered", w.HealthReason)
	}
	for reason, want := range map[string]float64{"probe_failed": 1, "recovered": 1} {
		if got := testutil.ToFloat64(r.m.HealthTransitions.WithLabelValues("d0", reason)); got != want {
			t.Errorf("transitions{d0,%s} = %v, want %v", reason, got, want)
		}
	}
}

// TestUpstreamFailuresProbe: connect failures reported by the response phase exclude a worker
// at once and each asks for a probe; a worker that answers its probes comes back.
func TestUpstreamFailuresProbe(t *testing.T) {
	e := newEngine(t, "ok")
	r := runPool(t, pool.Config{HealthInterval: 4 * time.Second, HealthBackoffMax: 4 * time.Second}, e)
	e.waitProbe(t) // the first round, at once
	if err := r.p.ReportUpstream("d0", pool.Upstream{ConnectFailure: true}); err != nil {
		t.Fatal(err)
	}
	e.waitProbe(t) // requested by the failure: 1 s (a quarter interval) after the first, before the 4 s slot
	for range pool.DefaultUpstreamFailures - 1 {
		if err := r.p.ReportUpstream("d0", pool.Upstream{ConnectFailure: true}); err != nil {
			t.Fatal(err)
		}
	}
	if w := info(t, r.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonConnectFailure {
		t.Fatalf("after %d connect failures: healthy %v reason %s", pool.DefaultUpstreamFailures, w.Healthy, w.HealthReason)
	}
}

// TestRunReturnsWithProbesInFlight: cancelling Run while a probe hangs returns at once; the
// package's leak check then proves no probe goroutine outlives it.
func TestRunReturnsWithProbesInFlight(t *testing.T) {
	e := newEngine(t, "hang")
	r := runPool(t, pool.Config{HealthTimeout: time.Minute}, e)
	e.waitProbe(t)
	start := time.Now()
	r.stop()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Run took %v to return with a probe in flight", took)
	}
	if w := info(t, r.p, "d0"); !w.Healthy {
		t.Fatalf("a probe cancelled by shutdown counted as a failure: %+v", w)
	}
}
