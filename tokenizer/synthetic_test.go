package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

type synthProbe struct {
	Text    string   `json:"text"`
	Special bool     `json:"special"`
	IDs     []uint32 `json:"ids"`
}

func loadSynthetic(t testing.TB, name string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "synthetic_"+name+"_tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(data, nil, "", Options{})
	if err != nil {
		t.Fatalf("New(synthetic %s): %v", name, err)
	}
	return tk
}

// TestSyntheticFeatures covers what the two real models do not use: added-token
// single_word/lstrip/rstrip, normalized added tokens under NFKC, ByteLevel with
// use_regex and add_prefix_space, TemplateProcessing with a suffix, and the
// SentencePiece-style family (Prepend/Replace normalizers or Metaspace with
// prepend_scheme first/always and split, byte_fallback, fused unk), and the
// two-pass added-token match (also without a normalizer, and on the
// normalized form of a normalized token's content). Expectations come from Hugging Face tokenizers (gen_synthetic.py).
func TestSyntheticFeatures(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "synthetic_expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expect map[string][]synthProbe
	if err := json.Unmarshal(data, &expect); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bytelevel", "sentencepiece", "metaspace_first", "metaspace_always", "overlap", "normalized_content"} {
		t.Run(name, func(t *testing.T) {
			tk := loadSynthetic(t, name)
			if len(expect[name]) == 0 {
				t.Fatal("no probes")
			}
			for _, p := range expect[name] {
				got := tk.Encode(nil, p.Text, SpecialTokens(p.Special))
				if !equalIDs(got, p.IDs) {
					t.Errorf("Encode(%q, special=%v) = %v, want %v", p.Text, p.Special, got, p.IDs)
				}
			}
		})
	}
}
