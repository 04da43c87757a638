package tune

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/workload"
)

// Thresholds is one recommended conditional-disaggregation setting.
type Thresholds struct {
	Rule                 string  `json:"rule"`
	Policy               string  `json:"policy,omitempty"`
	P                    float64 `json:"p,omitempty"`
	EffISLThreshold      int64   `json:"eff_isl_threshold"`
	EffISLRatioThreshold float64 `json:"eff_isl_ratio_threshold"`
	Goodput              float64 `json:"goodput,omitempty"`
}

// Recommendation holds the sweep's best thresholds and --role-advice's answer.
type Recommendation struct {
	Sweep *Thresholds `json:"sweep,omitempty"`
	Roles *RoleAdvice `json:"roles,omitempty"` // --role-advice
}

// Row is one routing mode's or sweep point's measured outcome.
type Row struct {
	Name          string           `json:"name"`
	Mode          string           `json:"mode"`
	Config        string           `json:"config,omitempty"` // --router-conditional-disagg-config
	GPUs          int              `json:"gpus"`
	Summary       workload.Summary `json:"summary"`
	GoodputPerGPU float64          `json:"goodput_per_gpu"`
	PrefillUtil   float64          `json:"prefill_util"`
	DecodeUtil    float64          `json:"decode_util"`
	Preemptions   uint64           `json:"preemptions"`
	// Shadow is the --shadow candidate's agreement with this mode's router (conditional modes).
	Shadow *route.ShadowStats `json:"shadow,omitempty"`
	// FollowUps are the session follow-up turns and OnPrevious those placed on the worker
	// that served their previous turn (cluster.SessionReport).
	FollowUps  int `json:"follow_ups,omitempty"`
	OnPrevious int `json:"on_previous,omitempty"`
	// Sessions counts the router's session outcomes (miss, hit, overridden_guard, ...) and
	// dropped bindings (expired, evicted) with --session-affinity.
	Sessions   map[string]uint64 `json:"sessions,omitempty"`
	disagg     *policy.Disagg    // the conditional policy, for the sweep plot
	ttft, tpot []float64         // ms, sorted, for the CDF plots
}

// Report is the outcome of a run: what `condisagg tune` prints and writes. Seed, Commit and
// Flags are there so that a reader can run it again and get the same rows.
type Report struct {
	Seed         uint64                 `json:"seed"`
	Commit       string                 `json:"commit"`        // see Commit; "unknown" when nothing answered
	CommitSource string                 `json:"commit_source"` // CommitFromBuild, CommitFromGit or CommitUnknown
	Flags        map[string]string      `json:"flags"`         // every flag with its effective value, as Options.Flags gave them
	Workload     string                 `json:"workload"`
	Requests     int                    `json:"requests"`
	SpanSeconds  float64                `json:"span_s"`
	Cluster      string                 `json:"cluster"`
	Model        string                 `json:"model"`
	ModelFile    string                 `json:"model_file,omitempty"` // the model file of --model; "" for a named calibration
	SLO          string                 `json:"slo"`
	EventDelayMS float64                `json:"event_delay_ms"`
	EffISL       workload.Dist[float64] `json:"eff_isl"`
	Ratio        workload.Dist[float64] `json:"eff_isl_ratio"`
	Recommend    Recommendation         `json:"recommend"`
	Modes        []Row                  `json:"modes"`
	Sweep        []Row                  `json:"sweep,omitempty"`
	Splits       []Row                  `json:"splits,omitempty"`  // --role-advice: each policy on each split of all GPUs
	Smaller      []Row                  `json:"smaller,omitempty"` // --role-advice: the slo policy on smaller fleets
	Plots        []string               `json:"plots,omitempty"`
	Buckets      map[string][]Bucket    `json:"isl_buckets,omitempty"`
}

// Bucket is one ISL bucket of one mode.
type Bucket struct {
	Bucket   string  `json:"bucket"`
	Requests int     `json:"requests"`
	TTFTP90  float64 `json:"ttft_p90_ms"`
	TPOTP99  float64 `json:"tpot_p99_ms"`
	Attain   float64 `json:"attainment"`
	Bypass   float64 `json:"bypass_rate"`
}

func newReport(r *run, probe *job, modes []*job) *Report {
	reqs := r.w.Requests
	rep := &Report{Seed: r.c.Seed, Commit: r.commit, CommitSource: r.commitSource, Flags: r.flags, Workload: r.w.Name, Requests: len(reqs), Cluster: r.p.shape, Model: r.p.base.Engine.Model.Name, ModelFile: modelFile(r.c.Model),
		SLO: r.p.slo.String(), EventDelayMS: toMS(r.p.base.EventDelay), Buckets: map[string][]Bucket{}}
	rep.SpanSeconds = (reqs[len(reqs)-1].Arrival - reqs[0].Arrival).Seconds()
	var effs, ratios []float64
	for _, d := range probe.rep.Decisions {
		if d.Previewed {
			effs = append(effs, float64(d.Eff))
			ratios = append(ratios, d.Ratio)
		}
	}
	slices.Sort(effs)
	slices.Sort(ratios)
	rep.EffISL, rep.Ratio = workload.NewDist(effs), workload.NewDist(ratios)
	for _, j := range modes {
		rep.Modes = append(rep.Modes, newRow(j))
		for _, b := range workload.SummarizeByISL(j.name, j.rep.Results, r.p.slo, r.p.ss, workload.ISLBuckets()) {
			rep.Buckets[j.name] = append(rep.Buckets[j.name], Bucket{Bucket: strings.TrimPrefix(b.Name, j.name+" "),
				Requests: b.Requests, TTFTP90: toMS(b.TTFT.P90), TPOTP99: toMS(b.TPOT.P99), Attain: b.Attainment, Bypass: b.BypassRate})
		}
	}
	return rep
}

// addSweep records the sweep and its best point as the last mode row.
func (rep *Report) addSweep(jobs []*job) {
	for _, j := range jobs {
		rep.Sweep = append(rep.Sweep, newRow(j))
	}
	b := best(jobs)
	br := newRow(b)
	br.Name = "sweep best: " + b.name
	rep.Modes = append(rep.Modes, br)
	rep.Recommend.Sweep = &Thresholds{Rule: "sweep", Policy: string(b.cfg.Disagg.Policy),
		EffISLThreshold: b.cfg.Disagg.EffISLThreshold, EffISLRatioThreshold: b.cfg.Disagg.EffISLRatioThreshold, Goodput: b.sum.Goodput}
}

func newRow(j *job) Row {
	gpus := j.cfg.Prefill + j.cfg.Decode
	m := Row{Name: j.name, Mode: string(j.cfg.Mode), GPUs: gpus, Summary: j.sum,
		GoodputPerGPU: j.sum.Goodput / float64(gpus), PrefillUtil: j.rep.PrefillUtil, DecodeUtil: j.rep.DecodeUtil,
		Preemptions: j.rep.Preemptions, Shadow: j.rep.Shadow,
		FollowUps: j.rep.Sessions.FollowUps, OnPrevious: j.rep.Sessions.OnPrevious, Sessions: sessionCounts(j.rep.Sessions.Stats)}
	if j.cfg.Mode == cluster.Conditional {
		d := j.cfg.Disagg
		m.Config, m.disagg = d.String(), &d
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

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteJSONFile writes the report as JSON to path.
func (rep *Report) WriteJSONFile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tune: write report: %w", err)
	}
	if err := rep.WriteJSON(fh); err != nil {
		fh.Close()
		return fmt.Errorf("tune: write report %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("tune: write report %s: %w", path, err)
	}
	return nil
}

// WriteText writes the report as tables for a terminal.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "workload %s: %d requests over %.0f s; cluster %s; model %s; SLO %s; event delay %s\n\n",
		rep.Workload, rep.Requests, rep.SpanSeconds, rep.Cluster, modelSource(rep.Model, rep.ModelFile), rep.SLO, fmtMS(rep.EventDelayMS))
	fmt.Fprintf(&b, "effective ISL on the previewed decode worker (always-remote probe, %d requests):\n", rep.EffISL.N)
	dt := workload.Table{Header: []string{"", "p10", "p25", "p50", "p75", "p90", "p99", "mean"}}
	e, q := rep.EffISL, rep.Ratio
	dt.Rows = append(dt.Rows,
		[]string{"eff ISL (tokens)", fmtF0(e.P10), fmtF0(e.P25), fmtF0(e.P50), fmtF0(e.P75), fmtF0(e.P90), fmtF0(e.P99), fmtF0(e.Mean)},
		[]string{"eff / ISL ratio", fmtF2(q.P10), fmtF2(q.P25), fmtF2(q.P50), fmtF2(q.P75), fmtF2(q.P90), fmtF2(q.P99), fmtF2(q.Mean)})
	if err := dt.Write(&b); err != nil {
		return err
	}
	if s := rep.Recommend.Sweep; s != nil {
		fmt.Fprintf(&b, "\nrecommended thresholds (the sweep's best goodput, %.3f/s, under %s): eff_isl_threshold=%d eff_isl_ratio_threshold=%s; "+
			"the slo policy needs none\n", s.Goodput, s.Policy, s.EffISLThreshold, strconv.FormatFloat(s.EffISLRatioThreshold, 'f', -1, 64))
	}
	b.WriteString("\nrouting modes:\n")
	if err := rowsTable(rep.Modes).Write(&b); err != nil {
		return err
	}
	writeShadow(&b, rep.Modes)
	writeSessions(&b, rep.Modes)
	if err := writeRoles(&b, rep); err != nil {
		return err
	}
	if len(rep.Sweep) > 0 {
		b.WriteString("\nthreshold sweep:\n")
		if err := rowsTable(rep.Sweep).Write(&b); err != nil {
			return err
		}
	}
	for _, p := range rep.Plots {
		fmt.Fprintf(&b, "plot: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeShadow adds the --shadow candidate's agreement with each conditional mode: what the
// candidate would have done on the same traffic, decision by decision.
func writeShadow(b *strings.Builder, rows []Row) {
	t := &workload.Table{Header: []string{"mode", "decisions", "same route", "same workers", "live→candidate routes", "forecast ttft live/cand", "headroom live/cand"}}
	cand := ""
	for i := range rows {
		st := rows[i].Shadow
		if st == nil || st.Decisions == 0 {
			continue
		}
		cand = st.Config
		n := float64(st.Decisions)
		var pairs []string
		for l, row := range st.ByRoute {
			for c, v := range row {
				if v > 0 {
					pairs = append(pairs, fmt.Sprintf("%s→%s %d", policy.Route(l), policy.Route(c), v))
				}
			}
		}
		fc, hr := "-", "-"
		if st.Forecasts > 0 {
			f := float64(st.Forecasts)
			fc = fmt.Sprintf("%.0f/%.0f ms", st.LiveTTFTmsSum/f, st.ShadowTTFTmsSum/f)
			hr = fmt.Sprintf("%.3f/%.3f", st.LiveHeadroomSum/f, st.ShadowHeadroomSum/f)
		}
		t.Rows = append(t.Rows, []string{rows[i].Name, strconv.FormatUint(st.Decisions, 10), fmtPct(float64(st.SameRoute) / n),
			fmtPct(float64(st.SameWorkers) / n), strings.Join(pairs, ", "), fc, hr})
	}
	if len(t.Rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nshadow candidate %s beside each conditional mode:\n", cand)
	_ = t.Write(b)
}

func rowsTable(rows []Row) *workload.Table {
	t := &workload.Table{Header: append(workload.SummaryHeader(), "gpus", "goodput/gpu", "p util", "d util")}
	for i := range rows {
		m := &rows[i]
		t.Rows = append(t.Rows, append(m.Summary.Cells(), strconv.Itoa(m.GPUs), fmt.Sprintf("%.3f", m.GoodputPerGPU),
			fmtPct(m.PrefillUtil), fmtPct(m.DecodeUtil)))
	}
	return t
}

func fmtF0(v float64) string  { return strconv.FormatFloat(v, 'f', 0, 64) }
func fmtF2(v float64) string  { return strconv.FormatFloat(v, 'f', 2, 64) }
func fmtPct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }
func fmtMS(v float64) string  { return strconv.FormatFloat(v, 'f', -1, 64) + "ms" }

// writeSessions prints, per mode, the share of session follow-ups placed on the worker that
// served their previous turn (only for workloads with follow-ups).
func writeSessions(b *strings.Builder, rows []Row) {
	if len(rows) == 0 || rows[0].FollowUps == 0 {
		return
	}
	b.WriteString("\nsession follow-ups on the previous turn's worker:\n")
	for _, r := range rows {
		if r.FollowUps > 0 {
			fmt.Fprintf(b, "  %-28s %d of %d (%.1f%%)", r.Name, r.OnPrevious, r.FollowUps, 100*float64(r.OnPrevious)/float64(r.FollowUps))
			for _, k := range slices.Sorted(maps.Keys(r.Sessions)) {
				fmt.Fprintf(b, " %s=%d", k, r.Sessions[k])
			}
			b.WriteString("\n")
		}
	}
}

// sessionCounts are the session table's non-zero counters by name (nil with affinity off).
func sessionCounts(st route.SessionStats) map[string]uint64 {
	m := map[string]uint64{}
	for _, a := range policy.Affinities() {
		if n := st.Outcomes[a]; n > 0 {
			m[a.String()] = n
		}
	}
	if st.Expired > 0 {
		m["expired"] = st.Expired
	}
	if st.Evicted > 0 {
		m["evicted"] = st.Evicted
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// modelFile is arg when it names a model file (cost.IsFile), "" for a named calibration.
func modelFile(arg string) string {
	if cost.IsFile(arg) {
		return arg
	}
	return ""
}

// modelSource names the cost model and where it came from, for the report's first line.
func modelSource(name, file string) string {
	if file != "" {
		return name + " (model file " + file + ")"
	}
	return name + " (named calibration)"
}
