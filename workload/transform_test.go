package workload

import (
	"slices"
	"testing"
)

// commonPrefix is the number of leading tokens a and b share.
func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestScaleLengthsKeepsSharedPrefixes(t *testing.T) {
	all := readHead(t)
	scaled, err := ScaleLengths(all, 1.0/16, 0.125)
	if err != nil {
		t.Fatal(err)
	}
	v := DefaultVocab()
	pairs := 0
	for i := range all {
		r, s := &all[i], &scaled[i]
		if s.Arrival != r.Arrival || s.Index != r.Index || s.Parent != r.Parent {
			t.Fatalf("request %d: arrival, index or parent changed", i)
		}
		full := 0 // full 512-token blocks scale to exactly 32 tokens
		for _, seg := range r.Prompt {
			if seg.Len == TraceBlockTokens {
				full++
			}
		}
		if want := (r.InputTokens + 15) / 16; s.InputTokens < full*32 || s.InputTokens > want+len(r.Prompt) {
			t.Fatalf("request %d: %d input tokens scaled to %d (full blocks %d)", i, r.InputTokens, s.InputTokens, full)
		}
		if want := (r.OutputTokens + 7) / 8; s.OutputTokens != want || segmentsLen(s.Output) != want {
			t.Fatalf("request %d: %d output tokens scaled to %d, want %d", i, r.OutputTokens, s.OutputTokens, want)
		}
		// Two requests whose prompts share k leading 512-token blocks share 32k scaled tokens.
		for j := range i {
			k := 0
			for k < len(r.Prompt) && k < len(all[j].Prompt) && r.Prompt[k] == all[j].Prompt[k] && r.Prompt[k].Len == TraceBlockTokens {
				k++
			}
			if k == 0 {
				continue
			}
			pairs++
			a, b := v.AppendPrompt(nil, s), v.AppendPrompt(nil, &scaled[j])
			if got := commonPrefix(a, b); got < 32*k {
				t.Fatalf("requests %d and %d share %d blocks but %d scaled tokens, want >= %d", j, i, k, got, 32*k)
			}
		}
	}
	if pairs == 0 {
		t.Fatal("the fixture has no requests sharing a block; sharing is not exercised")
	}
	if all[0].Prompt[0].Len != TraceBlockTokens || scaled[0].Prompt[0].Len != 32 {
		t.Fatalf("the originals changed or the first block is not 32 tokens: %+v", scaled[0].Prompt[0])
	}
}

// A session's next turn extends its previous prompt within one stream (segments with Start >
// 0); scaled, the previous prompt must still be a prefix of the next.
func TestScaleLengthsKeepsStreamsContiguous(t *testing.T) {
	reqs, err := Synthetic("agentic-code", 3)
	if err != nil {
		t.Fatal(err)
	}
	reqs = Window{MaxRequests: 300}.Apply(reqs)
	scaled, err := ScaleLengths(reqs, 0.1, 0.3)
	if err != nil {
		t.Fatal(err)
	}
	v := DefaultVocab()
	checked := 0
	for i := range reqs {
		p := reqs[i].Parent
		if p < 0 {
			continue
		}
		before := commonPrefix(v.AppendPrompt(nil, &reqs[p]), v.AppendPrompt(nil, &reqs[i]))
		if before != reqs[p].InputTokens {
			continue // this turn does not extend its parent's whole prompt
		}
		prev, next := v.AppendPrompt(nil, &scaled[p]), v.AppendPrompt(nil, &scaled[i])
		if len(next) <= len(prev) || !slices.Equal(next[:len(prev)], prev) {
			t.Fatalf("turn %d (parent %d): the scaled parent prompt (%d tokens) is not a prefix of the turn's (%d)", i, p, len(prev), len(next))
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no turn extends its parent's prompt; contiguity is not exercised")
	}
	for _, bad := range [][2]float64{{0, 1}, {1, 0}, {1.5, 1}, {1, -1}, {nanValue(), 1}} {
		if _, err := ScaleLengths(reqs, bad[0], bad[1]); err == nil {
			t.Fatalf("ScaleLengths(%v, %v) accepted", bad[0], bad[1])
		}
	}
}
