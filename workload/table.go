package workload

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Table is a plain-text table with left-aligned first column and right-aligned others.
type Table struct {
	Header []string
	Rows   [][]string
}

// Write prints t with columns padded to their widest cell and two spaces between columns.
func (t *Table) Write(w io.Writer) error {
	widths := make([]int, len(t.Header))
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SummaryHeader is the header of the summary table; a caller with more columns (utilisation)
// appends its own after it, and Cells gives the matching row.
func SummaryHeader() []string {
	return []string{"mode", "reqs", "ok", "ttft p50", "ttft p90", "ttft p99", "tpot p50", "tpot p99",
		"gap p99", "e2e p50", "out tok/s", "prefix hit", "attain", "goodput/s", "bypass"}
}

// Cells is s as a row under SummaryHeader.
func (s *Summary) Cells() []string {
	return []string{s.Name, fmt.Sprint(s.Requests), fmt.Sprint(s.Completed),
		ms(s.TTFT.P50), ms(s.TTFT.P90), ms(s.TTFT.P99), ms(s.TPOT.P50), ms(s.TPOT.P99),
		ms(s.Gap.P99), ms(s.E2E.P50), fmt.Sprintf("%.1f", s.OutputTokPS), pct(s.PrefixHitRate),
		fmt.Sprintf("%.1f%%", 100*s.Attainment), fmt.Sprintf("%.3f", s.Goodput), pct(s.BypassRate)}
}

// WriteSummaries prints one row per summary.
func WriteSummaries(w io.Writer, sums []Summary) error {
	t := Table{Header: SummaryHeader()}
	for i := range sums {
		t.Rows = append(t.Rows, sums[i].Cells())
	}
	return t.Write(w)
}

// pct formats a share as a percentage ("-" when negative: unknown).
func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// ms formats d in milliseconds with one decimal ("-" for zero).
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
