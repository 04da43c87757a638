package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"github.com/condisagg/condisagg/internal/svgplot"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The two axes of the curves: fleet size at a fixed prompt length, prompt length at a fixed fleet.
const (
	axisTokens  = 8192 // tokens per prompt along the workers axis
	axisWorkers = 64   // workers along the tokens axis
	lookupOv    = 50   // the lookup cases' shared-prefix percent (bench-peers -overlap)
)

type series struct {
	name   string
	x, y   []float64
	dashed bool
}

// chart is a log-log line chart written to file.
type chart struct {
	file, title, xLabel, yLabel string
	lines                       []series
}

var palette = [...]color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

// curves builds the four charts: decision latency and lookup time, each against workers and
// against prompt tokens.
func curves(ds []decision, ls []lookup) []chart {
	onWorkers := func(w, t int) bool { return t == axisTokens }
	onTokens := func(w, t int) bool { return w == axisWorkers }
	decisionLines := func(on func(w, t int) bool, x func(d decision) int) []series {
		var out []series
		for _, v := range []struct {
			warm bool
			name string
		}{{false, "unique prompt"}, {true, "next turn, warm cache"}} {
			p50 := series{name: "p50, " + v.name, dashed: true}
			p99 := series{name: "p99, " + v.name}
			pts := slices.DeleteFunc(slices.Clone(ds), func(d decision) bool { return d.warm != v.warm || !on(d.workers, d.tokens) })
			slices.SortFunc(pts, func(a, b decision) int { return x(a) - x(b) })
			for _, d := range pts {
				p99.x, p99.y = append(p99.x, float64(x(d))), append(p99.y, d.p99)
				p50.x, p50.y = append(p50.x, float64(x(d))), append(p50.y, d.p50)
			}
			out = append(out, p99, p50)
		}
		return out
	}
	lookupLines := func(on func(w, t int) bool, x func(l lookup) int) []series {
		var impls []string
		for _, l := range ls {
			if !slices.Contains(impls, l.impl) {
				impls = append(impls, l.impl)
			}
		}
		var out []series
		for _, impl := range impls {
			s := series{name: impl, dashed: impl != "condisagg"}
			pts := slices.DeleteFunc(slices.Clone(ls), func(l lookup) bool {
				return l.impl != impl || l.overlap != lookupOv || !on(l.workers, l.tokens)
			})
			slices.SortFunc(pts, func(a, b lookup) int { return x(a) - x(b) })
			for _, l := range pts {
				s.x, s.y = append(s.x, float64(x(l))), append(s.y, l.ns/1e3)
			}
			out = append(out, s)
		}
		return out
	}
	dw := func(d decision) int { return d.workers }
	dt := func(d decision) int { return d.tokens }
	lw := func(l lookup) int { return l.workers }
	lt := func(l lookup) int { return l.tokens }
	return []chart{
		{file: "decision-workers.svg", title: "Decision latency through gRPC against fleet size (8k-token chat)",
			xLabel: "workers (half prefill, half decode; log)", yLabel: "ms (log)", lines: decisionLines(onWorkers, dw)},
		{file: "decision-tokens.svg", title: "Decision latency through gRPC against prompt length (64 workers)",
			xLabel: "prompt tokens (log)", yLabel: "ms (log)", lines: decisionLines(onTokens, dt)},
		{file: "lookup-workers.svg", title: "Overlap lookup against fleet size (8k tokens, 50 % shared prefix)",
			xLabel: "workers (log)", yLabel: "CPU µs per lookup (log)", lines: lookupLines(onWorkers, lw)},
		{file: "lookup-tokens.svg", title: "Overlap lookup against prompt length (64 workers, 50 % shared prefix)",
			xLabel: "prompt tokens (log)", yLabel: "CPU µs per lookup (log)", lines: lookupLines(onTokens, lt)},
	}
}

const (
	chartW, chartH = 8 * vg.Inch, 4 * vg.Inch
	legendW        = 2.4 * vg.Inch
	margin         = 8 // points
)

// svg renders c; text stays text (fonts are not embedded).
func (c *chart) svg() ([]byte, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.title, c.xLabel, c.yLabel
	p.Title.TextStyle.Font = sans(12, xfont.WeightBold)
	p.Title.Padding = vg.Points(8)
	var xs []float64
	for _, s := range c.lines {
		for _, x := range s.x {
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("bench-curves: %s: no points (did the benchmarks run the curve cases?)", c.file)
	}
	slices.Sort(xs)
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, valueTicks(xs)
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, ticks125{}
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font, a.Tick.Label.Font = sans(10, xfont.WeightNormal), sans(9, xfont.WeightNormal)
	}
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font = sans(9, xfont.WeightNormal)
	for i, s := range c.lines {
		if len(s.x) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.x))
		for k := range s.x {
			xys[k] = plotter.XY{X: s.x[k], Y: s.y[k]}
		}
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("bench-curves: %s, line %q: %w", c.file, s.name, err)
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.4)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: l.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
		p.Add(l, sc)
		legend.Add(s.name, l)
	}
	p.X.Min, p.X.Max = xs[0]/1.3, xs[len(xs)-1]*1.3
	out, err := svgplot.Render(p, &legend, svgplot.Page{W: chartW, H: chartH, Margin: margin, LegendW: legendW})
	if err != nil {
		return nil, fmt.Errorf("bench-curves: %s: %w", c.file, err)
	}
	return out, nil
}

func sans(points float64, weight xfont.Weight) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Weight: weight, Size: vg.Points(points)}
}

// valueTicks labels exactly the measured x values (8, 64, 256, 1024; 1k … 128k).
func valueTicks(xs []float64) plot.ConstantTicks {
	tokens := xs[0] >= 1024 // a tokens axis starts at 1k; a workers axis at a few workers
	ticks := make(plot.ConstantTicks, len(xs))
	for i, x := range xs {
		label := strconv.FormatFloat(x, 'f', -1, 64)
		if tokens {
			label = strconv.FormatFloat(x/1024, 'f', -1, 64) + "k"
		}
		ticks[i] = plot.Tick{Value: x, Label: label}
	}
	return ticks
}

// ticks125 labels 1, 2 and 5 times each power of ten inside the range: gonum's log ticks label
// only the decades, and a curve spanning less than one has a single label.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ticks
}
