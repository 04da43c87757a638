package pool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		// Rendered by SGLang 0.5.23's own SchedulerMetricsCollector (gen_sglang_metrics.py): 7
		// running, 3 queued, 42 % of the KV pool, 40,000 pages of 16 tokens.
		{"sglang_metrics.txt", Scrape{Running: 7, Waiting: 3, HasRequests: true, KVUsage: 0.42, NumGPUBlocks: 40000, BlockSize: 16, MaxNumBatchedTokens: -1}},
		// Two data-parallel ranks with priority scheduling: the priority="" totals only (7+8
		// running, 3+4 queued), never the per-priority breakdowns beside them.
		{"sglang_metrics_dp2_priority.txt", Scrape{Running: 15, Waiting: 7, HasRequests: true, KVUsage: 0.52, NumGPUBlocks: 80000, BlockSize: 16, MaxNumBatchedTokens: -1}},
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

// TestParseEngineMetricsSGLangRanks: one SGLang data-parallel rank's share of the page, told
// apart by its dp_rank label as vLLM's engines are by theirs.
func TestParseEngineMetricsSGLangRanks(t *testing.T) {
	for rank, want := range []Scrape{
		{Running: 7, Waiting: 3, HasRequests: true, KVUsage: 0.42, NumGPUBlocks: 40000, BlockSize: 16, MaxNumBatchedTokens: -1},
		{Running: 8, Waiting: 4, HasRequests: true, KVUsage: 0.52, NumGPUBlocks: 40000, BlockSize: 16, MaxNumBatchedTokens: -1},
	} {
		f, err := os.Open(filepath.Join("testdata", "sglang_metrics_dp2_priority.txt"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseEngineMetrics(f, rank)
		f.Close()
		if err != nil || got != want {
			t.Fatalf("rank %d: %+v, %v\nwant %+v", rank, got, err, want)
		}
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

func FuzzParseMetrics(f *testing.F) {
	files, err := filepath.Glob("testdata/*_metrics*.txt")
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
