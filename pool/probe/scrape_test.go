package probe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// clockFunc is a pool.Clock that reads a function.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// scrapeFixture is a pool on a stopped clock (t0 until now is stored) and its shell.
type scrapeFixture struct {
	p   *pool.Pool
	s   *Shell
	m   *pool.Metrics
	now atomic.Pointer[time.Time]
}

// newScrapeFixture builds a pool of cfg whose logs go to logs, and its shell scraping with c.
func newScrapeFixture(t *testing.T, cfg pool.Config, c *http.Client, logs io.Writer) *scrapeFixture {
	t.Helper()
	f := &scrapeFixture{m: pool.NewMetrics(prometheus.NewRegistry())}
	f.now.Store(&t0)
	clock := clockFunc(func() time.Time { return *f.now.Load() })
	p, err := pool.New(cfg, pool.Options{Metrics: f.m, Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.p, f.s = p, New(p, Options{HTTPClient: c})
	return f
}

// TestScrape serves vLLM-format metrics from a real HTTP server on 127.0.0.1 and checks how the
// scrape fills capacities, corrects request counts and drives health.
func TestScrape(t *testing.T) {
	page, err := os.ReadFile("testdata/vllm_metrics_v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	var mode atomic.Value // "ok", "500", "garbage"
	mode.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		switch mode.Load() {
		case "500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "garbage":
			w.Write([]byte("vllm:num_requests_running{ 1\n"))
		default:
			w.Write(page)
		}
	}))
	defer srv.Close()
	ep := strings.TrimPrefix(srv.URL, "http://")
	var logs strings.Builder
	f := newScrapeFixture(t, pool.Config{ScrapeInterval: 10 * time.Second, Workers: []pool.WorkerConfig{
		{Name: "d0", Role: pool.RoleDecode, Endpoint: ep},
		{Name: "d1", Role: pool.RoleDecode, Endpoint: ep, NumGPUBlocks: 500},
		{Name: "p0", Role: pool.RolePrefill, Endpoint: ep, MaxNumBatchedTokens: 2048},
	}}, srv.Client(), &logs)
	ctx := context.Background()
	if w := info(t, f.p, "d0"); w.KVCapacityBlocks != -1 {
		t.Fatalf("kvcap before scrape = %d, want -1", w.KVCapacityBlocks)
	}
	if err := f.s.ScrapeAll(ctx); err != nil {
		t.Fatalf("ScrapeAll: %v", err)
	}
	if w := info(t, f.p, "d0"); w.KVCapacityBlocks != 27000 || w.Scrape.KVUsage != 0.4375 || !w.Scrape.At.Equal(t0) {
		t.Fatalf("d0 after scrape = %+v", w)
	}
	if strings.Contains(logs.String(), "block size differs") {
		t.Fatalf("block size 16 matches the default yet was reported: %s", logs.String())
	}
	if w := info(t, f.p, "d1"); w.KVCapacityBlocks != 500 {
		t.Fatalf("configured kvcap must win over scraped: %d", w.KVCapacityBlocks)
	}
	if got := testutil.ToFloat64(f.m.KVCapacityBlocks.WithLabelValues("d0")); got != 27000 {
		t.Fatalf("kv_capacity_blocks{d0} = %v", got)
	}
	// Requests: max(booked, running+waiting) while the scrape is fresh.
	if err := f.p.Book(pool.Booking{RequestID: "r", Mode: pool.ModeBypass, Decode: "d0", ISL: 16}); err != nil {
		t.Fatal(err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, pool.Request{ISL: 16})
	if got := s.Decode[0].ActiveRequests; got != 5 {
		t.Fatalf("fresh scrape: requests = %d, want max(1, 3+2) = 5", got)
	}
	later := t0.Add(31 * time.Second)
	f.now.Store(&later)
	f.p.Snapshot(&s, pool.Request{ISL: 16})
	if got := s.Decode[0].ActiveRequests; got != 1 {
		t.Fatalf("stale scrape: requests = %d, want the booked 1", got)
	}
	// Three consecutive failures make every worker ineligible; one success restores it.
	mode.Store("500")
	for i := range pool.DefaultUnhealthyAfter {
		if err := f.s.ScrapeAll(ctx); err == nil || !strings.Contains(err.Error(), "status 500") {
			t.Fatalf("scrape %d = %v", i, err)
		}
	}
	f.p.Snapshot(&s, pool.Request{})
	if len(s.Decode)+len(s.Prefill) != 0 {
		t.Fatalf("after %d failures snapshot still has %d+%d workers", pool.DefaultUnhealthyAfter, len(s.Decode), len(s.Prefill))
	}
	if w := info(t, f.p, "d0"); w.Healthy || w.KVCapacityBlocks != 27000 {
		t.Fatalf("unhealthy worker keeps its last capacity: %+v", w)
	}
	mode.Store("garbage")
	if err := f.s.ScrapeAll(ctx); !errors.Is(err, pool.ErrMetricsFormat) {
		t.Fatalf("garbage scrape = %v", err)
	}
	mode.Store("ok")
	if err := f.s.ScrapeAll(ctx); err != nil {
		t.Fatal(err)
	}
	f.p.Snapshot(&s, pool.Request{})
	if len(s.Decode) != 2 || len(s.Prefill) != 1 {
		t.Fatalf("after recovery snapshot has %d+%d workers", len(s.Decode), len(s.Prefill))
	}
	for outcome, want := range map[string]float64{"ok": 2, "http_error": 3, "parse_error": 1} {
		if got := testutil.ToFloat64(f.m.Scrapes.WithLabelValues("d0", outcome)); got != want {
			t.Errorf("scrapes{d0,%s} = %v, want %v", outcome, got, want)
		}
	}
	// A pool configured with --block-size 32 warns once per worker about vLLM's 16.
	logs.Reset()
	g := newScrapeFixture(t, pool.Config{BlockSize: 32, Workers: []pool.WorkerConfig{{Name: "d0", Role: pool.RoleDecode, Endpoint: ep}}}, srv.Client(), &logs)
	for range 2 {
		if err := g.s.ScrapeAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "block size differs"); n != 1 || !strings.Contains(logs.String(), "expect=32 err=\"the engine's block size (vllm:cache_config_info block_size, sglang:page_size) is 16\"") {
		t.Fatalf("block size warnings (%d): %s", n, logs.String())
	}
}
