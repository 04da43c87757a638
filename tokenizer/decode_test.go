package tokenizer

import (
	"errors"
	"testing"
)

// TestDecode: Decode inverts Encode on byte-level models (vLLM's /detokenize: [9707, 1879] is
// "Hello world" for Qwen3, docs/vllm-facts.md §g), keeps added tokens' content, replaces a
// cut multi-byte character with U+FFFD and refuses unknown ids.
func TestDecode(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tk := loadModel(t, name, Options{})
		for _, text := range []string{"Hello world", "héllo, 世界! 🎉\n\tend", " leading space", ""} {
			got, err := tk.Decode(tk.Encode(nil, text, WithoutSpecialTokens))
			if err != nil || got != text {
				t.Errorf("%s: Decode(Encode(%q)) = %q, %v", name, text, got, err)
			}
		}
	}
	tk := loadModel(t, "qwen3", Options{})
	if got, err := tk.Decode([]uint32{9707, 1879}); err != nil || got != "Hello world" {
		t.Fatalf("Decode([9707 1879]) = %q, %v", got, err)
	}
	im := tk.Encode(nil, "<|im_start|>user", WithoutSpecialTokens)
	if got, err := tk.Decode(im); err != nil || got != "<|im_start|>user" {
		t.Fatalf("added token: %q, %v", got, err)
	}
	cut := tk.Encode(nil, "世", WithoutSpecialTokens)
	if len(cut) > 1 {
		if got, _ := tk.Decode(cut[:1]); got != "\uFFFD" {
			t.Fatalf("cut character decoded as %q", got)
		}
	}
	if _, err := tk.Decode([]uint32{1 << 30}); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("unknown id: %v", err)
	}
}
