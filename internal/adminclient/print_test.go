package adminclient

import (
	"strings"
	"testing"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestPrintSession: Explain prints a session row and Recent a SESSION column ("-" without a
// session), with the bound worker when there was one.
func TestPrintSession(t *testing.T) {
	var b strings.Builder
	PrintExplain(&b, &condisaggv1.ExplainResponse{Route: "decode", Inputs: &condisaggv1.PolicyInputs{},
		Session: &condisaggv1.SessionAffinity{Outcome: "hit", BoundWorker: "decode-1"}})
	if !strings.Contains(b.String(), "session") || !strings.Contains(b.String(), "hit (bound decode-1)") {
		t.Fatalf("explain:\n%s", b.String())
	}
	b.Reset()
	PrintExplain(&b, &condisaggv1.ExplainResponse{Route: "decode", Inputs: &condisaggv1.PolicyInputs{}})
	if strings.Contains(b.String(), "session") {
		t.Fatalf("explain without a session:\n%s", b.String())
	}
	b.Reset()
	PrintRecent(&b, &condisaggv1.RecentResponse{Total: 2, Kept: 2, Decisions: []*condisaggv1.RecentDecision{
		{Seq: 2, Placement: "decode", Session: &condisaggv1.SessionAffinity{Outcome: "miss"}},
		{Seq: 1, Placement: "prefill"},
	}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// The last two columns: SESSION, then STEADY STATE ("-" without slo_fleet).
	last2 := func(line string) string { f := strings.Fields(line); return strings.Join(f[len(f)-2:], " ") }
	if len(lines) != 4 || !strings.HasSuffix(strings.Join(strings.Fields(lines[1]), " "), "SESSION STEADY STATE") || last2(lines[2]) != "miss -" || last2(lines[3]) != "- -" {
		t.Fatalf("recent:\n%s", b.String())
	}
}

// TestPrintRecentSteadyState: Recent's STEADY STATE column names the regime with the more
// headroom and each regime's prefill utilisation, saturated ones marked, and an invalid regime
// as "-".
func TestPrintRecentSteadyState(t *testing.T) {
	for _, c := range []struct {
		name string
		f    *condisaggv1.FleetForecast
		want string
	}{
		{"split wins", &condisaggv1.FleetForecast{WindowMs: 10000,
			Aggregated: &condisaggv1.FleetRegime{Valid: true, PrefillUtil: 0.95, Saturated: true, Headroom: -0.4},
			Split:      &condisaggv1.FleetRegime{Valid: true, PrefillUtil: 0.61, Headroom: 0.2}},
			"split (prefill util agg 0.95!, split 0.61)"},
		{"aggregated wins", &condisaggv1.FleetForecast{WindowMs: 10000,
			Aggregated: &condisaggv1.FleetRegime{Valid: true, PrefillUtil: 0.3, Headroom: 0.5},
			Split:      &condisaggv1.FleetRegime{Valid: true, PrefillUtil: 0.8, Headroom: 0.1}},
			"aggregated (prefill util agg 0.30, split 0.80)"},
		{"no prefill pool", &condisaggv1.FleetForecast{WindowMs: 10000,
			Aggregated: &condisaggv1.FleetRegime{Valid: true, PrefillUtil: 0.3, Headroom: 0.5}, Split: &condisaggv1.FleetRegime{}},
			"aggregated (prefill util agg 0.30, split -)"},
	} {
		var b strings.Builder
		PrintRecent(&b, &condisaggv1.RecentResponse{Total: 1, Kept: 1, Decisions: []*condisaggv1.RecentDecision{{Seq: 1, Placement: "decode", Fleet: c.f}}})
		if !strings.HasSuffix(strings.TrimSpace(b.String()), c.want) {
			t.Errorf("%s: recent:\n%s\nwant the row to end in %q", c.name, b.String(), c.want)
		}
	}
}
