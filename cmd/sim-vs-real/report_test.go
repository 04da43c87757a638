package main

import (
	"slices"
	"testing"
)

func TestAgreeAndRank(t *testing.T) {
	real := map[string]float64{"aggregated": 0.45, "slo": 0.50, "isl_or_load": 0.16, "disaggregated": 0.13}
	for _, tc := range []struct {
		name string
		sim  map[string]float64
		want bool
	}{
		{"same_order", map[string]float64{"aggregated": 0.5, "slo": 0.6, "isl_or_load": 0.3, "disaggregated": 0.2}, true},
		{"tie_agrees", map[string]float64{"aggregated": 0.6, "slo": 0.6, "isl_or_load": 0.3, "disaggregated": 0.2}, true},
		{"swapped", map[string]float64{"aggregated": 0.6, "slo": 0.5, "isl_or_load": 0.3, "disaggregated": 0.2}, false},
		{"bottom_swapped", map[string]float64{"aggregated": 0.5, "slo": 0.6, "isl_or_load": 0.2, "disaggregated": 0.3}, false},
	} {
		if got := agree(real, tc.sim); got != tc.want {
			t.Errorf("%s: agree = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := rank(real); !slices.Equal(got, []string{"slo", "aggregated", "isl_or_load", "disaggregated"}) {
		t.Errorf("rank = %v", got)
	}
}
