package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

const tuneUsage = `usage: condisagg tune (--trace FILE | --synthetic NAME) [flags]

Simulates the workload on a prefill/decode fleet with the real router (kvindex, pool, policy) in
the loop, once per routing mode, and recommends conditional-disaggregation thresholds.

`

// tuneFlags are the flags of `condisagg tune`.
type tuneFlags struct {
	trace, synthetic, shape, modelName, sloText, output, plots, jsonOut string
	requests                                                            int
	duration, warmup, drain, eventDelay                                 time.Duration
	rateScale, quantile, prefillBusy, decodeBusy                        float64
	seed                                                                uint64
	mnbt, maxSeqs, numBlocks, parallel                                  int
	sweepEff, sweepRatio, sweepPolicy, sweepBusy                        string
	noSweep, quiet, progress                                            bool
}

func parseTuneFlags(args []string, stderr io.Writer) (*tuneFlags, bool) {
	f := &tuneFlags{}
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tuneUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.trace, "trace", "", "Mooncake JSONL trace file")
	fs.StringVar(&f.synthetic, "synthetic", "", "synthetic workload instead of a trace: "+strings.Join(workload.SyntheticNames(), ", "))
	fs.IntVar(&f.requests, "requests", 0, "keep only the first N requests (0 = all)")
	fs.DurationVar(&f.duration, "duration", 0, "keep only requests arriving within this time (0 = all)")
	fs.Float64Var(&f.rateScale, "rate-scale", 1, "multiply the arrival rate")
	fs.StringVar(&f.shape, "cluster", "4P4D", "fleet shape: <prefill>P<decode>D")
	fs.StringVar(&f.modelName, "model", sim.DefaultPerfModel, "cost model: "+strings.Join(sim.PerfModelNames(), ", "))
	fs.StringVar(&f.sloText, "slo", "ttft=2s,tpot=100ms", "SLO for goodput and attainment")
	fs.DurationVar(&f.warmup, "warmup", 0, "exclude requests arriving in the first D from goodput")
	fs.DurationVar(&f.drain, "drain", 0, "exclude requests arriving in the last D from goodput")
	fs.IntVar(&f.mnbt, "max-num-batched-tokens", sim.DefaultMaxNumBatchedTokens, "engine token budget per step")
	fs.IntVar(&f.maxSeqs, "max-num-seqs", sim.DefaultMaxNumSeqs, "engine running sequences")
	fs.IntVar(&f.numBlocks, "num-gpu-blocks", 0, "KV blocks per engine (0 = the model's)")
	fs.DurationVar(&f.eventDelay, "event-delay", 0, "delay of KV events before the router's index sees them")
	fs.Float64Var(&f.prefillBusy, "prefill-busy-threshold", cluster.DefaultPrefillBusyThreshold, "θp of the load policies (multiple of mnbt)")
	fs.Float64Var(&f.decodeBusy, "decode-busy-threshold", -1, "θd decode-busy guard (fraction of KV capacity; < 0 = off)")
	fs.Float64Var(&f.quantile, "quantile", 0.25, "p of the p-quantile rule for eff_isl_threshold")
	fs.StringVar(&f.sweepPolicy, "sweep-policy", string(policy.ISLBounding), "policy of the threshold sweep: isl_bounding or isl_or_load")
	fs.StringVar(&f.sweepBusy, "sweep-prefill-busy", "1,2,4,8", "θp values tried with isl_or_load at the best (T, R)")
	fs.StringVar(&f.sweepEff, "sweep-eff", "auto", "eff_isl_threshold values of the sweep (comma list; auto = the p-quantile value and 512, 1024, 2048, 4096)")
	fs.StringVar(&f.sweepRatio, "sweep-ratio", "0.5,0.9,1.0", "eff_isl_ratio_threshold values tried at the best eff threshold (0.7 is always tried)")
	fs.BoolVar(&f.noSweep, "no-sweep", false, "skip the threshold sweep")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic workload, selection tie-breaks and engine hashes")
	fs.IntVar(&f.parallel, "parallel", 1, "simulations run at once")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	fs.StringVar(&f.jsonOut, "json-out", "", "also write the JSON report to this file")
	fs.StringVar(&f.plots, "plots", "", "directory for SVG plots (sweep, TTFT and TPOT CDFs); empty = none")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&f.progress, "progress", false, "progress bar even for short runs")
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tune: unexpected arguments %q\n", fs.Args())
		return nil, false
	}
	return f, true
}

// tuneSetup is what the flags resolve to.
type tuneSetup struct {
	name     string
	reqs     []workload.Request
	base     cluster.Config // Prefill/Decode/Engine/EventDelay/Seed; Mode and Disagg per run
	shape    string
	slo      workload.SLO
	ss       workload.SteadyState
	effList  []int64
	ratios   []float64
	busyList []float64
	policy   policy.Kind
}

func (f *tuneFlags) setup() (*tuneSetup, error) {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	s := &tuneSetup{shape: strings.ToUpper(f.shape), ss: workload.SteadyState{Warmup: f.warmup, Drain: f.drain}}
	p, d, err := cluster.ParseShape(f.shape)
	if err != nil {
		bad("--cluster: %v", err)
	} else if p < 1 {
		bad("--cluster: %q needs at least one prefill worker", f.shape)
	}
	m, err := sim.PerfModel(f.modelName)
	if err != nil {
		bad("--model: %v", err)
	}
	if s.slo, err = workload.ParseSLO(f.sloText); err != nil {
		bad("--slo: %v", err)
	}
	if f.output != "table" && f.output != "json" {
		bad("-o: %q must be table or json", f.output)
	}
	if !(f.quantile > 0 && f.quantile < 1) {
		bad("--quantile: %v must be in (0, 1)", f.quantile)
	}
	if f.parallel < 1 || f.parallel > 64 {
		bad("--parallel: %d must be in [1, 64]", f.parallel)
	}
	if !(f.rateScale > 0) || math.IsInf(f.rateScale, 0) {
		bad("--rate-scale: %v must be > 0", f.rateScale)
	}
	if !(f.prefillBusy >= 0) {
		bad("--prefill-busy-threshold: %v must be >= 0", f.prefillBusy)
	}
	s.policy = policy.Kind(f.sweepPolicy)
	if s.policy != policy.ISLBounding && s.policy != policy.ISLOrLoad {
		bad("--sweep-policy: %q must be isl_bounding or isl_or_load (prefill_load has no ISL threshold)", f.sweepPolicy)
	}
	if f.sweepEff != "auto" {
		for _, v := range strings.Split(f.sweepEff, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				bad("--sweep-eff: %q must be a non-negative integer", v)
			}
			s.effList = append(s.effList, n)
		}
	}
	for _, v := range strings.Split(f.sweepRatio, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(r >= 0 && r <= 1) {
			bad("--sweep-ratio: %q must be in [0, 1]", v)
		}
		s.ratios = append(s.ratios, r)
	}
	for _, v := range strings.Split(f.sweepBusy, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		p, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(p >= 0) || math.IsInf(p, 0) {
			bad("--sweep-prefill-busy: %q must be a number >= 0", v)
		}
		s.busyList = append(s.busyList, p)
	}
	if (f.trace == "") == (f.synthetic == "") {
		bad("exactly one of --trace and --synthetic is required")
	}
	s.base = cluster.Config{Prefill: p, Decode: d, EventDelay: f.eventDelay, Seed: f.seed,
		Engine: sim.Config{Model: m, MaxNumBatchedTokens: f.mnbt, MaxNumSeqs: f.maxSeqs, NumGPUBlocks: f.numBlocks}}
	if err := s.base.Engine.Validate(); err != nil {
		bad("engine: %v", err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("tune: %s", strings.Join(errs, "; "))
	}
	if err := s.load(f); err != nil {
		return nil, err
	}
	return s, nil
}

// load reads or generates the workload and applies the window and the rate scale.
func (s *tuneSetup) load(f *tuneFlags) error {
	w := workload.Window{MaxRequests: f.requests, Duration: f.duration}
	var err error
	if f.trace != "" {
		s.name = filepath.Base(f.trace)
		var fh *os.File
		if fh, err = os.Open(f.trace); err != nil {
			return fmt.Errorf("tune: open trace: %w", err)
		}
		defer fh.Close()
		if s.reqs, err = workload.ReadMooncake(fh, workload.MooncakeOptions{}, w); err != nil {
			return fmt.Errorf("tune: read trace %s: %w", f.trace, err)
		}
	} else {
		s.name = "synthetic " + f.synthetic
		if s.reqs, err = workload.Synthetic(f.synthetic, f.seed); err != nil {
			return fmt.Errorf("tune: --synthetic: %w", err)
		}
		s.reqs = w.Apply(s.reqs)
	}
	if f.rateScale != 1 {
		if s.reqs, err = workload.ScaleRate(s.reqs, f.rateScale); err != nil {
			return fmt.Errorf("tune: --rate-scale %v: %w", f.rateScale, err)
		}
	}
	if len(s.reqs) == 0 {
		return fmt.Errorf("tune: workload %s has no requests", s.name)
	}
	return nil
}

// runTune is `condisagg tune`.
func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, ok := parseTuneFlags(args, stderr)
	if !ok {
		return 2
	}
	s, err := f.setup()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	bar := newProgressBar(stderr, !f.quiet && (f.progress || len(s.reqs) >= 2000))
	rep, err := tune(ctx, s, f, bar)
	bar.finish()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if f.plots != "" {
		if rep.Plots, err = writePlots(f.plots, rep); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if f.jsonOut != "" {
		if err := writeJSONFile(f.jsonOut, rep); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if f.output == "json" {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tune: write report: %v\n", err)
		return 1
	}
	return 0
}

// tuneJob is one simulation of the tune run.
type tuneJob struct {
	name  string
	cfg   cluster.Config
	sweep bool
	rep   *cluster.Report
	sum   workload.Summary
}

// runJobs simulates jobs, parallel at a time, and summarises each.
func runJobs(ctx context.Context, s *tuneSetup, jobs []*tuneJob, parallel int, bar *progressBar) error {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	bar.add(len(jobs) * len(s.reqs))
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			last := 0
			rep, err := cluster.Run(ctx, j.cfg, s.reqs, cluster.Options{Progress: func(done, _ int) {
				bar.advance(j.name, done-last)
				last = done
			}})
			if err != nil {
				errs[i] = fmt.Errorf("tune: simulate %s: %w", j.name, err)
				return
			}
			j.rep = rep
			j.sum = workload.Summarize(j.name, rep.Results, s.slo, s.ss)
			for k := range rep.Results {
				rep.Results[k].Gaps = nil // summarised; a full trace holds millions
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// conditional returns the base config with a conditional policy.
func (s *tuneSetup) conditional(f *tuneFlags, kind policy.Kind, eff int64, ratio float64) cluster.Config {
	c := s.base
	c.Mode = cluster.Conditional
	c.Disagg = policy.DefaultDisagg()
	c.Disagg.Policy, c.Disagg.EffISLThreshold, c.Disagg.EffISLRatioThreshold = kind, eff, ratio
	c.Disagg.PrefillBusyThreshold = policy.Set(f.prefillBusy)
	if f.decodeBusy >= 0 {
		c.Disagg.DecodeBusyThreshold = policy.Set(f.decodeBusy)
	}
	return c
}

// tune runs the probe, the fixed modes and the sweep.
func tune(ctx context.Context, s *tuneSetup, f *tuneFlags, bar *progressBar) (*tuneReport, error) {
	agg := s.base
	agg.Mode, agg.Prefill = cluster.Aggregated, 0
	aggAll := agg
	aggAll.Decode = s.base.Prefill + s.base.Decode
	dis := s.base
	dis.Mode = cluster.Disaggregated
	// The probe never bypasses (T = 0) but previews every request on the decode pool: eff and
	// ratio as decode workers see them under disaggregation with cache-affine decode selection.
	probe := &tuneJob{name: "probe (always remote, previewed)", cfg: s.conditional(f, policy.ISLBounding, 0, policy.DefaultEffISLRatioThreshold)}
	T, R := int64(policy.DefaultEffISLThreshold), policy.DefaultEffISLRatioThreshold
	modes := []*tuneJob{
		{name: "aggregated", cfg: agg},
		{name: fmt.Sprintf("aggregated (%d GPUs)", aggAll.Decode), cfg: aggAll},
		{name: "disaggregated", cfg: dis},
		{name: "isl_bounding", cfg: s.conditional(f, policy.ISLBounding, T, R)},
		{name: "prefill_load", cfg: s.conditional(f, policy.PrefillLoad, T, R)},
		{name: "isl_or_load", cfg: s.conditional(f, policy.ISLOrLoad, T, R)},
	}
	if err := runJobs(ctx, s, append([]*tuneJob{probe}, modes...), f.parallel, bar); err != nil {
		return nil, err
	}
	rep := newTuneReport(s, f, probe, modes)
	if f.noSweep {
		return rep, nil
	}
	effs := s.effList
	if len(effs) == 0 {
		effs = []int64{rep.Recommend.Quantile.EffISLThreshold, 512, 1024, 2048, 4096}
	}
	slices.Sort(effs)
	effs = slices.Compact(effs)
	// Stage 1: eff_isl_threshold at the default ratio; stage 2: the ratio at the best T;
	// stage 3: isl_or_load with each θp at the best (T, R).
	var stage1 []*tuneJob
	for _, e := range effs {
		stage1 = append(stage1, s.sweepJob(f, s.policy, e, R, f.prefillBusy))
	}
	if err := runJobs(ctx, s, stage1, f.parallel, bar); err != nil {
		return nil, err
	}
	all := stage1
	bestT := tuneBest(all).cfg.Disagg.EffISLThreshold
	var stage2 []*tuneJob
	for _, r := range s.ratios {
		if r != R {
			stage2 = append(stage2, s.sweepJob(f, s.policy, bestT, r, f.prefillBusy))
		}
	}
	if err := runJobs(ctx, s, stage2, f.parallel, bar); err != nil {
		return nil, err
	}
	all = append(all, stage2...)
	b := tuneBest(all).cfg.Disagg
	var stage3 []*tuneJob
	for _, p := range s.busyList {
		if s.policy != policy.ISLOrLoad || p != f.prefillBusy {
			stage3 = append(stage3, s.sweepJob(f, policy.ISLOrLoad, b.EffISLThreshold, b.EffISLRatioThreshold, p))
		}
	}
	if err := runJobs(ctx, s, stage3, f.parallel, bar); err != nil {
		return nil, err
	}
	all = append(all, stage3...)
	rep.addSweep(all)
	return rep, nil
}

// sweepJob is one point of the threshold sweep.
func (s *tuneSetup) sweepJob(f *tuneFlags, k policy.Kind, eff int64, ratio, busy float64) *tuneJob {
	c := s.conditional(f, k, eff, ratio)
	name := fmt.Sprintf("%s T=%d R=%s", k, eff, strconv.FormatFloat(ratio, 'f', -1, 64))
	if k != policy.ISLBounding {
		c.Disagg.PrefillBusyThreshold = policy.Set(busy)
		name += " θp=" + strconv.FormatFloat(busy, 'f', -1, 64)
	}
	return &tuneJob{name: name, cfg: c, sweep: true}
}

// tuneBest is the job with the highest goodput; ties go to the lower TTFT p90, then TPOT p99.
func tuneBest(jobs []*tuneJob) *tuneJob {
	var b *tuneJob
	for _, j := range jobs {
		if b == nil || j.sum.Goodput > b.sum.Goodput ||
			(j.sum.Goodput == b.sum.Goodput && (j.sum.TTFT.P90 < b.sum.TTFT.P90 ||
				(j.sum.TTFT.P90 == b.sum.TTFT.P90 && j.sum.TPOT.P99 < b.sum.TPOT.P99))) {
			b = j
		}
	}
	return b
}

func writeJSONFile(path string, rep *tuneReport) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tune: --json-out: %w", err)
	}
	if err := rep.writeJSON(fh); err != nil {
		fh.Close()
		return fmt.Errorf("tune: --json-out %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("tune: --json-out %s: %w", path, err)
	}
	return nil
}
