package tune

import (
	"fmt"
	"image/color"

	"github.com/condisagg/condisagg/internal/svgplot"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ratioGrid is the matrix as a gonum heat map: columns are (fleet, SLO), rows are workloads,
// the value is the slo policy's goodput over the best baseline's.
type ratioGrid struct {
	cols, rows []string
	z          [][]float64 // [row][col]
}

func (g ratioGrid) Dims() (c, r int)   { return len(g.cols), len(g.rows) }
func (g ratioGrid) Z(c, r int) float64 { return g.z[r][c] }
func (g ratioGrid) X(c int) float64    { return float64(c) }
func (g ratioGrid) Y(r int) float64    { return float64(r) }
func newRatioGrid(cells []Cell) ratioGrid {
	var g ratioGrid
	col, row := map[string]int{}, map[string]int{}
	for _, c := range cells {
		k := c.Fleet + " " + c.SLO
		if _, ok := col[k]; !ok {
			col[k] = len(g.cols)
			g.cols = append(g.cols, k)
		}
		if _, ok := row[c.Workload]; !ok {
			row[c.Workload] = len(g.rows)
			g.rows = append(g.rows, c.Workload)
		}
	}
	g.z = make([][]float64, len(g.rows))
	for i := range g.z {
		g.z[i] = make([]float64, len(g.cols))
	}
	for _, c := range cells {
		g.z[row[c.Workload]][col[c.Fleet+" "+c.SLO]] = c.Ratio
	}
	return g
}

// labelTicks names integer positions.
type labelTicks []string

func (l labelTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for i, s := range l {
		out = append(out, plot.Tick{Value: float64(i), Label: s})
	}
	return out
}

// MatrixHeatmapSVG draws the ratio of every cell (0 to 1.2; 0.98 is the target), with the
// value written in each cell.
func MatrixHeatmapSVG(cells []Cell) ([]byte, error) {
	if len(cells) == 0 {
		return nil, fmt.Errorf("tune: heat map of an empty matrix")
	}
	g := newRatioGrid(cells)
	p := plot.New()
	p.Title.Text = "slo policy goodput / best baseline (target >= 0.98)"
	p.Title.TextStyle.Font = sans(12, xfont.WeightBold)
	hm := plotter.NewHeatMap(g, palette.Heat(24, 1))
	hm.Min, hm.Max = 0, 1.2
	p.Add(hm)
	labels := plotter.XYLabels{}
	for r := range g.rows {
		for c := range g.cols {
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(c), Y: float64(r)})
			labels.Labels = append(labels.Labels, fmt.Sprintf("%.2f", g.z[r][c]))
		}
	}
	lp, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lp.TextStyle {
		lp.TextStyle[i].Font = sans(8, xfont.WeightNormal)
		lp.TextStyle[i].XAlign, lp.TextStyle[i].YAlign = draw.XCenter, draw.YCenter
		lp.TextStyle[i].Color = color.Black
	}
	p.Add(lp)
	p.X.Tick.Marker, p.Y.Tick.Marker = labelTicks(g.cols), labelTicks(g.rows)
	p.X.Tick.Label.Font, p.Y.Tick.Label.Font = sans(7, xfont.WeightNormal), sans(8, xfont.WeightNormal)
	p.X.Tick.Label.Rotation, p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = 0.6, draw.XRight, draw.YTop
	w, h := vg.Points(float64(max(420, 90+48*len(g.cols)))), vg.Points(float64(110+28*len(g.rows)))
	out, err := svgplot.Render(p, nil, svgplot.Page{W: w, H: h, Margin: chartMargin})
	if err != nil {
		return nil, fmt.Errorf("tune: heat map: %w", err)
	}
	return out, nil
}
