package pool

import (
	"github.com/condisagg/condisagg/policy"

	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		file string
		want Scrape
	}{
		{"vllm_metrics_v1.txt", Scrape{Running: 3, Waiting: 2, HasRequests: true, KVUsage: 0.4375, NumGPUBlocks: 27000, BlockSize: 16, MaxNumBatchedTokens: -1}},
		{"vllm_metrics_dp2_legacy.txt", Scrape{Running: 5, Waiting: 7, HasRequests: true, KVUsage: 0.5, NumGPUBlocks: 2500, BlockSize: 16, MaxNumBatchedTokens: 8192}},
		{"vllm_metrics_raydp_sentinel.txt", Scrape{KVUsage: -1, NumGPUBlocks: 0, BlockSize: 16, MaxNumBatchedTokens: -1}},
		{"vllm_metrics_unknown_blocks.txt", Scrape{HasRequests: true, KVUsage: -1, NumGPUBlocks: -1, BlockSize: 16, MaxNumBatchedTokens: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseMetrics(f)
			if err != nil {
				t.Fatalf("ParseMetrics: %v", err)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseMetricsRejects(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"no_value", "vllm:num_requests_running\n"},
		{"bad_value", "vllm:num_requests_running{engine=\"0\"} three\n"},
		{"unterminated_label", "vllm:num_requests_running{engine=\"0} 1\n"},
		{"label_without_quotes", "vllm:num_requests_running{engine=0} 1\n"},
		{"no_name", "{engine=\"0\"} 1\n"},
		{"too_many_fields", "x 1 2 3\n"},
		{"line_over_1MiB", "x{a=\"" + strings.Repeat("y", maxScrapeLine) + "\"} 1\n"},
		{"body_over_8MiB", strings.Repeat("# padding padding padding padding padding padding\n", maxScrapeBytes/50+2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseMetrics(strings.NewReader(tc.text)); !errors.Is(err, ErrMetricsFormat) {
				t.Fatalf("ParseMetrics = %v, want ErrMetricsFormat", err)
			}
		})
	}
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
	f := newFixture(t, Config{ScrapeInterval: 10 * time.Second, Workers: []WorkerConfig{
		{Name: "d0", Role: RoleDecode, Endpoint: ep},
		{Name: "d1", Role: RoleDecode, Endpoint: ep, NumGPUBlocks: 500},
		{Name: "p0", Role: RolePrefill, Endpoint: ep, MaxNumBatchedTokens: 2048},
	}})
	f.p.http = srv.Client()
	var logs strings.Builder
	f.p.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	if w := f.info(t, "d0"); w.KVCapacityBlocks != -1 {
		t.Fatalf("kvcap before scrape = %d, want -1", w.KVCapacityBlocks)
	}
	if err := f.p.ScrapeAll(ctx); err != nil {
		t.Fatalf("ScrapeAll: %v", err)
	}
	if w := f.info(t, "d0"); w.KVCapacityBlocks != 27000 || w.Scrape.KVUsage != 0.4375 || !w.Scrape.At.Equal(t0) {
		t.Fatalf("d0 after scrape = %+v", w)
	}
	if strings.Contains(logs.String(), "block size differs") {
		t.Fatalf("block size 16 matches the default yet was reported: %s", logs.String())
	}
	if w := f.info(t, "d1"); w.KVCapacityBlocks != 500 {
		t.Fatalf("configured kvcap must win over scraped: %d", w.KVCapacityBlocks)
	}
	if got := testutil.ToFloat64(f.m.KVCapacityBlocks.WithLabelValues("d0")); got != 27000 {
		t.Fatalf("kv_capacity_blocks{d0} = %v", got)
	}
	// Requests: max(booked, running+waiting) while the scrape is fresh.
	if err := f.p.Book(Booking{RequestID: "r", Mode: ModeBypass, Decode: "d0", ISL: 16}); err != nil {
		t.Fatal(err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, Request{ISL: 16})
	if got := s.Decode[0].ActiveRequests; got != 5 {
		t.Fatalf("fresh scrape: requests = %d, want max(1, 3+2) = 5", got)
	}
	f.clock.Advance(31 * time.Second)
	f.p.Snapshot(&s, Request{ISL: 16})
	if got := s.Decode[0].ActiveRequests; got != 1 {
		t.Fatalf("stale scrape: requests = %d, want the booked 1", got)
	}
	// Three consecutive failures make every worker ineligible; one success restores it.
	mode.Store("500")
	for i := range DefaultUnhealthyAfter {
		if err := f.p.ScrapeAll(ctx); err == nil || !strings.Contains(err.Error(), "status 500") {
			t.Fatalf("scrape %d = %v", i, err)
		}
	}
	f.p.Snapshot(&s, Request{})
	if len(s.Decode)+len(s.Prefill) != 0 {
		t.Fatalf("after %d failures snapshot still has %d+%d workers", DefaultUnhealthyAfter, len(s.Decode), len(s.Prefill))
	}
	if w := f.info(t, "d0"); w.Healthy || w.KVCapacityBlocks != 27000 {
		t.Fatalf("unhealthy worker keeps its last capacity: %+v", w)
	}
	mode.Store("garbage")
	if err := f.p.ScrapeAll(ctx); !errors.Is(err, ErrMetricsFormat) {
		t.Fatalf("garbage scrape = %v", err)
	}
	mode.Store("ok")
	if err := f.p.ScrapeAll(ctx); err != nil {
		t.Fatal(err)
	}
	f.p.Snapshot(&s, Request{})
	if len(s.Decode) != 2 || len(s.Prefill) != 1 {
		t.Fatalf("after recovery snapshot has %d+%d workers", len(s.Decode), len(s.Prefill))
	}
	for outcome, want := range map[string]float64{"ok": 2, "http_error": 3, "parse_error": 1} {
		if got := testutil.ToFloat64(f.m.Scrapes.WithLabelValues("d0", outcome)); got != want {
			t.Errorf("scrapes{d0,%s} = %v, want %v", outcome, got, want)
		}
	}
	// A pool configured with --block-size 32 warns once per worker about vLLM's 16.
	g := newFixture(t, Config{BlockSize: 32, Workers: []WorkerConfig{{Name: "d0", Role: RoleDecode, Endpoint: ep}}})
	g.p.http = srv.Client()
	logs.Reset()
	g.p.log = slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		if err := g.p.ScrapeAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "block size differs"); n != 1 || !strings.Contains(logs.String(), "expect=32 err=\"vllm:cache_config_info block_size=16\"") {
		t.Fatalf("block size warnings (%d): %s", n, logs.String())
	}
}

func FuzzParseMetrics(f *testing.F) {
	files, err := filepath.Glob("testdata/vllm_metrics_*.txt")
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseMetrics(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if s.NumGPUBlocks < -1 || s.BlockSize < -1 || s.MaxNumBatchedTokens < -1 {
			t.Fatalf("negative capacity accepted: %+v", s)
		}
		if !s.HasRequests && (s.Running != 0 || s.Waiting != 0) {
			t.Fatalf("request counts without a request metric: %+v", s)
		}
		// One engine's view parses whenever the whole page does, and sees no more requests.
		e, err := ParseEngineMetrics(strings.NewReader(string(data)), 1)
		if err != nil {
			t.Fatalf("ParseEngineMetrics(engine 1) failed on a page ParseMetrics accepts: %v", err)
		}
		if e.HasRequests && !s.HasRequests {
			t.Fatalf("engine 1 has request metrics the whole page lacks: %+v vs %+v", e, s)
		}
	})
}
