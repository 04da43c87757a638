package probe

import (
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// healthTransport answers health probes in memory for tests on synctest's fake clock, where a
// real socket would stall the bubble's time. Per endpoint it answers "ok" (the default), "503",
// "refuse" or "hang" (until the probe's deadline), and records when each probe arrived.
type healthTransport struct {
	mu    sync.Mutex // guards mode, calls
	mode  map[string]string
	calls map[string][]time.Time
}

func (h *healthTransport) set(ep, mode string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mode == nil {
		h.mode = map[string]string{}
	}
	h.mode[ep] = mode
}

// since returns the arrival times of ep's probes as offsets from start.
func (h *healthTransport) since(ep string, start time.Time) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for _, c := range h.calls[ep] {
		out = append(out, c.Sub(start))
	}
	return out
}

func (h *healthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	mode := h.mode[r.URL.Host]
	if h.calls == nil {
		h.calls = map[string][]time.Time{}
	}
	h.calls[r.URL.Host] = append(h.calls[r.URL.Host], time.Now())
	h.mu.Unlock()
	switch mode {
	case "refuse":
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case "hang":
		<-r.Context().Done()
		return nil, r.Context().Err()
	case "503":
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: r}, nil
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// bubble is a pool running in a synctest bubble, its probes answered by ht.
type bubble struct {
	p     *pool.Pool
	m     *pool.Metrics
	ht    *healthTransport
	start time.Time
	stop  func()
}

// Endpoints of startBubble's workers.
const (
	epD0 = "10.0.0.21:8000"
	epD1 = "10.0.0.22:8000"
	epP0 = "10.0.0.11:8000"
)

// startBubble starts Run on decode workers d0, d1 and prefill worker p0 (with cfg's knobs) and
// waits until the first probes have been answered. Call stop before the bubble ends.
func startBubble(t *testing.T, cfg pool.Config, modes map[string]string) *bubble {
	t.Helper()
	cfg.Workers = []pool.WorkerConfig{
		{Name: "d0", Role: pool.RoleDecode, Endpoint: epD0},
		{Name: "d1", Role: pool.RoleDecode, Endpoint: epD1},
		{Name: "p0", Role: pool.RolePrefill, Endpoint: epP0},
	}
	b := &bubble{ht: &healthTransport{}, m: pool.NewMetrics(prometheus.NewRegistry()), start: time.Now()}
	for ep, mode := range modes {
		b.ht.set(ep, mode)
	}
	p, err := pool.New(cfg, pool.Options{Metrics: b.m})
	if err != nil {
		t.Fatal(err)
	}
	b.p = p
	b.stop = run(t.Context(), p, Options{HTTPClient: &http.Client{Transport: b.ht}})
	synctest.Wait()
	return b
}

// at advances the bubble's clock to offset d from its start.
func (b *bubble) at(d time.Duration) {
	if wait := time.Until(b.start.Add(d)); wait > 0 {
		advance(wait)
	}
}

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// TestProbeSchedule follows a dead worker through exclusion, backoff and return on the fake
// clock: H1 (two refused probes exclude it), H3 (probes back off 0.5 s doubling to 8 s), H4
// (two good probes bring it back), and the metrics of each step.
func TestProbeSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{}, map[string]string{epD0: "refuse"})
		defer b.stop()
		b.at(499 * time.Millisecond)
		if w := info(t, b.p, "d0"); !w.Healthy {
			t.Fatalf("H1: d0 excluded after one failed probe: %+v", w)
		}
		b.at(500 * time.Millisecond)
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonProbeRefused || !w.HealthSince.Equal(b.start.Add(500*time.Millisecond)) {
			t.Fatalf("H1: d0 after two refused probes = healthy %v reason %s since %v", w.Healthy, w.HealthReason, w.HealthSince.Sub(b.start))
		}
		var s policy.Snapshot
		b.p.Snapshot(&s, pool.Request{})
		if len(s.Decode) != 1 || s.Decode[0].ID != "d1" {
			t.Fatalf("snapshot decode = %+v, want only d1", s.Decode)
		}
		if got := b.p.HealthyCount(pool.RoleDecode); got != 1 {
			t.Fatalf("HealthyCount(decode) = %d, want 1", got)
		}
		b.at(25 * time.Second)
		if got, want := b.ht.since(epD0, b.start), ms(0, 500, 1000, 2000, 4000, 8000, 16000, 24000); !slices.Equal(got, want) {
			t.Fatalf("H3: probes of the dead worker at %v, want %v", got, want)
		}
		b.ht.set(epD0, "ok")
		b.at(32 * time.Second)
		if w := info(t, b.p, "d0"); w.Healthy {
			t.Fatalf("H4: d0 back after one good probe")
		}
		b.at(32500 * time.Millisecond)
		if w := info(t, b.p, "d0"); !w.Healthy || w.HealthReason != pool.ReasonRecovered {
			t.Fatalf("H4: d0 after two good probes = %+v", w)
		}
		for _, c := range []struct {
			c    prometheus.Collector
			want float64
		}{
			{b.m.Healthy.WithLabelValues("d0", "decode"), 1},
			{b.m.Healthy.WithLabelValues("p0", "prefill"), 1},
			{b.m.HealthTransitions.WithLabelValues("d0", "probe_refused"), 1},
			{b.m.HealthTransitions.WithLabelValues("d0", "recovered"), 1},
			{b.m.HealthProbes.WithLabelValues("d0", "refused"), 8},
			{b.m.HealthProbes.WithLabelValues("d0", "ok"), 2},
		} {
			if got := testutil.ToFloat64(c.c); got != c.want {
				t.Errorf("%v = %v, want %v", c.c.(prometheus.Metric).Desc(), got, c.want)
			}
		}
		if n := testutil.CollectAndCount(b.m.HealthTransitions); n != 2 {
			t.Errorf("transition series = %d, want 2 (d1 and p0 never changed)", n)
		}
	})
}

// TestProbeTimeout: a hung engine fails each probe at HealthTimeout, so with the defaults the
// second timeout (0.5 s + 0.4 s) excludes it.
func TestProbeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{}, map[string]string{epD0: "hang"})
		defer b.stop()
		b.at(899 * time.Millisecond)
		if w := info(t, b.p, "d0"); !w.Healthy {
			t.Fatalf("excluded before the second timeout: %+v", w)
		}
		b.at(900 * time.Millisecond)
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonProbeTimeout {
			t.Fatalf("after two timeouts: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		if got := testutil.ToFloat64(b.m.HealthProbes.WithLabelValues("d0", "timeout")); got != 2 {
			t.Fatalf("timeout probes = %v", got)
		}
	})
}

// TestUpstreamSignals: H2 on the fake clock. Each failing response asks for a probe at once
// (no sooner than a quarter interval after the previous one); three in a row exclude the
// worker; good responses reset the streak; probes bring it back.
func TestUpstreamSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{}, nil)
		defer b.stop()
		report := func(id string, u pool.Upstream) {
			t.Helper()
			if err := b.p.ReportUpstream(id, u); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if err := b.p.ReportUpstream("nope", pool.Upstream{Status: 500}); !errors.Is(err, pool.ErrUnknownWorker) {
			t.Fatalf("unknown worker = %v", err)
		}
		b.at(200 * time.Millisecond)
		report("d0", pool.Upstream{Status: 502})
		b.at(300 * time.Millisecond)
		report("d0", pool.Upstream{Status: 500}) // probe requested for 325 ms: 200 + 500/4
		report("d0", pool.Upstream{})            // no response at all: says nothing
		b.at(350 * time.Millisecond)
		if w := info(t, b.p, "d0"); !w.Healthy {
			t.Fatalf("excluded after two failures: %+v", w)
		}
		report("d0", pool.Upstream{ConnectFailure: true})
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonConnectFailure {
			t.Fatalf("after three failures: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		report("d0", pool.Upstream{Status: 200}) // an excluded worker comes back by probes only
		b.at(1400 * time.Millisecond)
		if got, want := b.ht.since(epD0, b.start), ms(0, 200, 325, 825, 1325); !slices.Equal(got, want) {
			t.Fatalf("probes of d0 at %v, want %v", got, want)
		}
		if w := info(t, b.p, "d0"); !w.Healthy || w.HealthReason != pool.ReasonRecovered || !w.HealthSince.Equal(b.start.Add(1325*time.Millisecond)) {
			t.Fatalf("after two good probes: %+v", w)
		}
		// A 4xx is a good response: the streak restarts.
		for _, st := range []int{500, 503, 404, 500, 504} {
			report("d1", pool.Upstream{Status: st})
		}
		if w := info(t, b.p, "d1"); !w.Healthy {
			t.Fatalf("d1 excluded although a 404 broke the streak: %+v", w)
		}
		report("d1", pool.Upstream{Status: 500})
		if w := info(t, b.p, "d1"); w.Healthy || w.HealthReason != pool.ReasonUpstream5xx {
			t.Fatalf("d1 after three 5xx: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		if got := testutil.ToFloat64(b.m.HealthTransitions.WithLabelValues("d1", "upstream_5xx")); got != 1 {
			t.Fatalf("d1 upstream_5xx transitions = %v", got)
		}
	})
}

// TestRequestProbe: the event-stream loss hook probes at once (coalesced, and after a probe in
// flight) but excludes nobody by itself.
func TestRequestProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{}, nil)
		defer b.stop()
		b.at(300 * time.Millisecond)
		if err := b.p.RequestProbe("d0"); err != nil {
			t.Fatal(err)
		}
		if err := b.p.RequestProbe("d0"); err != nil { // coalesced with the first
			t.Fatal(err)
		}
		synctest.Wait()
		b.at(450 * time.Millisecond)
		if got, want := b.ht.since(epD0, b.start), ms(0, 300); !slices.Equal(got, want) {
			t.Fatalf("probes at %v, want %v", got, want)
		}
		if w := info(t, b.p, "d0"); !w.Healthy {
			t.Fatalf("a requested good probe excluded d0: %+v", w)
		}
		// A request while a probe is in flight is served right after it, not at the next slot.
		b.ht.set(epD0, "hang")
		b.at(900 * time.Millisecond) // the 800 ms probe hangs until 1200 ms
		if err := b.p.RequestProbe("d0"); err != nil {
			t.Fatal(err)
		}
		b.at(1250 * time.Millisecond)
		if got, want := b.ht.since(epD0, b.start), ms(0, 300, 800, 1200); !slices.Equal(got, want) {
			t.Fatalf("probes at %v, want %v", got, want)
		}
		b.at(1600 * time.Millisecond)
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonProbeTimeout {
			t.Fatalf("after two timeouts: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		if err := b.p.RequestProbe("nope"); !errors.Is(err, pool.ErrUnknownWorker) {
			t.Fatalf("unknown worker = %v", err)
		}
	})
}

// TestProbingOff: HealthInterval < 0 sends no probe, and passive signals exclude nobody because
// nothing could bring the worker back.
func TestProbingOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{HealthInterval: -1}, map[string]string{epD0: "refuse"})
		defer b.stop()
		for range 5 {
			if err := b.p.ReportUpstream("d0", pool.Upstream{ConnectFailure: true}); err != nil {
				t.Fatal(err)
			}
		}
		b.at(10 * time.Second)
		if got := b.ht.since(epD0, b.start); len(got) != 0 {
			t.Fatalf("probes with probing off: %v", got)
		}
		if got := b.p.HealthyCount(pool.RoleDecode); got != 2 {
			t.Fatalf("HealthyCount(decode) = %d, want 2", got)
		}
	})
}

// TestHealthInputsCombine: H6. A worker is eligible only while SetHealth, the scrape and the
// probes all say healthy, and its reason names a cause that still holds.
func TestHealthInputsCombine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, pool.Config{}, nil)
		defer b.stop()
		changed := b.p.Changed()
		if err := b.p.SetHealth("d0", false); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		default:
			t.Fatal("Changed not closed by an eligibility change")
		}
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonManual {
			t.Fatalf("after SetHealth(false): %+v", w)
		}
		b.ht.set(epD0, "refuse")
		b.at(time.Second) // probes at 0.5 and 1.0 fail: probe_refused also holds now
		if err := b.p.SetHealth("d0", true); err != nil {
			t.Fatal(err)
		}
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonProbeRefused {
			t.Fatalf("SetHealth(true) while probes fail: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		// The scrape excludes it too; after the probes recover the scrape still holds it out.
		d0 := b.p.ScrapeTargets()[0]
		for range pool.DefaultUnhealthyAfter {
			b.p.ApplyScrape(d0, pool.ScrapeHTTPError, pool.Scrape{}, errors.New("status 500"))
		}
		b.ht.set(epD0, "ok")
		b.at(3 * time.Second) // good probes at 1.5 and 2.0
		if w := info(t, b.p, "d0"); w.Healthy || w.HealthReason != pool.ReasonScrapeFailed {
			t.Fatalf("probes recovered, scrape failing: healthy %v reason %s", w.Healthy, w.HealthReason)
		}
		b.p.ApplyScrape(d0, pool.ScrapeOK, pool.Scrape{KVUsage: -1, NumGPUBlocks: -1, BlockSize: -1, MaxNumBatchedTokens: -1}, nil)
		if w := info(t, b.p, "d0"); !w.Healthy || w.HealthReason != pool.ReasonScrapeRecovered {
			t.Fatalf("every input healthy: %+v", w)
		}
		for reason, want := range map[string]float64{"manual": 1, "scrape_recovered": 1, "probe_refused": 0, "recovered": 0} {
			if got := testutil.ToFloat64(b.m.HealthTransitions.WithLabelValues("d0", reason)); got != want {
				t.Errorf("transitions{d0,%s} = %v, want %v (only eligibility changes count)", reason, got, want)
			}
		}
	})
}
