package tokenizer

import (
	"testing"
)

// TestConformanceTexts compares Encode with Hugging Face tokenizer.encode
// (add_special_tokens=True) on the committed corpus, token for token.
func TestConformanceTexts(t *testing.T) {
	texts := readJSONL[string](t, "conformance_texts.jsonl.gz")
	if len(texts) < 5000 {
		t.Fatalf("corpus has %d texts, want >= 5000", len(texts))
	}
	for _, m := range modelNames {
		t.Run(m, func(t *testing.T) {
			tk := loadModel(t, m, Options{})
			want := readJSONL[[]uint32](t, "conformance_"+m+"_texts_hf.jsonl.gz")
			if len(want) != len(texts) {
				t.Fatalf("%d expectations for %d texts", len(want), len(texts))
			}
			bad := 0
			for i, text := range texts {
				got := tk.Encode(nil, text, WithSpecialTokens)
				if !equalIDs(got, want[i]) {
					bad++
					if bad <= 10 {
						d := firstDiff(got, want[i])
						t.Errorf("text %d %q: first difference at token %d: got %v want %v", i, clip(text, 80), d, clip32(got[d:], 8), clip32(want[i][d:], 8))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d texts differ", bad, len(texts))
			}
		})
	}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func clip32(s []uint32, n int) []uint32 {
	if len(s) > n {
		return s[:n]
	}
	return s
}
