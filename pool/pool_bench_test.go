package pool

import (
	"github.com/condisagg/condisagg/policy"

	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func benchPool(b *testing.B, n int) *Pool {
	b.Helper()
	var wcs []WorkerConfig
	for i := range n {
		wcs = append(wcs, WorkerConfig{Name: fmt.Sprint("d", i), Role: RoleDecode, Endpoint: fmt.Sprintf("10.1.%d.%d:8000", i/250, i%250+1), NumGPUBlocks: 40000},
			WorkerConfig{Name: fmt.Sprint("p", i), Role: RolePrefill, Endpoint: fmt.Sprintf("10.2.%d.%d:8000", i/250, i%250+1), MaxNumBatchedTokens: 8192})
	}
	p, err := New(Config{Workers: wcs}, Options{Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	// Every decode worker holds a 200-block prefix of the benchmark chain plus other chains.
	for i := range n {
		for c := range 4 {
			k := keys(uint64(c), 200+c*10)
			if c == 0 {
				k = keys(99, 200)
			}
			if err := p.Book(Booking{RequestID: fmt.Sprint(i, "/", c), Mode: ModeBypass, Decode: fmt.Sprint("d", i), Keys: k, ISL: len(k) * 16}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return p
}

// BenchmarkSnapshot fills a per-request snapshot (capacity, load and new-block count of every
// eligible worker) for a 256-block prompt.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("workers=%dx%d/blocks=256", n, n), func(b *testing.B) {
			p := benchPool(b, n)
			req := Request{Keys: keys(99, 256), ISL: 256*16 + 5}
			var s policy.Snapshot
			b.ReportAllocs()
			for b.Loop() {
				p.Snapshot(&s, req)
			}
			if s.Decode[0].NewBlocks != 57 {
				b.Fatalf("new blocks = %d, want 57", s.Decode[0].NewBlocks)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*n), "ns/worker")
		})
	}
}

// BenchmarkBookRelease is one guarded bypass booking of a 256-block prompt and its release.
func BenchmarkBookRelease(b *testing.B) {
	p := benchPool(b, 64)
	k := keys(7, 256)
	bk := Booking{RequestID: "r", Mode: ModeBypass, Decode: "d0", Keys: k, ISL: 256 * 16, PrefillTokens: 1000, Guard: policy.Guard{Threshold: 0.9, Enabled: true}}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Book(bk); err != nil {
			b.Fatal(err)
		}
		p.ReleasePrefill("r")
		p.Release("r")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/block")
}

func BenchmarkParseMetrics(b *testing.B) {
	page, err := os.ReadFile("testdata/vllm_metrics_v1.txt")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMetrics(bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReportUpstream is the response phase's health report of one response on a pool of
// 64+64 workers: a good response on a worker without a failure streak (read lock only), and a
// 5xx followed by the good response that ends its streak (write lock, probe request).
func BenchmarkReportUpstream(b *testing.B) {
	for _, tc := range []struct {
		name string
		seq  []Upstream
	}{
		{"outcome=ok", []Upstream{{Status: 200}}},
		{"outcome=5xx_then_ok", []Upstream{{Status: 503}, {Status: 200}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := benchPool(b, 64)
			p.setProbing(true) // as while Run probes: failures count
			b.ReportAllocs()
			for b.Loop() {
				for _, u := range tc.seq {
					if err := p.ReportUpstream("d7", u); err != nil {
						b.Fatal(err)
					}
				}
			}
			if w := p.byIDForTest("d7"); !w.eligible || w.health.upstream != 0 {
				b.Fatalf("d7 eligible %v streak %d", w.eligible, w.health.upstream)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tc.seq)), "ns/response")
		})
	}
}
