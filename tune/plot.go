package tune

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/condisagg/condisagg/policy"
)

// plotSeries is one line of a chart.
type plotSeries struct {
	name   string
	x, y   []float64
	dashed bool
}

// plotChart is a line chart written as a self-contained SVG.
type plotChart struct {
	title, xLabel, yLabel string
	logX                  bool
	zeroY                 bool    // start the y axis at 0
	yMin, yMax            float64 // fixed y range when yMax > yMin
	lines                 []plotSeries
}

var plotPalette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	svgW, svgH                   = 880, 440
	padL, padR, padT, padB       = 70, 300, 40, 50
	plotW, plotH                 = svgW - padL - padR, svgH - padT - padB
	maxPointsPerLine             = 400
	legendLineH                  = 16
	legendMaxChars               = 42
	tickCount                    = 5
	minPositiveForLogAxis        = 1e-3
	svgHeader                    = `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">` + "\n"
	svgBackground                = `<rect width="100%" height="100%" fill="white"/>` + "\n"
	svgAxisColor, svgGridColor   = "#333", "#ddd"
	svgLineWidth, svgDashPattern = "1.8", "6,4"
)

// svg renders c.
func (c *plotChart) svg() string {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.lines {
		for i := range s.x {
			x := s.x[i]
			if c.logX {
				x = math.Max(x, minPositiveForLogAxis)
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, s.y[i]), math.Max(ymax, s.y[i])
		}
	}
	if c.yMax > c.yMin {
		ymin, ymax = c.yMin, c.yMax
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if c.zeroY && ymin > 0 && c.yMax <= c.yMin {
		ymin = 0
	}
	if !c.zeroY && c.yMax <= c.yMin && ymax > ymin {
		pad := (ymax - ymin) * 0.08
		ymin, ymax = ymin-pad, ymax+pad
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	fx := func(x float64) float64 {
		if c.logX {
			x = math.Max(x, minPositiveForLogAxis)
			return padL + plotW*(math.Log10(x)-math.Log10(xmin))/(math.Log10(xmax)-math.Log10(xmin))
		}
		return padL + plotW*(x-xmin)/(xmax-xmin)
	}
	fy := func(y float64) float64 { return padT + plotH*(1-(y-ymin)/(ymax-ymin)) }
	var b strings.Builder
	fmt.Fprintf(&b, svgHeader, svgW, svgH, svgW, svgH)
	b.WriteString(svgBackground)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(c.title))
	for _, t := range plotTicks(xmin, xmax, c.logX) {
		x := fx(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, padT, x, padT+plotH, svgGridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+16, tickLabel(t))
	}
	for _, t := range plotTicks(ymin, ymax, false) {
		y := fy(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y, padL+plotW, y, svgGridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, tickLabel(t))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, svgAxisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-12, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n", padT+plotH/2, padT+plotH/2, html.EscapeString(c.yLabel))
	for i, s := range c.lines {
		color := plotPalette[i%len(plotPalette)]
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="` + svgDashPattern + `"`
		}
		var pts []string
		step := max(1, len(s.x)/maxPointsPerLine)
		for k := 0; k < len(s.x); k += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.x[k]), fy(s.y[k])))
		}
		if n := len(s.x); n > 0 && (n-1)%step != 0 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.x[n-1]), fy(s.y[n-1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>`+"\n", color, svgLineWidth, dash, strings.Join(pts, " "))
		if len(s.x) <= 12 {
			for k := range s.x {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", fx(s.x[k]), fy(s.y[k]), color)
			}
		}
		ly := padT + 10 + i*legendLineH
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+12, ly, padL+plotW+36, ly, color, dash)
		name := s.name
		if len(name) > legendMaxChars {
			name = name[:legendMaxChars-1] + "…"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", padL+plotW+42, ly+4, html.EscapeString(name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// plotTicks returns about tickCount round values in [lo, hi] (decades on a log axis).
func plotTicks(lo, hi float64, log bool) []float64 {
	var out []float64
	if log {
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			if v := math.Pow(10, e); v >= lo*0.999 && v <= hi*1.001 {
				out = append(out, v)
			}
		}
		if len(out) >= 2 {
			return out
		}
		out = out[:0]
	}
	raw := (hi - lo) / tickCount
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	for k := math.Ceil(lo / step); k*step <= hi+step*1e-9; k++ {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(k*step, 'g', 12, 64), 64) // 3·0.2 is 0.6
		if v == 0 {
			v = 0 // not -0
		}
		out = append(out, v)
	}
	return out
}

func tickLabel(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0" // never "-0"
	}
	switch a := math.Abs(v); {
	case a >= 10000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	case a >= 1 || a == 0:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
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
		if err := os.WriteFile(p, []byte(charts[n].svg()), 0o644); err != nil {
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
