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
	if len(lines) != 4 || !strings.HasSuffix(lines[1], "SESSION") || !strings.HasSuffix(lines[2], "miss") || !strings.HasSuffix(lines[3], "-") {
		t.Fatalf("recent:\n%s", b.String())
	}
}
