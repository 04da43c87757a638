package route

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/kvindex"
)

// TestBigramModelKeysAndCredit: a model whose index has bigram keys (speculative: eagle) keys
// requests by bigram blocks, so a page cached by SGLang with EAGLE is found only with the token
// after it, and credits at most the ⌊(isl-2)/B⌋ pages SGLang's scheduler matches (it matches
// isl-1 tokens, isl-2 pairs), while Explain's overlap stays the cached pages.
func TestBigramModelKeysAndCredit(t *testing.T) {
	m := testModel(t, "eagle", "e", 1, 16, loadTok(t, "qwen3"))
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16, Keys: kvindex.KeysBigram})
	if err != nil {
		t.Fatal(err)
	}
	m.Index = ix
	cfg := enabledConfig()
	r, err := New(Options{Models: []Model{m}, Policy: &cfg, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	toks := prompt(81) // 80 pairs: 5 pages, each with the token after it
	ix.Store("e-d0", &kvindex.Store{Medium: kvindex.GPU, Hashes: []uint64{1, 2, 3, 4, 5}, Tokens: toks,
		Bigram: true, BlockSize: 16, PlainBlocks: 5})
	for _, c := range []struct {
		name                string
		isl                 int
		keys, gpu, cachedTk int
	}{
		// 81 tokens: 5 pages cached and matched, but the scheduler's 80 tokens are 79 pairs: 4.
		{"isl_1_mod_B", 81, 5, 5, 64},
		{"one_more_token", 82, 5, 5, 80},
		// 80 tokens: the 5th page needs token 80, which the request does not have.
		{"page_boundary", 80, 4, 4, 64},
		{"one_page_and_its_next_token", 17, 1, 1, 0},
		{"one_page", 16, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := append(append([]uint32(nil), toks...), 5000)[:c.isl]
			body := `{"model":"eagle","prompt":[` + idsJSON(p) + `]}`
			out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: []byte(body), DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			gpu := 0
			for _, o := range out.Overlaps {
				if o.Worker == "e-d0" {
					gpu = o.GPU
				}
			}
			if out.Keys != c.keys || gpu != c.gpu || out.Decode.ID != "e-d0" && c.cachedTk > 0 || out.Decision.Inputs.Cached != c.cachedTk {
				t.Fatalf("%d tokens: %d keys, overlap %d on e-d0, decode %s credited %d; want %d keys, overlap %d, credit %d",
					c.isl, out.Keys, gpu, out.Decode.ID, out.Decision.Inputs.Cached, c.keys, c.gpu, c.cachedTk)
			}
		})
	}
}
