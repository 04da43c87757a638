package feedback

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/policy"
)

// TestFeedbackCollector: the slo controller's bound and its reversals, which the alert rules
// read (CondisaggSLOFeedbackPinned, CondisaggSLOFeedbackOscillating), follow the controller:
// a latency that steps up, down and up again turns the loop back twice (the second turn back
// past a band four times as wide as the first: a larger step).
func TestFeedbackCollector(t *testing.T) {
	cfg := policy.DefaultConfig()
	l, reg := New(), prometheus.NewRegistry()
	if err := reg.Register(NewCollector(l, func() *policy.Config { return &cfg }, func() int { return 4 })); err != nil {
		t.Fatal(err)
	}
	bound := cfg.Disagg.SLOFeedbackMax
	want := fmt.Sprintf(`
# HELP condisagg_slo_feedback_bound The configured bound of the slo controller's correction (slo_feedback_max): factors stay in [1/bound, bound].
# TYPE condisagg_slo_feedback_bound gauge
condisagg_slo_feedback_bound %g
`, bound)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "condisagg_slo_feedback_bound"); err != nil {
		t.Fatal(err)
	}
	reversals := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "condisagg_slo_feedback_reversals_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["route"] == "decode" && labels["metric"] == "ttft" {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatal("no condisagg_slo_feedback_reversals_total{route=decode,metric=ttft}")
		return 0
	}
	if got := reversals(); got != 0 {
		t.Fatalf("reversals before any sample = %v", got)
	}
	for _, ratio := range []float64{3, 1, 8} {
		for range 400 {
			l.ObserveLatency(policy.RouteDecode, MetricTTFT, 100, 100*ratio, 1, bound)
		}
	}
	if got := reversals(); got != 2 {
		t.Fatalf("reversals after up, down, up = %v, want 2", got)
	}
}
