package cluster

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/policy"
)

// BenchmarkRun simulates the 400-request Mooncake slice on 4P4D per routing mode and reports
// simulated requests per CPU second and simulated seconds per wall second.
func BenchmarkRun(b *testing.B) {
	reqs := traceHead(b, 400)
	either := policy.DefaultDisagg()
	either.Policy = policy.ISLOrLoad
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"mode=aggregated", Config{Decode: 8, Mode: Aggregated}},
		{"mode=disaggregated", Config{Prefill: 4, Decode: 4, Mode: Disaggregated}},
		{"mode=isl_or_load", Config{Prefill: 4, Decode: 4, Mode: Conditional, Disagg: either}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var span float64
			for b.Loop() {
				rep, err := Run(context.Background(), bc.cfg, reqs, Options{})
				if err != nil {
					b.Fatal(err)
				}
				span = rep.Span.Seconds()
			}
			n := float64(b.N)
			b.ReportMetric(n*float64(len(reqs))/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(n*span/b.Elapsed().Seconds(), "sim-s/s")
		})
	}
}
