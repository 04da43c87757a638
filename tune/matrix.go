package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/internal/flaglist"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/workload"
)

// The evaluation matrix: workloads × fleets × SLOs, with the baselines an operator could run
// on the same GPUs and the untuned slo policy with its controller. Every simulation but the
// slo policy's is shared by the three SLOs (goodput is re-scored per SLO from the same
// results); the slo policy runs once per SLO, since the objective steers it.

// MatrixConfig is `condisagg matrix`.
type MatrixConfig struct {
	Workloads []MatrixWorkload
	Fleets    []string       // "4P4D", ...
	SLOs      []workload.SLO // objectives, each scored on every run
	Model     string
	Seed      uint64
	Parallel  int
	// SLOMargin is the slo policy's slo_margin in its runs (nil: policy.DefaultSLOMargin);
	// SLOFeedback runs it with slo_feedback true (the default is false, as the policy's).
	SLOMargin   *float64
	SLOFeedback bool
	// SLOHandoff runs the slo policy with slo_handoff true (the handoff placement).
	SLOHandoff bool
	// NoSLOFleet runs the slo policy without slo_fleet (its steady-state forecast), which is
	// on by default as in the policy.
	NoSLOFleet bool
	// Baselines are the cells of an earlier run of the same matrix (ReadMatrixBaselines): only
	// the slo policy is simulated, and every baseline column is taken from them. nil: simulate
	// every baseline.
	Baselines map[CellKey]Cell
}

// CellKey names a cell of the matrix.
type CellKey struct{ Workload, Fleet, SLO string }

// MatrixWorkload is one workload of the matrix: a name and how tune.Load reads it.
type MatrixWorkload struct {
	Name string
	Load Config // Trace or Synthetic, Duration, Requests, RateScale, Seed
}

// Cell is one (workload, fleet, SLO) of the matrix: goodput (req/s) of every baseline, the
// best of them, the slo policy and their ratio.
type Cell struct {
	Workload, Fleet, SLO string
	Aggregated           float64 `json:"aggregated_all_gpus"`
	AggregatedDecode     float64 `json:"aggregated_decode_pool"`
	Disaggregated        float64 `json:"disaggregated"`
	StaticBest           float64 `json:"static_best"`
	StaticBestName       string  `json:"static_best_name"`
	Best                 float64 `json:"best_baseline"`
	BestName             string  `json:"best_baseline_name"`
	SLOPolicy            float64 `json:"slo_policy"`
	Ratio                float64 `json:"ratio"` // slo policy / best baseline (1 when both are 0)
	BeatsDisagg          bool    `json:"beats_disaggregated"`
	PrefillUtilDisagg    float64 `json:"prefill_util_disaggregated"` // > 0.9: prefill saturates
	// SLOHandoffs counts the slo policy's requests on the handoff route (slo_handoff).
	SLOHandoffs int `json:"slo_handoffs,omitempty"`
}

// staticGrid is the hindsight sweep of Dynamo's policies: the thresholds an operator could set
// by hand, each simulated once, the best picked per SLO after the fact.
func staticGrid() []policy.Disagg {
	var out []policy.Disagg
	add := func(k policy.Kind, eff int64, ratio, busy float64) {
		d := policy.DefaultDisagg()
		d.Policy, d.EffISLThreshold, d.EffISLRatioThreshold = k, eff, ratio
		d.PrefillBusyThreshold = policy.Set(busy)
		out = append(out, d)
	}
	for _, t := range []int64{512, 2048, 8192} {
		add(policy.ISLBounding, t, 0.7, cluster.DefaultPrefillBusyThreshold)
	}
	add(policy.ISLBounding, 2048, 1.0, cluster.DefaultPrefillBusyThreshold)
	for _, b := range []float64{1, 4} {
		add(policy.ISLOrLoad, 2048, 0.7, b)
	}
	add(policy.PrefillLoad, 2048, 0.7, cluster.DefaultPrefillBusyThreshold)
	return out
}

// matrixJob is one simulation of the matrix.
type matrixJob struct {
	name     string
	cfg      cluster.Config
	sloIdx   int // the slo policy's objective index; -1 for the shared runs
	results  []workload.Result
	putil    float64
	handoffs int // requests the run placed on the handoff route
}

// RunMatrix simulates every workload on every fleet and scores every SLO. progress, if set,
// is told each finished simulation.
func RunMatrix(ctx context.Context, mc MatrixConfig, progress func(done, total int, name string)) ([]Cell, error) {
	if len(mc.Workloads) == 0 || len(mc.Fleets) == 0 || len(mc.SLOs) == 0 {
		return nil, errors.New("matrix: workloads, fleets and SLOs are all required")
	}
	var cells []Cell
	shared := 3 + len(staticGrid())
	if mc.Baselines != nil {
		shared = 0
	}
	total := len(mc.Workloads) * len(mc.Fleets) * (shared + len(mc.SLOs))
	done := 0
	for _, mw := range mc.Workloads {
		lc := mw.Load
		lc.Seed = mc.Seed
		w, err := Load(&lc)
		if err != nil {
			return nil, fmt.Errorf("matrix: workload %s: %w", mw.Name, err)
		}
		for _, fleet := range mc.Fleets {
			c := DefaultConfig()
			c.Cluster, c.Model, c.Seed, c.Parallel, c.SLO = fleet, mc.Model, mc.Seed, mc.Parallel, mc.SLOs[0].String()
			c.Trace, c.Synthetic = lc.Trace, lc.Synthetic // resolve checks the source; Load read it above
			p, err := c.resolve()
			if err != nil {
				return nil, fmt.Errorf("matrix: fleet %s: %w", fleet, err)
			}
			jobs := matrixJobs(p, mc)
			if err := runMatrixJobs(ctx, mc.Parallel, w.Requests, jobs, func(name string) {
				done++
				if progress != nil {
					progress(done, total, mw.Name+" "+fleet+" "+name)
				}
			}); err != nil {
				return nil, err
			}
			scored := scoreCells(mw.Name, fleet, mc.SLOs, jobs)
			if mc.Baselines != nil {
				if scored, err = withBaselines(scored, mc.Baselines); err != nil {
					return nil, err
				}
			}
			cells = append(cells, scored...)
		}
	}
	return cells, nil
}

func matrixJobs(p *plan, mc MatrixConfig) []*matrixJob {
	var jobs []*matrixJob
	if mc.Baselines == nil {
		jobs = baselineJobs(p)
	}
	for i, s := range mc.SLOs {
		c := p.base
		c.Mode, c.Disagg = cluster.Conditional, policy.DefaultDisagg()
		c.Disagg.Policy = policy.SLOKind
		if mc.SLOMargin != nil {
			c.Disagg.SLOMargin = *mc.SLOMargin
		}
		c.Disagg.SLOFeedback = mc.SLOFeedback
		c.Disagg.SLOHandoff = mc.SLOHandoff
		c.Disagg.SLOFleet = !mc.NoSLOFleet
		c.Disagg.Cost, c.Disagg.CostModel = c.Engine.Model, c.Engine.Model.Name
		c.Disagg.SLO = policy.SLO{TTFT: s.TTFT, TPOT: s.TPOT}
		jobs = append(jobs, &matrixJob{name: "slo " + s.String(), cfg: c, sloIdx: i})
	}
	return jobs
}

// baselineJobs are the runs every objective shares: aggregated on all GPUs and on the decode
// pool, always disaggregated, and the static grid.
func baselineJobs(p *plan) []*matrixJob {
	agg := p.base
	agg.Mode, agg.Prefill, agg.Decode = cluster.Aggregated, 0, p.base.Prefill+p.base.Decode
	aggD := p.base
	aggD.Mode, aggD.Prefill = cluster.Aggregated, 0
	dis := p.base
	dis.Mode = cluster.Disaggregated
	jobs := []*matrixJob{{name: "aggregated", cfg: agg, sloIdx: -1}, {name: "aggregated_decode", cfg: aggD, sloIdx: -1},
		{name: "disaggregated", cfg: dis, sloIdx: -1}}
	for _, d := range staticGrid() {
		c := p.base
		c.Mode, c.Disagg = cluster.Conditional, d
		jobs = append(jobs, &matrixJob{name: staticName(d), cfg: c, sloIdx: -1})
	}
	return jobs
}

// withBaselines fills the baseline columns of cells scored without them from the stored
// cells, and scores the slo policy against them.
func withBaselines(cells []Cell, stored map[CellKey]Cell) ([]Cell, error) {
	for i, c := range cells {
		b, ok := stored[CellKey{c.Workload, c.Fleet, c.SLO}]
		if !ok {
			return nil, fmt.Errorf("matrix: --baselines: no cell %s %s %s in the stored run", c.Workload, c.Fleet, c.SLO)
		}
		b.SLOPolicy, b.Ratio = c.SLOPolicy, 1
		if b.Best > 0 {
			b.Ratio = b.SLOPolicy / b.Best
		}
		b.BeatsDisagg = b.SLOPolicy > b.Disaggregated
		cells[i] = b
	}
	return cells, nil
}

func staticName(d policy.Disagg) string {
	s := fmt.Sprintf("%s T=%d R=%s", d.Policy, d.EffISLThreshold, strconv.FormatFloat(d.EffISLRatioThreshold, 'f', -1, 64))
	if d.Policy != policy.ISLBounding {
		s += " θp=" + strconv.FormatFloat(d.PrefillBusyThreshold.Value, 'f', -1, 64)
	}
	return s
}

// runMatrixJobs simulates jobs, parallel at a time, keeping each run's results.
func runMatrixJobs(ctx context.Context, parallel int, reqs []workload.Request, jobs []*matrixJob, finished func(string)) error {
	var mu sync.Mutex // guards finished
	return inParallel(len(jobs), parallel, func(i int) error {
		j := jobs[i]
		rep, err := cluster.Run(ctx, j.cfg, reqs, cluster.Options{})
		if err != nil {
			return fmt.Errorf("matrix: simulate %s: %w", j.name, err)
		}
		j.results, j.putil, j.handoffs = rep.Results, rep.PrefillUtil, rep.Handoffs
		mu.Lock()
		finished(j.name)
		mu.Unlock()
		return nil
	})
}

// scoreCells scores every SLO of one (workload, fleet).
func scoreCells(wl, fleet string, slos []workload.SLO, jobs []*matrixJob) []Cell {
	var cells []Cell
	for i, s := range slos {
		c := Cell{Workload: wl, Fleet: fleet, SLO: s.String()}
		gp := func(j *matrixJob) float64 {
			return workload.Summarize(j.name, j.results, s, workload.SteadyState{}).Goodput
		}
		for _, j := range jobs {
			switch {
			case j.sloIdx == i:
				c.SLOPolicy, c.SLOHandoffs = gp(j), j.handoffs
			case j.sloIdx >= 0:
			case j.name == "aggregated":
				c.Aggregated = gp(j)
			case j.name == "aggregated_decode":
				c.AggregatedDecode = gp(j)
			case j.name == "disaggregated":
				c.Disaggregated, c.PrefillUtilDisagg = gp(j), j.putil
			default:
				if g := gp(j); g > c.StaticBest || c.StaticBestName == "" {
					c.StaticBest, c.StaticBestName = g, j.name
				}
			}
		}
		c.Best, c.BestName = c.Aggregated, "aggregated (all GPUs)"
		for _, b := range []struct {
			v    float64
			name string
		}{{c.AggregatedDecode, "aggregated (decode pool)"}, {c.Disaggregated, "disaggregated"}, {c.StaticBest, "static: " + c.StaticBestName}} {
			if b.v > c.Best {
				c.Best, c.BestName = b.v, b.name
			}
		}
		c.Ratio = 1
		if c.Best > 0 {
			c.Ratio = c.SLOPolicy / c.Best
		}
		c.BeatsDisagg = c.SLOPolicy > c.Disaggregated
		cells = append(cells, c)
	}
	return cells
}

// WriteMatrixText prints the cells as one table, rows in matrix order.
func WriteMatrixText(w io.Writer, cells []Cell) error {
	t := &workload.Table{Header: []string{"workload", "fleet", "slo", "agg (all)", "agg (decode)", "disagg", "static best", "best baseline",
		"slo policy", "ratio", "vs disagg", "p util (disagg)"}}
	below := 0
	for _, c := range cells {
		vs := "beats"
		if !c.BeatsDisagg {
			vs = "no"
		}
		t.Rows = append(t.Rows, []string{c.Workload, c.Fleet, c.SLO, f3(c.Aggregated), f3(c.AggregatedDecode), f3(c.Disaggregated),
			f3(c.StaticBest), c.BestName, f3(c.SLOPolicy), fmt.Sprintf("%.2fx", c.Ratio), vs, fmtPct(c.PrefillUtilDisagg)})
		if c.Ratio < 0.98 {
			below++
		}
	}
	if err := t.Write(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d cells reach 0.98x the best baseline; goodput in req/s (both objectives met), first arrival to last completion\n",
		len(cells)-below, len(cells))
	return err
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// MatrixRun is what reproduces a matrix: the seed, the source commit (Commit) and every flag
// of `condisagg matrix` with its effective value.
type MatrixRun struct {
	Seed         uint64            `json:"seed"`
	Commit       string            `json:"commit"`
	CommitSource string            `json:"commit_source"`
	Flags        map[string]string `json:"flags"`
	// BaselinesCommit is the commit of the run whose baselines --baselines reused ("": this run
	// simulated its own).
	BaselinesCommit string `json:"baselines_commit,omitempty"`
}

// WriteMatrixJSON writes the run and its cells as indented JSON: {"seed", "commit",
// "commit_source", "flags", "cells": [...]}.
func WriteMatrixJSON(w io.Writer, run MatrixRun, cells []Cell) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(struct {
		MatrixRun
		Cells []Cell `json:"cells"`
	}{run, cells})
}

// baselineFlags are the flags of `condisagg matrix` that a stored run must share with the run
// that reuses its baselines: every one that changes what the baselines simulate.
var baselineFlags = []string{"duration", "fleets", "model", "seed", "slos", "trace-dir", "workloads"}

// ReadMatrixBaselines reads the cells of an earlier --json-out for --baselines, refusing a run
// whose baselines simulated something else than flags (the effective flags of this run) ask
// for. It returns the cells by key and the stored run's commit.
func ReadMatrixBaselines(r io.Reader, flags map[string]string) (map[CellKey]Cell, string, error) {
	var stored struct {
		MatrixRun
		Cells []Cell `json:"cells"`
	}
	if err := json.NewDecoder(r).Decode(&stored); err != nil {
		return nil, "", fmt.Errorf("matrix: --baselines: not a matrix --json-out file: %w", err)
	}
	var errs []error
	for _, k := range baselineFlags {
		if got, want := stored.Flags[k], flags[k]; got != want {
			errs = append(errs, fmt.Errorf("matrix: --baselines: the stored run has --%s=%q, this run %q (its baselines would be of another matrix)", k, got, want))
		}
	}
	if len(stored.Cells) == 0 {
		errs = append(errs, errors.New("matrix: --baselines: the stored run has no cells"))
	}
	if len(errs) > 0 {
		return nil, "", errors.Join(errs...)
	}
	out := make(map[CellKey]Cell, len(stored.Cells))
	for _, c := range stored.Cells {
		out[CellKey{c.Workload, c.Fleet, c.SLO}] = c
	}
	return out, stored.Commit, nil
}

// ParseSLOList parses "2s/100ms,1s/50ms": TTFT/TPOT pairs, every bad one named, none at all
// an error.
func ParseSLOList(s string) ([]workload.SLO, error) {
	out, errs := flaglist.Parse("--slos", s, "TTFT/TPOT durations > 0 such as 2s/100ms", func(part string) (workload.SLO, error) {
		a, b, ok := strings.Cut(part, "/")
		ttft, err1 := time.ParseDuration(a)
		tpot, err2 := time.ParseDuration(b)
		if !ok || err1 != nil || err2 != nil || ttft <= 0 || tpot <= 0 {
			return workload.SLO{}, errors.New("bad")
		}
		return workload.SLO{TTFT: ttft, TPOT: tpot}, nil
	})
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("--slos: %q names no objective", s))
	}
	return out, errors.Join(errs...)
}

// MatrixWorkloadNames are the workloads MatrixWorkloadByName knows.
func MatrixWorkloadNames() []string {
	return []string{"conversation", "conversation-x2", "azure-code", "azure-conv", "b2b", "agentic", "distserve"}
}

// MatrixWorkloadByName is a named workload of the evaluation: the Mooncake conversation trace
// (at 1x and 2x rate) and the Azure 2023 code and conversation traces under traceDir (the
// layout of ../shared/traces), and the llm-d B2B, agentic-code and DistServe-style mix
// generators; each cut to its
// first duration of arrivals (0 = whole).
func MatrixWorkloadByName(name, traceDir string, duration time.Duration) (MatrixWorkload, error) {
	c := Config{Duration: duration, RateScale: 1}
	switch name {
	case "conversation", "conversation-x2":
		c.Trace = traceDir + "/mooncake/conversation_trace.jsonl"
		if name == "conversation-x2" {
			c.RateScale = 2
		}
	case "azure-code":
		c.Trace = traceDir + "/azure2023/AzureLLMInferenceTrace_code.csv"
	case "azure-conv":
		c.Trace = traceDir + "/azure2023/AzureLLMInferenceTrace_conv.csv"
	case "b2b":
		c.Synthetic = "llm-d-b2b"
	case "agentic":
		c.Synthetic = "agentic-code"
	case "distserve":
		c.Synthetic = "distserve-mix"
	default:
		return MatrixWorkload{}, fmt.Errorf("--workloads: %q is not one of %s", name, strings.Join(MatrixWorkloadNames(), ", "))
	}
	if c.Trace != "" && traceDir == "" {
		return MatrixWorkload{}, fmt.Errorf("--workloads: %q needs --trace-dir (the folder holding mooncake/ and azure2023/)", name)
	}
	return MatrixWorkload{Name: name, Load: c}, nil
}
