package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRun: the three runs print their rows; with affinity on (no guard, isl_bounding) every
// follow-up lands on its previous turn's worker, more than with it off, and the oracle matches.
func TestRun(t *testing.T) {
	var b strings.Builder
	o := options{trace: "testdata/mooncake_conversation_head150.jsonl", shape: "2P2D", policy: "isl_bounding",
		slo: "ttft=2s,tpot=100ms", model: "llama3.1-8b-h100", decodeBusy: -1, seed: 1}
	if err := run(context.Background(), o, &b); err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^(off|on|oracle)\s+(\d+) of\s+(\d+)`)
	got := map[string][2]int{}
	for _, m := range row.FindAllStringSubmatch(b.String(), -1) {
		on, _ := strconv.Atoi(m[2])
		all, _ := strconv.Atoi(m[3])
		got[m[1]] = [2]int{on, all}
	}
	off, on, oracle := got["off"], got["on"], got["oracle"]
	if len(got) != 3 || on[1] == 0 || on[0] != on[1] || off[0] >= on[0] || oracle != on {
		t.Fatalf("rows %v in:\n%s", got, b.String())
	}
	if !strings.Contains(b.String(), "hit=") {
		t.Fatalf("no session outcomes:\n%s", b.String())
	}
	o.policy = "fast"
	if err := run(context.Background(), o, &b); err == nil || !strings.Contains(err.Error(), `-policy: "fast"`) {
		t.Fatalf("bad policy: %v", err)
	}
}
