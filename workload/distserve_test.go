package workload

import (
	"slices"
	"strings"
	"testing"
)

// TestDistServeMix: the preset draws 70% chat and 30% code with the stated medians, unique
// prompts, arrivals in order at about the rate; a bad config names every bad field.
func TestDistServeMix(t *testing.T) {
	reqs, err := DistServeMix().Generate(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 6000 {
		t.Fatalf("%d requests", len(reqs))
	}
	ids := map[uint64]bool{}
	var outs []int
	for i, r := range reqs {
		if i > 0 && r.Arrival < reqs[i-1].Arrival || r.InputTokens < 1 || r.OutputTokens < 1 || ids[r.Prompt[0].ID] {
			t.Fatalf("request %d: %+v", i, r)
		}
		ids[r.Prompt[0].ID] = true
		outs = append(outs, r.OutputTokens)
	}
	slices.Sort(outs)
	if med := outs[len(outs)/2]; med < 150 || med > 400 {
		t.Fatalf("output median %d, want between the code (120) and chat (350) medians", med)
	}
	if rate := float64(len(reqs)) / reqs[len(reqs)-1].Arrival.Seconds(); rate < 55 || rate > 65 {
		t.Fatalf("rate %.2f req/s, want ~60", rate)
	}
	bad := DistServeMix()
	bad.Requests, bad.ChatShare, bad.CodeOutput.Sigma = 0, 2, -1
	err = bad.Validate()
	for _, f := range []string{"requests", "chat_share", "code_output"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v lacks %s", err, f)
		}
	}
}
