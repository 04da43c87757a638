package kvindex

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
)

// FuzzParseMedium checks ParseMedium against a case-folding reference, without allocation.
func FuzzParseMedium(f *testing.F) {
	seeds, err := os.ReadFile("testdata/media.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range bytes.Split(seeds, []byte("\n")) {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := ParseMedium(b)
		want, wantOK := GPU, len(b) == 0
		up := strings.ToUpper(string(b))
		for _, e := range mediumNames {
			if up == e.name && strings.ToUpper(strings.ToLower(string(b))) == up && isASCII(b) {
				want, wantOK = e.m, true
			}
		}
		if !wantOK {
			want = 0
		}
		if got != want || ok != wantOK {
			t.Fatalf("ParseMedium(%q) = %v, %v; want %v, %v", b, got, ok, want, wantOK)
		}
		if a := testing.AllocsPerRun(3, func() { _, _ = ParseMedium(b) }); a != 0 {
			t.Fatalf("ParseMedium(%q) allocated", b)
		}
	})
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzKeys checks that AppendKeys split at any block boundary equals Keys, and the in-place
// local hash equals the portable one.
func FuzzKeys(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}, uint8(2), uint8(1), "")
	f.Add(make([]byte, 4*64), uint8(16), uint8(2), "sql-lora")
	f.Fuzz(func(t *testing.T, raw []byte, bs, cut uint8, lora string) {
		if len(raw) > 1<<16 {
			return
		}
		B := int(bs)%80 + 1
		tokens := make([]uint32, len(raw)/4)
		for i := range tokens {
			tokens[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		all := Keys(tokens, B, []byte(lora))
		if len(all) != len(tokens)/B {
			t.Fatalf("len(Keys) = %d, want %d", len(all), len(tokens)/B)
		}
		c := min(int(cut), len(all))
		got := AppendKeys(nil, 0, tokens[:c*B], B, []byte(lora))
		var parent uint64
		if c > 0 {
			parent = got[c-1]
		}
		got = AppendKeys(got, parent, tokens[c*B:], B, []byte(lora))
		if !slices.Equal(got, all) {
			t.Fatalf("split at %d differs from Keys", c)
		}
		if len(tokens) >= B {
			seed := LoRASeed([]byte(lora))
			if localHash(tokens[:B], seed) != localHashPortable(tokens[:B], seed) {
				t.Fatal("localHash differs from the portable encoding")
			}
		}
	})
}
