package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/condisagg/condisagg/cost"
)

// benchFixture builds n decode and n prefill workers with varied load and overlap.
func benchFixture(n int) (*Snapshot, *Input) {
	snap := &Snapshot{Version: 1}
	in := &Input{Now: testNow, ISL: 4096}
	for i := range n {
		snap.Decode = append(snap.Decode, WorkerLoad{ID: fmt.Sprintf("d%d", i), KVCapacityBlocks: 40000,
			ActivePrefillTokens: int64(i * 97 % 5000), ActiveDecodeBlocks: int64(i * 131 % 20000), NewBlocks: 256, ActiveRequests: int64(i % 7)})
		snap.Prefill = append(snap.Prefill, WorkerLoad{ID: fmt.Sprintf("p%d", i), MaxBatchedTokens: 8192,
			ActivePrefillTokens: int64(i * 331 % 20000), ActiveRequests: int64(i % 5)})
		in.Decode = append(in.Decode, Signal{Worker: snap.Decode[i].ID, GPU: i * 3 % 200, Host: i % 4, Stream: live()})
		in.Prefill = append(in.Prefill, Signal{Worker: snap.Prefill[i].ID, GPU: i * 5 % 100, Stream: live()})
	}
	return snap, in
}

// BenchmarkDecide is one decision over a prebuilt snapshot, excluding the overlap lookup. The
// fixture's decisions take the remote path (remote_isl_too_long), the heaviest one: decode
// preview fused with the remote-decode target, prefill preview (load policies) or prefill
// target, policy and guard.
func BenchmarkDecide(b *testing.B) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"isl_or_load_guard", func(c *Config) {
			c.Disagg.Policy, c.Disagg.PrefillBusyThreshold, c.Disagg.DecodeBusyThreshold = ISLOrLoad, Set(2), Set(0.8)
		}},
		{"isl_bounding", nil},
		{"isl_or_load_softmax", func(c *Config) {
			c.Disagg.Policy, c.Disagg.PrefillBusyThreshold, c.Selection.Temperature = ISLOrLoad, Set(2), 0.5
		}},
		{"slo", benchSLO(false)},
		{"slo_fleet", benchSLO(true)},
	} {
		for _, n := range []int{8, 64, 256} {
			b.Run(fmt.Sprintf("%s/workers=%dx%d", tc.name, n, n), func(b *testing.B) {
				cfg := enabledConfig()
				if tc.mod != nil {
					tc.mod(&cfg)
				}
				snap, in := benchFixture(n)
				if cfg.Disagg.SLOFleet {
					r := PoolRates{Requests: 20, PrefillTokens: 40000, PrefillPairs: 8e7, OutputTokens: 5000, QueueGrowth: 100}
					in.Fleet = FleetView{Window: 10 * time.Second, Decode: r, Prefill: r}
				}
				rng := newRand(1)
				b.ReportAllocs()
				var sink Decision
				for b.Loop() {
					sink = Decide(&cfg, in, snap, rng)
				}
				if !sink.Routable() {
					b.Fatalf("no target: %v (%v)", sink.Route, sink.Reason)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*n), "ns/worker")
			})
		}
	}
}

// benchSLO is the slo policy on the 8B H100 model, with or without slo_fleet (the fixture's
// fleet view then offers 80,000 prompt tokens/s).
func benchSLO(fleet bool) func(*Config) {
	return func(c *Config) {
		m, _ := cost.ByName("llama3.1-8b-h100")
		c.Disagg.Policy, c.Disagg.Cost, c.Disagg.CostModel = SLOKind, m, m.Name
		c.Disagg.SLOFleet = fleet
	}
}
