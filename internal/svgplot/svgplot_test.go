package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TestRender: the page is well-formed SVG of the asked size, holding the plot's title and,
// with a legend, its entries; without one the plot takes the whole width.
func TestRender(t *testing.T) {
	p := plot.New()
	p.Title.Text = "decision p99"
	l, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 4}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(l)
	legend := plot.NewLegend()
	legend.Add("condisagg", l)
	for _, tc := range []struct {
		name   string
		legend *plot.Legend
		want   []string
	}{
		{"with_legend", &legend, []string{"decision p99", "condisagg"}},
		{"without", nil, []string{"decision p99"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Render(p, tc.legend, Page{W: 4 * vg.Inch, H: 2 * vg.Inch, Margin: 8, LegendW: vg.Inch})
			if err != nil {
				t.Fatal(err)
			}
			d := xml.NewDecoder(bytes.NewReader(out))
			for {
				if _, err := d.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("not well-formed SVG: %v", err)
				}
			}
			if !bytes.Contains(out, []byte(`width="288pt"`)) || !bytes.Contains(out, []byte(`height="144pt"`)) {
				t.Fatalf("page size not 4x2 in: %.200s", out)
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Fatalf("%q missing", w)
				}
			}
			if tc.legend == nil && bytes.Contains(out, []byte("condisagg")) {
				t.Fatal("a legend drawn without one")
			}
		})
	}
}
