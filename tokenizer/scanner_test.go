package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

var scannerPatterns = []string{qwen2Pattern, llama3Pattern, gpt2Pattern}

// referenceRegexps caches the compiled regexp2 reference per pattern.
var (
	referenceMu      sync.Mutex
	referenceRegexps = map[string]*regexSplit{}
)

func referenceSplit(t *testing.T, pattern string) *regexSplit {
	t.Helper()
	referenceMu.Lock()
	defer referenceMu.Unlock()
	if re, ok := referenceRegexps[pattern]; ok {
		return re
	}
	re, err := newRegexSplit(pattern)
	if err != nil {
		t.Fatal(err)
	}
	referenceRegexps[pattern] = re
	return re
}

// checkScannerAgrees fails when the scanner and regexp2 (with its Unicode
// properties widened to Hugging Face's) split s differently.
func checkScannerAgrees(t *testing.T, pattern, s string) {
	t.Helper()
	want := referenceSplit(t, pattern).split(nil, s, true)
	got := newScanner(pattern).split(nil, s, true)
	if !slices.Equal(got, want) {
		t.Fatalf("pattern %.30q on %q:\nscanner %q\nregexp2 %q", pattern, s, got, want)
	}
}

// TestScannerMatchesRegexp2OnCorpus: the hot-path scanner splits every corpus
// text exactly as regexp2 runs the tokenizer.json pattern.
func TestScannerMatchesRegexp2OnCorpus(t *testing.T) {
	texts := readJSONL[string](t, "conformance_texts.jsonl.gz")
	for _, p := range scannerPatterns {
		for _, s := range texts {
			checkScannerAgrees(t, p, s)
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
	// Every character whose class Go's tables and Hugging Face's disagree on,
	// in context: the scanner must equal regexp2 with widened properties.
	differ := 0
	for c := rune(0x80); c <= unicode.MaxRune; c++ {
		if utf16.IsSurrogate(c) || classOfRune(c) == goClassOfRune(c) {
			continue
		}
		differ++
		ch := string(c)
		for _, p := range scannerPatterns {
			checkScannerAgrees(t, p, "a"+ch+"'s "+ch+ch+"1"+ch+" \n"+ch)
		}
	}
	if differ == 0 {
		t.Log("Go's unicode tables now agree with Hugging Face's everywhere")
	}
}

func TestWidenUnicodeProps(t *testing.T) {
	add := propAdditions('L')
	if add == "" {
		t.Skip("Go's tables already know every letter Hugging Face's engine knows")
	}
	got := widenUnicodeProps(`a\p{L}+[^x\p{L}]\P{L}\\p{L}\p{Zs}`)
	want := `a[\p{L}` + add + `]+[^x\p{L}` + add + `]\P{L}\\p{L}\p{Zs}`
	if got != want {
		t.Errorf("widenUnicodeProps:\n got %q\nwant %q", got, want)
	}
	// A Unicode 16 letter now matches \p{L} in regexp2.
	re, err := newRegexSplit(`\p{L}+`)
	if err != nil {
		t.Fatal(err)
	}
	if got := re.split(nil, "1\U0001377b\U0001377b1", true); !slices.Equal(got, []string{"1", "\U0001377b\U0001377b", "1"}) {
		t.Errorf("widened \\p{L} split = %q", got)
	}
}
