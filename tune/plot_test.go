package tune

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestPlainTicksLabelTheirValue(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{3.98, 4.18, "[4 4.08 4.16]"}, // gonum's own labels say [4 4.1 4.2]
		{0, 1, "[0 0.5 1]"},
		{-1e-17, 0.3, "[0 0.15 0.3]"},
	} {
		var labels []string
		for _, tk := range (plainTicks{}).Ticks(tc.lo, tc.hi) {
			if !tk.IsMinor() {
				if tk.Label != tickLabel(tk.Value) {
					t.Errorf("tick %v labelled %q", tk.Value, tk.Label)
				}
				labels = append(labels, tk.Label)
			}
		}
		if got := fmt.Sprint(labels); got != tc.want {
			t.Errorf("plainTicks(%v, %v) labels %s, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi float64
		want   string
	}{
		{"decades_labelled", 3, 4000, "[10 100 1000]"},
		{"under_two_decades_linear", 20, 40, "[20 30 40]"},
		{"one_decade_inside_linear", 512, 4096, "[1000 2000 3000 4000]"},
		{"nothing_at_or_below_zero", 0.001, 0.004, "[0.001 0.002 0.003 0.004]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var labels []string
			for _, tk := range (logTicks{}).Ticks(tc.lo, tc.hi) {
				if tk.Value <= 0 || tk.Value < tc.lo || tk.Value > tc.hi {
					t.Errorf("tick %v outside (0, %v..%v]", tk.Value, tc.lo, tc.hi)
				}
				if !tk.IsMinor() {
					labels = append(labels, tk.Label)
				}
			}
			if got := fmt.Sprint(labels); got != tc.want {
				t.Errorf("labels %s, want %s", got, tc.want)
			}
		})
	}
}

// svgText parses an SVG document and returns its root element's name, the number of drawn
// paths and its text content.
func svgText(t *testing.T, data []byte) (root string, paths int, text string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return root, paths, b.String()
		}
		if err != nil {
			t.Fatalf("svg: %v\n%s", err, data)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tk.Name.Local
			}
			if tk.Name.Local == "path" {
				paths++
			}
		case xml.CharData:
			b.Write(tk)
			b.WriteByte('\n')
		}
	}
}

// TestChartSVGReadable checks that a chart is a small, well-formed SVG whose title, labels and
// legend are text a reader (and grep) can find, escaped where XML needs it.
func TestChartSVGReadable(t *testing.T) {
	long := strings.Repeat("x", 60)
	c := plotChart{title: "a < b & c", xLabel: "eff_isl_threshold (tokens, log)", yLabel: "goodput (req/s)", logX: true,
		lines: []plotSeries{
			{name: "<isl_bounding R=0.7>", x: []float64{512, 1024, 4096}, y: []float64{3, 4, 3.5}},
			{name: long, x: []float64{512, 4096}, y: []float64{2, 2}, dashed: true},
			{name: "empty"},
		}}
	data, err := c.svg()
	if err != nil {
		t.Fatal(err)
	}
	root, paths, text := svgText(t, data)
	if root != "svg" || paths < 3 {
		t.Fatalf("root %q with %d paths", root, paths)
	}
	for _, want := range []string{"a < b & c", "eff_isl_threshold (tokens, log)", "goodput (req/s)", "<isl_bounding R=0.7>",
		long[:legendMaxChars-1] + "…", "1000"} {
		if !strings.Contains(text, want) {
			t.Errorf("svg text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, long) {
		t.Error("legend name not shortened")
	}
	if bytes.Contains(data, []byte("@font-face")) || len(data) > 64<<10 {
		t.Errorf("svg embeds fonts or is large: %d bytes", len(data))
	}
}

// TestChartEmpty draws a chart with no data, as a run whose requests all failed would.
func TestChartEmpty(t *testing.T) {
	for _, logX := range []bool{false, true} {
		c := plotChart{title: "empty", logX: logX, yMin: 0, yMax: 1, lines: []plotSeries{{name: "none"}}}
		data, err := c.svg()
		if err != nil {
			t.Fatal(err)
		}
		if root, _, _ := svgText(t, data); root != "svg" {
			t.Fatalf("logX=%v: root %q", logX, root)
		}
	}
}
