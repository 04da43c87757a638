package main

import (
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestOursMatchesGenerator runs condisagg's harness on small generated cases, in every engine
// hash mode, and checks its lookups against the generator's expectations (the same check the
// grid applies to every harness).
func TestOursMatchesGenerator(t *testing.T) {
	for _, hm := range []HashMode{HashDynamo, HashFleet, HashWorker} {
		for _, ov := range []int{0, 50, 95} {
			c := Case{Tokens: 2048, Workers: 5, OverlapPct: ov, Hashes: hm}
			t.Run(c.stem(), func(t *testing.T) {
				dir := t.TempDir()
				ex, err := generate(dir, c, 20000, 3)
				if err != nil {
					t.Fatal(err)
				}
				if ov > 0 && ex.Hits == 0 {
					t.Fatalf("expectation has no hits: %+v", ex)
				}
				res, err := measureOurs(caseFiles(dir, c), time.Millisecond, "", "")
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range check(ex, res) {
					t.Error(e)
				}
			})
		}
	}
}

func TestParseCase(t *testing.T) {
	c, err := parseCase("32k/w1024/o95", "fleet")
	if err != nil || c != (Case{Tokens: 32768, Workers: 1024, OverlapPct: 95, Hashes: HashFleet}) {
		t.Fatalf("parseCase = %+v, %v", c, err)
	}
	for _, bad := range []string{"8k/w0/o50", "8k/w8/o100", "8k-w8"} {
		if _, err := parseCase(bad, "dynamo"); err == nil {
			t.Errorf("parseCase(%q) accepted", bad)
		}
	}
	if _, err := parseCase("8k/w8/o50", "sha256"); err == nil {
		t.Error("unknown hash mode accepted")
	}
}

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m) }
