package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/workload"
)

// tuneThresholds is one recommended conditional-disaggregation setting.
type tuneThresholds struct {
	Rule                 string  `json:"rule"`
	Policy               string  `json:"policy,omitempty"`
	P                    float64 `json:"p,omitempty"`
	EffISLThreshold      int64   `json:"eff_isl_threshold"`
	EffISLRatioThreshold float64 `json:"eff_isl_ratio_threshold"`
	Goodput              float64 `json:"goodput,omitempty"`
}

type recommendation struct {
	Quantile tuneThresholds  `json:"p_quantile"`
	Sweep    *tuneThresholds `json:"sweep,omitempty"`
}

// modeRow is one routing mode's measured outcome.
type modeRow struct {
	Name          string           `json:"name"`
	Mode          string           `json:"mode"`
	Config        string           `json:"config,omitempty"` // --router-conditional-disagg-config
	GPUs          int              `json:"gpus"`
	Summary       workload.Summary `json:"summary"`
	GoodputPerGPU float64          `json:"goodput_per_gpu"`
	PrefillUtil   float64          `json:"prefill_util"`
	DecodeUtil    float64          `json:"decode_util"`
	Preemptions   uint64           `json:"preemptions"`
	ttft, tpot    []float64        // ms, sorted, for the CDF plots
}

// tuneReport is the output of `condisagg tune`.
type tuneReport struct {
	Workload     string                   `json:"workload"`
	Requests     int                      `json:"requests"`
	SpanSeconds  float64                  `json:"span_s"`
	Cluster      string                   `json:"cluster"`
	Model        string                   `json:"model"`
	SLO          string                   `json:"slo"`
	EventDelayMS float64                  `json:"event_delay_ms"`
	EffISL       workload.Dist[float64]   `json:"eff_isl"`
	Ratio        workload.Dist[float64]   `json:"eff_isl_ratio"`
	Recommend    recommendation           `json:"recommend"`
	Modes        []modeRow                `json:"modes"`
	Sweep        []modeRow                `json:"sweep,omitempty"`
	Plots        []string                 `json:"plots,omitempty"`
	Buckets      map[string][]bucketBrief `json:"isl_buckets,omitempty"`
	effSample    []float64
}

// bucketBrief is one ISL bucket of one mode.
type bucketBrief struct {
	Bucket   string  `json:"bucket"`
	Requests int     `json:"requests"`
	TTFTP90  float64 `json:"ttft_p90_ms"`
	TPOTP99  float64 `json:"tpot_p99_ms"`
	Attain   float64 `json:"attainment"`
	Bypass   float64 `json:"bypass_rate"`
}

func newTuneReport(s *tuneSetup, f *tuneFlags, probe *tuneJob, modes []*tuneJob) *tuneReport {
	r := &tuneReport{Workload: s.name, Requests: len(s.reqs), Cluster: s.shape, Model: s.base.Engine.Model.Name,
		SLO: s.slo.String(), EventDelayMS: toMS(s.base.EventDelay), Buckets: map[string][]bucketBrief{}}
	r.SpanSeconds = (s.reqs[len(s.reqs)-1].Arrival - s.reqs[0].Arrival).Seconds()
	var ratios []float64
	for _, d := range probe.rep.Decisions {
		if d.Previewed {
			r.effSample = append(r.effSample, float64(d.Eff))
			ratios = append(ratios, d.Ratio)
		}
	}
	slices.Sort(r.effSample)
	slices.Sort(ratios)
	r.EffISL, r.Ratio = workload.NewDist(r.effSample), workload.NewDist(ratios)
	r.Recommend.Quantile = tuneThresholds{Rule: "p-quantile", P: f.quantile,
		EffISLThreshold:      int64(math.Round(tuneQuantile(r.effSample, f.quantile))),
		EffISLRatioThreshold: policy.DefaultEffISLRatioThreshold}
	for _, j := range modes {
		r.Modes = append(r.Modes, tuneRow(j))
		for _, b := range workload.SummarizeByISL(j.name, j.rep.Results, s.slo, s.ss, workload.ISLBuckets()) {
			r.Buckets[j.name] = append(r.Buckets[j.name], bucketBrief{Bucket: strings.TrimPrefix(b.Name, j.name+" "),
				Requests: b.Requests, TTFTP90: toMS(b.TTFT.P90), TPOTP99: toMS(b.TPOT.P99), Attain: b.Attainment, Bypass: b.BypassRate})
		}
	}
	return r
}

// addSweep records the sweep and its best point as the last mode row.
func (r *tuneReport) addSweep(jobs []*tuneJob) {
	for _, j := range jobs {
		r.Sweep = append(r.Sweep, tuneRow(j))
	}
	b := tuneBest(jobs)
	br := tuneRow(b)
	br.Name = "sweep best: " + b.name
	r.Modes = append(r.Modes, br)
	r.Recommend.Sweep = &tuneThresholds{Rule: "sweep", Policy: string(b.cfg.Disagg.Policy),
		EffISLThreshold: b.cfg.Disagg.EffISLThreshold, EffISLRatioThreshold: b.cfg.Disagg.EffISLRatioThreshold, Goodput: b.sum.Goodput}
}

func tuneRow(j *tuneJob) modeRow {
	gpus := j.cfg.Prefill + j.cfg.Decode
	m := modeRow{Name: j.name, Mode: string(j.cfg.Mode), GPUs: gpus, Summary: j.sum,
		GoodputPerGPU: j.sum.Goodput / float64(gpus), PrefillUtil: j.rep.PrefillUtil, DecodeUtil: j.rep.DecodeUtil,
		Preemptions: j.rep.Preemptions}
	if j.cfg.Mode == cluster.Conditional {
		m.Config = j.cfg.Disagg.String()
	}
	for i := range j.rep.Results {
		res := &j.rep.Results[i]
		if !res.Completed() {
			continue
		}
		m.ttft = append(m.ttft, toMS(res.TTFT))
		if t, ok := res.TPOT(); ok {
			m.tpot = append(m.tpot, toMS(t))
		}
	}
	slices.Sort(m.ttft)
	slices.Sort(m.tpot)
	return m
}

func toMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tuneQuantile is the q-quantile of an ascending sample (0 when empty).
func tuneQuantile(sorted []float64, q float64) float64 { return workload.QuantileSorted(sorted, q) }

func (r *tuneReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *tuneReport) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "workload %s: %d requests over %.0f s; cluster %s; model %s; SLO %s; event delay %s\n\n",
		r.Workload, r.Requests, r.SpanSeconds, r.Cluster, r.Model, r.SLO, fmtMS(r.EventDelayMS))
	fmt.Fprintf(&b, "effective ISL on the previewed decode worker (always-remote probe, %d requests):\n", r.EffISL.N)
	dt := workload.Table{Header: []string{"", "p10", "p25", "p50", "p75", "p90", "p99", "mean"}}
	e, q := r.EffISL, r.Ratio
	dt.Rows = append(dt.Rows,
		[]string{"eff ISL (tokens)", fmtF0(e.P10), fmtF0(e.P25), fmtF0(e.P50), fmtF0(e.P75), fmtF0(e.P90), fmtF0(e.P99), fmtF0(e.Mean)},
		[]string{"eff / ISL ratio", fmtF2(q.P10), fmtF2(q.P25), fmtF2(q.P50), fmtF2(q.P75), fmtF2(q.P90), fmtF2(q.P99), fmtF2(q.Mean)})
	if err := writeTuneTable(&b, &dt); err != nil {
		return err
	}
	rq := r.Recommend.Quantile
	fmt.Fprintf(&b, "\nrecommended thresholds:\n  p-quantile rule (p=%.2f): eff_isl_threshold=%d eff_isl_ratio_threshold=%s\n",
		rq.P, rq.EffISLThreshold, strconv.FormatFloat(rq.EffISLRatioThreshold, 'f', -1, 64))
	if s := r.Recommend.Sweep; s != nil {
		fmt.Fprintf(&b, "  sweep (%s, best goodput %.3f/s): eff_isl_threshold=%d eff_isl_ratio_threshold=%s\n",
			s.Policy, s.Goodput, s.EffISLThreshold, strconv.FormatFloat(s.EffISLRatioThreshold, 'f', -1, 64))
	}
	b.WriteString("\nrouting modes:\n")
	if err := writeTuneTable(&b, rowsTable(r.Modes)); err != nil {
		return err
	}
	if len(r.Sweep) > 0 {
		b.WriteString("\nthreshold sweep:\n")
		if err := writeTuneTable(&b, rowsTable(r.Sweep)); err != nil {
			return err
		}
	}
	for _, p := range r.Plots {
		fmt.Fprintf(&b, "plot: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func rowsTable(rows []modeRow) *workload.Table {
	t := &workload.Table{Header: append(workload.SummaryHeader(), "gpus", "goodput/gpu", "p util", "d util")}
	for i := range rows {
		m := &rows[i]
		t.Rows = append(t.Rows, append(m.Summary.Cells(), strconv.Itoa(m.GPUs), fmt.Sprintf("%.3f", m.GoodputPerGPU),
			fmtPct(m.PrefillUtil), fmtPct(m.DecodeUtil)))
	}
	return t
}

func writeTuneTable(b *strings.Builder, t *workload.Table) error { return t.Write(b) }

func fmtF0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func fmtF2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func fmtPct(v float64) string {
	return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
}
func fmtMS(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "ms" }

// progressBar draws one line on stderr: done of total simulated requests over all runs.
type progressBar struct {
	mu          sync.Mutex // guards everything below
	w           io.Writer
	on, drawn   bool
	total, done int
	lastPermil  int
	start       time.Time
}

func newProgressBar(w io.Writer, on bool) *progressBar {
	return &progressBar{w: w, on: on, start: time.Now(), lastPermil: -1}
}

func (p *progressBar) add(n int) {
	p.mu.Lock()
	p.total += n
	p.mu.Unlock()
}

func (p *progressBar) advance(label string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if !p.on || p.total == 0 {
		return
	}
	permil := p.done * 1000 / p.total
	if permil == p.lastPermil {
		return
	}
	p.lastPermil = permil
	const width = 30
	fill := permil * width / 1000
	fmt.Fprintf(p.w, "\rtune [%s%s] %5.1f%%  %6.0fs  %-40.40s", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		float64(permil)/10, time.Since(p.start).Seconds(), label)
	p.drawn = true
}

func (p *progressBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
