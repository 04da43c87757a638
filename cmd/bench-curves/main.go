// Command bench-curves draws the scale curves of BENCHMARKS.md (`make bench-curves`): decision
// latency and overlap lookup time against the fleet size (8 to 1,024 workers, 8k-token
// prompts) and against the prompt length (1k to 128k tokens, 64 workers), condisagg's lookup
// next to Dynamo's indexes on the same cases.
//
// It reads what the benchmarks wrote and measures nothing itself: -decisions is `go test
// -bench 'DecisionLatency|DecisionScale' ./extproc/` output, -lookups the JSON lines of
// `bench-peers -out` (each with its case). It writes four SVG files to -dir.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	decisions := flag.String("decisions", "", "go test -bench output of BenchmarkDecisionLatency and BenchmarkDecisionScale (extproc)")
	lookups := flag.String("lookups", "", "bench-peers -out JSON lines of the curve cases")
	dir := flag.String("dir", "bench/curves", "directory the SVG files are written to")
	flag.Parse()
	if err := run(*decisions, *lookups, *dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(decisionsFile, lookupsFile, dir string) error {
	if decisionsFile == "" || lookupsFile == "" {
		return errors.New("bench-curves: -decisions and -lookups are required (make bench-curves writes both)")
	}
	df, err := os.Open(decisionsFile)
	if err != nil {
		return fmt.Errorf("bench-curves: -decisions: %w", err)
	}
	defer df.Close()
	ds, err := parseDecisions(df)
	if err != nil {
		return err
	}
	lf, err := os.Open(lookupsFile)
	if err != nil {
		return fmt.Errorf("bench-curves: -lookups: %w", err)
	}
	defer lf.Close()
	ls, err := parseLookups(lf)
	if err != nil {
		return err
	}
	charts := curves(ds, ls)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench-curves: -dir: %w", err)
	}
	for _, c := range charts {
		svg, err := c.svg()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), svg, 0o644); err != nil {
			return fmt.Errorf("bench-curves: %w", err)
		}
	}
	return nil
}
