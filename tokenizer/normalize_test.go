package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestIsASCIIMatchesByteLoop: the word-at-a-time check agrees with a plain byte loop on
// random strings of every length up to 40, with one high byte at each position or none.
func TestIsASCIIMatchesByteLoop(t *testing.T) {
	naive := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return false
			}
		}
		return true
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 41 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(0x80))
		}
		if !isASCII(string(b)) {
			t.Fatalf("isASCII(%q) = false, want true", b)
		}
		for at := range n {
			c := append([]byte(nil), b...)
			c[at] = byte(0x80 + rng.IntN(0x80))
			if got, want := isASCII(string(c)), naive(string(c)); got != want {
				t.Fatalf("isASCII(%q) = %v, want %v (high byte at %d)", c, got, want, at)
			}
		}
	}
}

// TestUnicodeNormASCIIFastPath: for every form, ASCII text comes back unchanged (what the
// fast path returns) and equal to x/text's own result; non-ASCII text still normalizes.
func TestUnicodeNormASCIIFastPath(t *testing.T) {
	ascii := "The router decides\tif prefill runs remotely: 42 tokens!\n" + strings.Repeat("~", 9)
	for _, f := range []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD} {
		n := unicodeNorm{form: f}
		if got := n.normalize(ascii); got != ascii || got != f.String(ascii) {
			t.Errorf("form %v: normalize(ascii) = %q, want it unchanged", f, got)
		}
	}
	if got, want := (unicodeNorm{form: norm.NFC}).normalize("e\u0301 caf\u00e9"), "\u00e9 caf\u00e9"; got != want {
		t.Errorf("NFC of a combining accent = %q, want %q", got, want)
	}
	if got, want := (unicodeNorm{form: norm.NFKC}).normalize("\uff21\uff22 x"), "AB x"; got != want {
		t.Errorf("NFKC of fullwidth letters = %q, want %q", got, want)
	}
}

// BenchmarkUnicodeNormASCII: the NFC check of a 1k-token ASCII prompt (about 5 kB), through
// normalize (word-at-a-time ASCII check first) and through x/text's IsNormalString alone.
func BenchmarkUnicodeNormASCII(b *testing.B) {
	text := strings.Repeat("the router decides whether prefill runs remotely or locally. ", 85)
	n := unicodeNorm{form: norm.NFC}
	b.Run("check=normalize", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if n.normalize(text) != text {
				b.Fatal("changed")
			}
		}
	})
	b.Run("check=x_text_IsNormalString", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if !norm.NFC.IsNormalString(text) {
				b.Fatal("not normal")
			}
		}
	})
}
