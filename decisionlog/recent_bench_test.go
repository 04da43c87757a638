package decisionlog

import (
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// BenchmarkRecentAdd is the request-path cost of recording a decision for the status page:
// serial, and from GOMAXPROCS goroutines at once (the per-slot locks and the bucket counter
// are then shared).
func BenchmarkRecentAdd(b *testing.B) {
	out := outcomeOf(policy.RoutePrefill, policy.ReasonRemoteISLTooLong, "decode-0", "prefill-0")
	b.Run("serial", func(b *testing.B) {
		r, err := NewRecent(RecentOptions{})
		if err != nil {
			b.Fatal(err)
		}
		at := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			r.Add(at, "req", out)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	b.Run("parallel", func(b *testing.B) {
		r, err := NewRecent(RecentOptions{})
		if err != nil {
			b.Fatal(err)
		}
		at := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Add(at, "req", out)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}
