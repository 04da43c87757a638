package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var scannerPatterns = []string{qwen2Pattern, llama3Pattern, gpt2Pattern}

// tablesDiffer reports whether s holds a character whose class in Go's unicode
// tables (regexp2) differs from Hugging Face's (the scanner), e.g. a letter
// added in Unicode 16.
func tablesDiffer(s string) bool {
	for _, r := range s {
		if classOfRune(r) != goClassOfRune(r) {
			return true
		}
	}
	return false
}

// checkScannerAgrees fails when the scanner and regexp2 split s differently.
// Inputs where the two engines' Unicode tables differ are skipped.
func checkScannerAgrees(t *testing.T, pattern, s string) {
	t.Helper()
	if tablesDiffer(s) {
		return
	}
	re, err := newRegexSplit(pattern)
	if err != nil {
		t.Fatal(err)
	}
	want := re.split(nil, s, true)
	got := newScanner(pattern).split(nil, s, true)
	if !slices.Equal(got, want) {
		t.Fatalf("pattern %.30q on %q:\nscanner %q\nregexp2 %q", pattern, s, got, want)
	}
}

// TestScannerMatchesRegexp2OnCorpus: the hot-path scanner splits corpus texts
// exactly as regexp2 runs the tokenizer.json pattern.
func TestScannerMatchesRegexp2OnCorpus(t *testing.T) {
	texts := readJSONL[string](t, "conformance_texts.jsonl.gz")
	// Every third text keeps this fast under -race; the conformance tests run
	// the scanner on all of them.
	for _, p := range scannerPatterns {
		for i := 0; i < len(texts); i += 3 {
			checkScannerAgrees(t, p, texts[i])
		}
	}
}

func TestScannerMatchesRegexp2OnEdgeCases(t *testing.T) {
	cases := []string{"'S 'RE 'Ll 'x", "a\n\n  b", "  \n  ", "x  ", " \u00a0\u3000x", "\t\tfoo", "1234567", "½①²",
		"!!\n\r\nx", " !x", " 1", "\r\n\r\n", "e\u0301", "'", " ' ", "   ", "\u2028a", "a\u0085b"}
	for _, p := range scannerPatterns {
		for _, s := range cases {
			checkScannerAgrees(t, p, s)
		}
	}
}

// FuzzScannerMatchesRegexp2: on any valid UTF-8 the scanner equals regexp2.
func FuzzScannerMatchesRegexp2(f *testing.F) {
	for _, s := range []string{"Hello, world! 123", "a\n\n  b", "'s 'LL", "😀 \u3000x", "  \t\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		if !utf8.ValidString(s) {
			t.Fatal("sanitised string is not UTF-8")
		}
		for _, p := range scannerPatterns {
			checkScannerAgrees(t, p, s)
		}
	})
}

// TestScannerFollowsHFUnicodeTables: characters Go's tables do not classify
// yet split as Hugging Face splits them (expectations from tokenizers 0.23.3).
func TestScannerFollowsHFUnicodeTables(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string
	}{
		{"unicode16_egyptian_ext_a_is_a_letter", "1\U0001377b's", []string{"1", "\U0001377b", "'s"}},
		{"unicode16_letter_before_contraction", "\U00014342'st", []string{"\U00014342", "'s", "t"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := newScanner(llama3Pattern).split(nil, c.in, true); !slices.Equal(got, c.want) {
				t.Errorf("split(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
	differ := 0
	for _, r := range hfClassRanges {
		for c := r.lo; c <= r.hi; c++ {
			if goClassOfRune(c) != r.cls {
				differ++
			}
		}
	}
	if differ == 0 {
		t.Log("Go's unicode tables now agree with Hugging Face's everywhere")
	}
}
