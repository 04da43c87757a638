package tune

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestBarSilentOffTerminal: a bar whose writer is a buffer, a regular file or a pipe draws
// nothing, even when asked to show, through a whole run's calls.
func TestBarSilentOffTerminal(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	var buf bytes.Buffer
	for _, tc := range []struct {
		name string
		w    interface{ Write([]byte) (int, error) }
		size func() int64
	}{
		{"buffer", &buf, func() int64 { return int64(buf.Len()) }},
		{"regular_file", file, func() int64 { st, _ := file.Stat(); return st.Size() }},
		{"pipe", pw, func() int64 { return 0 }}, // a write would be read below
	} {
		t.Run(tc.name, func(t *testing.T) {
			if isTerminal(tc.w) {
				t.Fatal("isTerminal = true")
			}
			for _, end := range []error{nil, errors.New("failed")} {
				b := NewBar(tc.w, true)
				b.Plan(1000)
				b.Advance("isl_bounding T=512 R=0.7", 400)
				b.Advance("isl_bounding T=512 R=0.7", 600)
				b.End(end)
			}
			if n := tc.size(); n != 0 {
				t.Fatalf("bar wrote %d bytes", n)
			}
		})
	}
	pw.Close()
	if rest, _ := readAll(pr); len(rest) != 0 {
		t.Fatalf("bar wrote %q into a pipe", rest)
	}
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}
