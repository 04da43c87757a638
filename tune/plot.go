package tune

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/condisagg/condisagg/internal/svgplot"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/condisagg/condisagg/policy"
)

// plotSeries is one line of a chart.
type plotSeries struct {
	name   string
	x, y   []float64
	dashed bool
}

// plotChart is a line chart with its legend to the right of the axes, so that up to a dozen
// long series names never cover the data.
type plotChart struct {
	title, xLabel, yLabel string
	logX                  bool
	yMin, yMax            float64 // fixed y range when yMax > yMin
	lines                 []plotSeries
}

// plotPalette tells a dozen lines apart on white; gonum's default palette is softer.
var plotPalette = [...]color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	{0x7f, 0x7f, 0x7f, 0xff}, {0xbc, 0xbd, 0x22, 0xff},
}

const (
	chartW, chartH   = 9 * vg.Inch, 4.5 * vg.Inch
	legendW          = 3.4 * vg.Inch
	chartMargin      = 8 // points
	legendMaxChars   = 42
	maxPointsPerLine = 400 // a CDF of 12k requests drawn with every point is a 1 MB file of no more detail
	markPointsUpTo   = 12  // sweep lines are short: their points are marked
	minPositiveOnLog = 1e-3
)

// svg renders c as a standalone SVG document; text stays text (fonts are not embedded).
func (c *plotChart) svg() ([]byte, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.title, c.xLabel, c.yLabel
	p.Title.TextStyle.Font = sans(13, xfont.WeightBold)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font, a.Tick.Label.Font, a.Tick.Marker = sans(11, xfont.WeightNormal), sans(10, xfont.WeightNormal), plainTicks{}
	}
	if c.logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font = sans(9, xfont.WeightNormal)
	for i, s := range c.lines {
		xys := c.points(s)
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("tune: plot %q, line %q: %w", c.title, s.name, err)
		}
		l.Color, l.Width = plotPalette[i%len(plotPalette)], vg.Points(1.4)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		p.Add(l)
		if len(xys) <= markPointsUpTo {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("tune: plot %q, line %q: %w", c.title, s.name, err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: l.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
			p.Add(sc)
		}
		legend.Add(shorten(s.name), l)
	}
	c.fixRanges(p)
	out, err := svgplot.Render(p, &legend, svgplot.Page{W: chartW, H: chartH, Margin: chartMargin, LegendW: legendW})
	if err != nil {
		return nil, fmt.Errorf("tune: plot %q: %w", c.title, err)
	}
	return out, nil
}

// points are s's points to draw: at most maxPointsPerLine (the last one always kept), and on a
// log axis none at x <= 0, which the scale cannot place.
func (c *plotChart) points(s plotSeries) plotter.XYs {
	step := max(1, len(s.x)/maxPointsPerLine)
	var xys plotter.XYs
	for k := 0; k < len(s.x); k++ {
		if k%step != 0 && k != len(s.x)-1 {
			continue
		}
		x := s.x[k]
		if c.logX {
			x = math.Max(x, minPositiveOnLog)
		}
		xys = append(xys, plotter.XY{X: x, Y: s.y[k]})
	}
	return xys
}

// fixRanges applies the fixed y range, and gives an empty or single-valued axis a range the
// scale can draw (gonum widens it by ±1, which a log axis cannot take below 0).
func (c *plotChart) fixRanges(p *plot.Plot) {
	if c.yMax > c.yMin {
		p.Y.Min, p.Y.Max = c.yMin, c.yMax
	}
	if math.IsInf(p.X.Min, 0) || math.IsInf(p.X.Max, 0) {
		p.X.Min, p.X.Max = 1, 10
		if !(c.yMax > c.yMin) {
			p.Y.Min, p.Y.Max = 0, 1
		}
	}
	if c.logX && p.X.Min == p.X.Max {
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
}

// sans is Liberation Sans, which gonum ships; its default serif face reads poorly at small
// sizes.
func sans(points float64, weight xfont.Weight) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Weight: weight, Size: vg.Points(points)}
}

// plainTicks are gonum's linear ticks labelled with their exact value: gonum's own labels may
// round ticks at 4.05 and 4.15 to "4" and "4.2".
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if !ticks[i].IsMinor() {
			ticks[i].Label = tickLabel(ticks[i].Value)
		}
	}
	return ticks
}

// tickLabel prints v without the float noise of a computed tick (3·0.1 is 0.30000000000000004).
func tickLabel(v float64) string {
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 10, 64), 64)
	if v == 0 {
		return "0" // never "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// logTicks labels the decades of a log axis; a range that holds fewer than two of them gets
// gonum's linear ticks instead, so a sweep over 512–4096 still has labelled values.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	labelled := 0
	for _, t := range ticks {
		if !t.IsMinor() && t.Value >= lo && t.Value <= hi {
			labelled++
		}
	}
	if labelled < 2 {
		ticks = plainTicks{}.Ticks(lo, hi)
	}
	// A tick outside the range would still be handed to the log scale, which panics at x <= 0.
	return slices.DeleteFunc(ticks, func(t plot.Tick) bool { return t.Value <= 0 || t.Value < lo || t.Value > hi })
}

// shorten keeps legend names inside the legend's strip.
func shorten(name string) string {
	if r := []rune(name); len(r) > legendMaxChars {
		return string(r[:legendMaxChars-1]) + "…"
	}
	return name
}

// plotCDF turns an ascending sample into CDF points.
func plotCDF(name string, sorted []float64) plotSeries {
	s := plotSeries{name: name}
	for i, v := range sorted {
		s.x = append(s.x, v)
		s.y = append(s.y, float64(i+1)/float64(len(sorted)))
	}
	return s
}

// WritePlots writes sweep.svg (when the report has a sweep), ttft_cdf.svg and tpot_cdf.svg into
// dir and returns their paths.
func WritePlots(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tune: plots: %w", err)
	}
	title := fmt.Sprintf("%s on %s", r.Workload, r.Cluster)
	charts := map[string]*plotChart{
		"ttft_cdf.svg": {title: "TTFT CDF — " + title, xLabel: "TTFT (ms, log)", yLabel: "share of requests", logX: true, yMin: 0, yMax: 1},
		"tpot_cdf.svg": {title: "TPOT CDF — " + title, xLabel: "TPOT (ms, log)", yLabel: "share of requests", logX: true, yMin: 0, yMax: 1},
	}
	for _, m := range r.Modes {
		charts["ttft_cdf.svg"].lines = append(charts["ttft_cdf.svg"].lines, plotCDF(m.Name, m.ttft))
		charts["tpot_cdf.svg"].lines = append(charts["tpot_cdf.svg"].lines, plotCDF(m.Name, m.tpot))
	}
	if len(r.Sweep) > 0 {
		charts["sweep.svg"] = sweepChart(title, r)
	}
	names := make([]string, 0, len(charts))
	for n := range charts {
		names = append(names, n)
	}
	slices.Sort(names)
	var paths []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		data, err := charts[n].svg()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("tune: plots: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// sweepChart plots goodput against eff_isl_threshold per ratio threshold, with the fixed modes
// as dashed horizontal lines.
func sweepChart(title string, r *Report) *plotChart {
	c := &plotChart{title: "Threshold sweep — " + title, xLabel: "eff_isl_threshold (tokens, log)", yLabel: "goodput (req/s)", logX: true}
	byRatio := map[string]*plotSeries{}
	var order []string
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, m := range r.Sweep {
		d := m.disagg
		key := string(d.Policy) + " R=" + strconv.FormatFloat(d.EffISLRatioThreshold, 'f', -1, 64)
		if d.Policy != policy.ISLBounding && d.PrefillBusyThreshold.Set {
			key += " θp=" + strconv.FormatFloat(d.PrefillBusyThreshold.Value, 'f', -1, 64)
		}
		s, ok := byRatio[key]
		if !ok {
			s = &plotSeries{name: key}
			byRatio[key] = s
			order = append(order, key)
		}
		x := math.Max(float64(d.EffISLThreshold), 1)
		s.x, s.y = append(s.x, x), append(s.y, m.Summary.Goodput)
		xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
	}
	for _, k := range order {
		s := byRatio[k]
		idx := make([]int, len(s.x))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return int(s.x[a] - s.x[b]) })
		xs, ys := make([]float64, len(idx)), make([]float64, len(idx))
		for i, j := range idx {
			xs[i], ys[i] = s.x[j], s.y[j]
		}
		c.lines = append(c.lines, plotSeries{name: s.name, x: xs, y: ys})
	}
	for _, m := range r.Modes {
		if strings.HasPrefix(m.Name, "sweep best") {
			continue
		}
		c.lines = append(c.lines, plotSeries{name: m.Name, x: []float64{xmin, xmax}, y: []float64{m.Summary.Goodput, m.Summary.Goodput}, dashed: true})
	}
	return c
}
