package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseDisagg checks that the config parser never panics, that accepted configs are in
// range, and that an accepted config survives a round trip through its canonical JSON.
func FuzzParseDisagg(f *testing.F) {
	seeds, err := filepath.Glob("testdata/disagg_*.json")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDisagg(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if errs := d.validate(); len(errs) > 0 {
			t.Fatalf("accepted an invalid config %+v: %v", d, errs)
		}
		again, err := ParseDisagg([]byte(d.String()))
		if err != nil || again != d {
			t.Fatalf("round trip of %s: %+v, %v; want %+v", d.String(), again, err, d)
		}
	})
}
