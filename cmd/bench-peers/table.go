package main

import (
	"fmt"
	"io"
	"strings"
)

// printTables writes the ratio table (condisagg against each peer index, measured in the same
// run) and the absolute numbers behind it, as Markdown.
func printTables(w io.Writer, all []caseRuns, indexes []string) {
	if len(indexes) > 0 {
		fmt.Fprintln(w, "Ratios, condisagg against each Dynamo index (same files, same run). Ingest and lookup:")
		fmt.Fprintln(w, "speed ratio, their time / ours (> 1: condisagg faster). Memory per (block, worker) and")
		fmt.Fprintln(w, "peak RSS: ours / theirs (< 1: condisagg smaller). `!` marks a run that failed its check.")
		fmt.Fprintln(w)
		head := []string{"case", "pairs"}
		for _, what := range []string{"ingest", "lookup", "B/pair", "peak RSS"} {
			for _, ix := range indexes {
				head = append(head, what+" "+ix)
			}
		}
		row(w, head...)
		row(w, strings.Split(strings.Repeat("---,", len(head)-1)+"---", ",")...)
		for _, cr := range all {
			cells := []string{cr.c.Name(), fmt.Sprint(cr.expect.Pairs)}
			cells = append(cells, ratios(cr, func(o, p Result) float64 { return p.IngestCPUS / o.IngestCPUS })...)
			cells = append(cells, ratios(cr, func(o, p Result) float64 { return p.LookupNS / o.LookupNS })...)
			cells = append(cells, ratios(cr, func(o, p Result) float64 { return float64(o.IndexBytes) / float64(p.IndexBytes) })...)
			cells = append(cells, ratios(cr, func(o, p Result) float64 { return float64(o.PeakRSSKB) / float64(p.PeakRSSKB) })...)
			row(w, cells...)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Absolute numbers (ingest: recorded msgpack batches -> decode -> keys -> apply, per CPU-second")
	fmt.Fprintln(w, "of the whole process; lookup: one prompt's overlap with every worker, keys computed beforehand, CPU")
	fmt.Fprintln(w, "time of the process per lookup):")
	fmt.Fprintln(w)
	row(w, "case", "impl", "ingest M blocks/CPU-s", "ingest M blocks/s wall", "lookup µs", "lookup ns/block", "B/pair", "peak RSS MB", "check")
	row(w, "---", "---", "---", "---", "---", "---", "---", "---", "---")
	for _, cr := range all {
		for _, r := range append([]Result{cr.ours}, cr.peers...) {
			ok := "ok"
			if len(check(cr.expect, r)) > 0 {
				ok = "FAILED"
			}
			pairs := float64(r.Pairs)
			row(w, cr.c.Name(), r.Impl,
				fmt.Sprintf("%.2f", pairs/r.IngestCPUS/1e6),
				fmt.Sprintf("%.2f", pairs/r.IngestWallS/1e6),
				fmt.Sprintf("%.2f", r.LookupNS/1e3),
				fmt.Sprintf("%.2f", r.LookupNS*float64(r.Lookups)/float64(max(r.LookupBlocks, 1))),
				fmt.Sprintf("%.1f", float64(r.IndexBytes)/pairs),
				fmt.Sprintf("%.0f", float64(r.PeakRSSKB)/1024),
				ok)
		}
	}
}

// ratios formats f(ours, peer) for each peer run of cr.
func ratios(cr caseRuns, f func(ours, peer Result) float64) []string {
	out := make([]string, 0, len(cr.peers))
	for _, p := range cr.peers {
		s := ratio(f(cr.ours, p))
		if len(check(cr.expect, p)) > 0 || len(check(cr.expect, cr.ours)) > 0 {
			s += " !"
		}
		out = append(out, s)
	}
	return out
}

// ratio formats a ratio with two significant digits at least.
func ratio(r float64) string {
	switch {
	case r >= 0.095:
		return fmt.Sprintf("%.2fx", r)
	case r >= 0.0095:
		return fmt.Sprintf("%.3fx", r)
	}
	return fmt.Sprintf("%.4fx", r)
}

func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
}
