package tokenizer

import (
	"math/rand/v2"
	"testing"
)

// TestPlainPrefixMatchesNaive checks the word-at-a-time scan against a byte loop.
func TestPlainPrefixMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{'a', ' ', 0x1f, 0x20, 0x00, '\\', 0x7f, 0x80, 0x9f, 0xa0, 0xff, '"'}
	for range 20000 {
		s := make([]byte, rng.IntN(40))
		for i := range s {
			if rng.IntN(8) == 0 {
				s[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				s[i] = byte(0x21 + rng.IntN(0xde))
			}
		}
		want := len(s)
		for i, c := range s {
			if c == '\\' || c < 0x20 {
				want = i
				break
			}
		}
		if got := plainPrefix(s); got != want {
			t.Fatalf("plainPrefix(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestRenderChatOwnsItsPrompt checks that the prompt and ids do not share memory with
// the body, whose strings the chat decoder borrows during the call.
func TestRenderChatOwnsItsPrompt(t *testing.T) {
	tk := newSyntheticWithTemplate(t, `{% for m in messages %}{{ m.content }}{% endfor %}`)
	body := []byte(`{"messages":[{"role":"user","content":"only the content of a long enough message"}]}`)
	prompt, err := tk.RenderChat(body, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "only the content of a long enough message"
	for i := range body {
		body[i] = 'x'
	}
	if prompt != want {
		t.Errorf("prompt after the body changed = %q, want %q", prompt, want)
	}
}
