// Command benchtable turns `go test -bench` output into Markdown tables, one per package, with
// every reported metric (ns/op, B/op, allocs/op and domain units such as blocks/s or ns/key) as
// a column. scripts/bench.sh uses it to rewrite the generated section of BENCHMARKS.md.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

type row struct {
	name    string
	metrics map[string]string
}

type table struct {
	pkg   string
	units []string // column order: first seen
	rows  []row
}

func main() {
	tables, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	write(os.Stdout, tables)
}

// parse reads benchmark lines ("BenchmarkX-2  N  v1 unit1  v2 unit2 ...") grouped by the
// preceding "pkg:" line.
func parse(r io.Reader) ([]*table, error) {
	var tables []*table
	var cur *table
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if pkg, ok := strings.CutPrefix(line, "pkg: "); ok {
			cur = &table{pkg: strings.TrimSpace(pkg)}
			tables = append(tables, cur)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") || cur == nil {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		rw := row{name: name, metrics: map[string]string{}}
		for i := 2; i+1 < len(f); i += 2 {
			unit := f[i+1]
			if _, seen := rw.metrics[unit]; !seen && !contains(cur.units, unit) {
				cur.units = append(cur.units, unit)
			}
			rw.metrics[unit] = f[i]
		}
		cur.rows = append(cur.rows, rw)
	}
	return tables, sc.Err()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func write(w io.Writer, tables []*table) {
	for _, t := range tables {
		if len(t.rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "#### `%s`\n\n| benchmark | %s |\n|---|%s\n", t.pkg, strings.Join(t.units, " | "), strings.Repeat("---|", len(t.units)))
		for _, r := range t.rows {
			cells := make([]string, len(t.units))
			for i, u := range t.units {
				cells[i] = r.metrics[u]
			}
			fmt.Fprintf(w, "| %s | %s |\n", r.name, strings.Join(cells, " | "))
		}
		fmt.Fprintln(w)
	}
}
