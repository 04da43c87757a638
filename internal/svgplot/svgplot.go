// Package svgplot renders a gonum plot, with an optional legend in a column on its right, as
// one SVG page: the page layout the tune reports, the matrix heat map and the benchmark curves
// share.
package svgplot

import (
	"bytes"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Page is the size of the SVG and where the plot sits on it.
type Page struct {
	W, H vg.Length
	// Margin keeps the plot's title and axis labels inside the viewBox of every SVG renderer
	// (gonum draws to the canvas edge).
	Margin vg.Length
	// LegendW is the width of the legend column on the right (0 with no legend).
	LegendW vg.Length
}

// Render draws p (and legend, when not nil, in the right-hand column) on one white page and
// returns the SVG. The white page lies under both, so the legend's black text never sits on a
// dark viewer's own background.
func Render(p *plot.Plot, legend *plot.Legend, pg Page) ([]byte, error) {
	canvas := vgsvg.New(pg.W, pg.H)
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	p.BackgroundColor = nil
	right := -pg.Margin
	if legend != nil {
		right = -pg.LegendW
	}
	p.Draw(draw.Crop(dc, pg.Margin, right, pg.Margin, -pg.Margin))
	if legend != nil {
		legend.XOffs, legend.Padding = vg.Points(8), vg.Points(3)
		legend.Draw(draw.Crop(dc, pg.W-pg.LegendW, 0, 0, -vg.Points(36)))
	}
	var b bytes.Buffer
	if _, err := canvas.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
