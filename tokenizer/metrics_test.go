package tokenizer

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsReportCacheAcrossReload(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	tk := loadSynthetic(t, "bytelevel")
	tk.cache = newSegmentCache(16, 1<<20)
	m.Track(tk)
	text := "a segment long enough to cache<eos>"
	tk.Encode(nil, text, WithoutSpecialTokens)
	tk.Encode(nil, text, WithoutSpecialTokens)

	next := loadSynthetic(t, "bytelevel")
	next.cache = newSegmentCache(16, 1<<20)
	m.Track(next) // a reload: counters must not go back
	next.Encode(nil, text, WithoutSpecialTokens)

	want := `
# HELP condisagg_tokenizer_segment_cache_hits_total Segments served from the prefix-aware segment cache.
# TYPE condisagg_tokenizer_segment_cache_hits_total counter
condisagg_tokenizer_segment_cache_hits_total 1
# HELP condisagg_tokenizer_segment_cache_misses_total Segments encoded because they were not cached.
# TYPE condisagg_tokenizer_segment_cache_misses_total counter
condisagg_tokenizer_segment_cache_misses_total 2
# HELP condisagg_tokenizer_segment_cache_entries Segments held by the cache.
# TYPE condisagg_tokenizer_segment_cache_entries gauge
condisagg_tokenizer_segment_cache_entries 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"condisagg_tokenizer_segment_cache_hits_total", "condisagg_tokenizer_segment_cache_misses_total",
		"condisagg_tokenizer_segment_cache_entries"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
