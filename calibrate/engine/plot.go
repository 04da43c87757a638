package engine

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/condisagg/condisagg/internal/svgplot"
)

// Plot draws every sample's measured time against the fitted model's, on log axes, with the
// line where they agree: prefill TTFTs and decode step times as two series, disturbed samples
// (set aside by the fit) as crosses, and the KV transfers of a P/D pair as a third series.
func Plot(o *Outcome) ([]byte, error) {
	f := o.Fit
	if f == nil || len(f.Fitted) != len(o.Samples) {
		return nil, fmt.Errorf("calibrate: plot: no fit")
	}
	p := plot.New()
	p.Title.Text = "measured vs fitted (ms)"
	p.X.Label.Text, p.Y.Label.Text = "measured (ms)", "fitted (ms)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	out := map[int]bool{}
	for _, i := range f.Outliers {
		out[i] = true
	}
	lo, hi := math.Inf(1), 0.0
	series := map[string]plotter.XYs{}
	for i, s := range o.Samples {
		key := s.Kind.String()
		if out[i] {
			key = "disturbed"
		}
		series[key] = append(series[key], plotter.XY{X: s.MS, Y: f.Fitted[i]})
		lo, hi = min(lo, s.MS, f.Fitted[i]), max(hi, s.MS, f.Fitted[i])
	}
	if t := o.Transfer; t != nil && len(t.Fitted) == len(o.Transfers) {
		for i, s := range o.Transfers {
			series["transfer"] = append(series["transfer"], plotter.XY{X: s.MS, Y: t.Fitted[i]})
			lo, hi = min(lo, s.MS, t.Fitted[i]), max(hi, s.MS, t.Fitted[i])
		}
	}
	line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
	if err != nil {
		return nil, err
	}
	line.Color = color.Gray{Y: 150}
	p.Add(line)
	styles := []struct {
		key   string
		shape draw.GlyphDrawer
		c     color.Color
	}{
		{"prefill", draw.CircleGlyph{}, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"decode", draw.SquareGlyph{}, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
		{"mixed", draw.RingGlyph{}, color.RGBA{R: 148, G: 103, B: 189, A: 255}},
		{"transfer", draw.TriangleGlyph{}, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
		{"disturbed", draw.CrossGlyph{}, color.Gray{Y: 90}},
	}
	legend := plot.NewLegend()
	for _, st := range styles {
		pts := series[st.key]
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Shape, sc.GlyphStyle.Color, sc.GlyphStyle.Radius = st.shape, st.c, vg.Points(3)
		p.Add(sc)
		legend.Add(fmt.Sprintf("%s (%d)", st.key, len(pts)), sc)
	}
	return svgplot.Render(p, &legend, svgplot.Page{W: vg.Points(560), H: vg.Points(420), Margin: vg.Points(12), LegendW: vg.Points(110)})
}
