package tune

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/workload"
)

// Progress hears how far the simulations of a run have got. Run calls Advance from several
// goroutines at once.
type Progress interface {
	// Plan is called once, before the first simulation, with the number of requests all
	// simulations of the run will finish at most (the sweep may merge two threshold values).
	Plan(requests int)
	// Advance reports that the simulation named label finished n more requests.
	Advance(label string, n int)
}

// Options are the parts of a run that do not change what it simulates.
type Options struct {
	Progress Progress // nil: none
	// Flags is the command line that configured the run, every flag with its effective value;
	// the report records it as given.
	Flags map[string]string
}

// job is one simulation of the run.
type job struct {
	name string
	cfg  cluster.Config
	rep  *cluster.Report
	sum  workload.Summary
}

// run is one Run call: the resolved config, the workload, where progress goes and what the
// report records about the run's provenance.
type run struct {
	c                    *Config
	p                    *plan
	w                    *Workload
	prog                 Progress
	flags                map[string]string
	commit, commitSource string
}

// Run simulates w once per routing mode, then sweeps the thresholds, and reports the modes,
// the sweep and the recommended thresholds.
func Run(ctx context.Context, c *Config, w *Workload, opts Options) (*Report, error) {
	p, err := c.resolve()
	if err != nil {
		return nil, err
	}
	r := &run{c: c, p: p, w: w, prog: opts.Progress, flags: opts.Flags}
	r.commit, r.commitSource = Commit(ctx)
	if r.prog == nil {
		r.prog = noProgress{}
	}
	r.prog.Plan(r.plannedJobs() * len(w.Requests))
	return r.tune(ctx)
}

type noProgress struct{}

func (noProgress) Plan(int)            {}
func (noProgress) Advance(string, int) {}

// defaultEffs are the fixed eff_isl_threshold values of the auto sweep; effQuantiles are the
// quantiles of the workload's effective ISL (always-remote probe) swept beside them, so that the
// sweep reaches the trace's scale (long-context traces have effective ISLs of 10k tokens and
// more, far above the fixed values).
var defaultEffs = [...]int64{512, 1024, 2048, 4096}

// effQuartiles are the quartiles of an effective ISL distribution, none when it is empty.
func effQuartiles(eff *workload.Dist[float64]) []float64 {
	if eff == nil || eff.N == 0 {
		return nil
	}
	return []float64{eff.P25, eff.P50, eff.P75}
}

// plannedJobs is the most simulations the run does: the probe and seven modes, then the sweep,
// whose stages 2 and 3 have as many points whatever the best point of the stage before.
func (r *run) plannedJobs() int {
	n := 8 + len(r.c.SweepMargin)
	if r.c.RoleAdvice {
		n += r.plannedRoleJobs()
	}
	if r.c.NoSweep {
		return n
	}
	if len(r.c.SweepEff) > 0 {
		n += len(r.effs(nil))
	} else {
		n += len(defaultEffs) + 3 // and the quartiles of eff
	}
	return n + len(r.stage2(0)) + len(r.stage3(policy.Disagg{}))
}

// runJobs simulates jobs, Parallel at a time, and summarises each.
func (r *run) runJobs(ctx context.Context, jobs []*job) error {
	return inParallel(len(jobs), r.c.Parallel, func(i int) error {
		j := jobs[i]
		last := 0
		rep, err := cluster.Run(ctx, j.cfg, r.w.Requests, cluster.Options{Progress: func(done, _ int) {
			r.prog.Advance(j.name, done-last)
			last = done
		}})
		if err != nil {
			return fmt.Errorf("tune: simulate %s: %w", j.name, err)
		}
		j.rep = rep
		j.sum = workload.Summarize(j.name, rep.Results, r.p.slo, r.p.ss)
		for k := range rep.Results {
			rep.Results[k].Gaps = nil // summarised; a full trace holds millions
		}
		return nil
	})
}

// inParallel runs do(0..n-1), parallel at a time, and returns the first error by index.
func inParallel(n, parallel int, do func(i int) error) error {
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = do(i)
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
func (r *run) conditional(kind policy.Kind, eff int64, ratio float64) cluster.Config {
	c := r.p.base
	c.Mode = cluster.Conditional
	c.Disagg = policy.DefaultDisagg()
	c.Disagg.Policy, c.Disagg.EffISLThreshold, c.Disagg.EffISLRatioThreshold = kind, eff, ratio
	c.Disagg.PrefillBusyThreshold = policy.Set(r.c.PrefillBusyThreshold)
	if r.c.DecodeBusyThreshold >= 0 {
		c.Disagg.DecodeBusyThreshold = policy.Set(r.c.DecodeBusyThreshold)
	}
	c.Shadow = r.p.shadow
	return c
}

// slo returns the base config with the slo policy at the run's objective and cost model:
// untuned, it needs no sweep.
func (r *run) slo() cluster.Config {
	c := r.conditional(policy.SLOKind, policy.DefaultEffISLThreshold, policy.DefaultEffISLRatioThreshold)
	c.Disagg.Cost, c.Disagg.CostModel = c.Engine.Model, c.Engine.Model.Name // tune sets the model
	c.Disagg.SLOFleet = r.c.SLOFleet
	if r.p.slo.TTFT > 0 {
		c.Disagg.SLO.TTFT = r.p.slo.TTFT
	}
	if r.p.slo.TPOT > 0 {
		c.Disagg.SLO.TPOT = r.p.slo.TPOT
	}
	return c
}

// tune runs the probe, the fixed modes and the sweep.
func (r *run) tune(ctx context.Context) (*Report, error) {
	agg := r.p.base
	agg.Mode, agg.Prefill = cluster.Aggregated, 0
	aggAll := agg
	aggAll.Decode = r.p.base.Prefill + r.p.base.Decode
	dis := r.p.base
	dis.Mode = cluster.Disaggregated
	// The probe never bypasses (T = 0) but previews every request on the decode pool: eff and
	// ratio as decode workers see them under disaggregation with cache-affine decode selection.
	probe := &job{name: "probe (always remote, previewed)", cfg: r.conditional(policy.ISLBounding, 0, policy.DefaultEffISLRatioThreshold)}
	T, R := int64(policy.DefaultEffISLThreshold), policy.DefaultEffISLRatioThreshold
	modes := []*job{
		{name: "aggregated", cfg: agg},
		{name: fmt.Sprintf("aggregated (%d GPUs)", aggAll.Decode), cfg: aggAll},
		{name: "disaggregated", cfg: dis},
		{name: "isl_bounding", cfg: r.conditional(policy.ISLBounding, T, R)},
		{name: "prefill_load", cfg: r.conditional(policy.PrefillLoad, T, R)},
		{name: "isl_or_load", cfg: r.conditional(policy.ISLOrLoad, T, R)},
		{name: "slo", cfg: r.slo()},
	}
	for _, m := range r.c.SweepMargin {
		c := r.slo()
		c.Disagg.SLOMargin = m
		modes = append(modes, &job{name: "slo margin=" + strconv.FormatFloat(m, 'f', -1, 64), cfg: c})
	}
	if err := r.runJobs(ctx, append([]*job{probe}, modes...)); err != nil {
		return nil, err
	}
	rep := newReport(r, probe, modes)
	if r.c.RoleAdvice {
		if err := r.roleAdvice(ctx, rep); err != nil {
			return nil, err
		}
	}
	if r.c.NoSweep {
		return rep, nil
	}
	// Stage 1: eff_isl_threshold at the default ratio; stage 2: the ratio at the best T;
	// stage 3: isl_or_load with each θp at the best (T, R).
	var stage1 []*job
	for _, e := range r.effs(&rep.EffISL) {
		stage1 = append(stage1, r.sweepJob(r.c.SweepPolicy, e, R, r.c.PrefillBusyThreshold))
	}
	if err := r.runJobs(ctx, stage1); err != nil {
		return nil, err
	}
	if len(r.c.SweepEff) == 0 { // quartiles equal to a fixed value or to each other merge
		r.prog.Advance("sweep (merged thresholds)", (len(defaultEffs)+3-len(stage1))*len(r.w.Requests))
	}
	stage2 := r.stage2(best(stage1).cfg.Disagg.EffISLThreshold)
	if err := r.runJobs(ctx, stage2); err != nil {
		return nil, err
	}
	all := append(stage1, stage2...)
	stage3 := r.stage3(best(all).cfg.Disagg)
	if err := r.runJobs(ctx, stage3); err != nil {
		return nil, err
	}
	rep.addSweep(append(all, stage3...))
	return rep, nil
}

// effs are the eff_isl_threshold values of stage 1, ascending and distinct: --sweep-eff, or
// (auto) the fixed values and the quantiles of eff, the probe's effective ISL distribution.
func (r *run) effs(eff *workload.Dist[float64]) []int64 {
	effs := slices.Clone(r.c.SweepEff)
	if len(effs) == 0 {
		effs = append(effs, defaultEffs[:]...)
		for _, q := range effQuartiles(eff) {
			effs = append(effs, int64(math.Round(q)))
		}
	}
	slices.Sort(effs)
	return slices.Compact(effs)
}

// stage2 tries each ratio threshold at the best eff_isl_threshold of stage 1.
func (r *run) stage2(bestT int64) []*job {
	var jobs []*job
	for _, ratio := range r.c.SweepRatio {
		if ratio != policy.DefaultEffISLRatioThreshold {
			jobs = append(jobs, r.sweepJob(r.c.SweepPolicy, bestT, ratio, r.c.PrefillBusyThreshold))
		}
	}
	return jobs
}

// stage3 tries isl_or_load with each θp at the best (T, R) so far.
func (r *run) stage3(b policy.Disagg) []*job {
	var jobs []*job
	for _, busy := range r.c.SweepPrefillBusy {
		if r.c.SweepPolicy != policy.ISLOrLoad || busy != r.c.PrefillBusyThreshold {
			jobs = append(jobs, r.sweepJob(policy.ISLOrLoad, b.EffISLThreshold, b.EffISLRatioThreshold, busy))
		}
	}
	return jobs
}

// sweepJob is one point of the threshold sweep.
func (r *run) sweepJob(k policy.Kind, eff int64, ratio, busy float64) *job {
	c := r.conditional(k, eff, ratio)
	name := fmt.Sprintf("%s T=%d R=%s", k, eff, strconv.FormatFloat(ratio, 'f', -1, 64))
	if k != policy.ISLBounding {
		c.Disagg.PrefillBusyThreshold = policy.Set(busy)
		name += " θp=" + strconv.FormatFloat(busy, 'f', -1, 64)
	}
	return &job{name: name, cfg: c}
}

// best is the job with the highest goodput; ties go to the lower TTFT p90, then TPOT p99.
func best(jobs []*job) *job {
	var b *job
	for _, j := range jobs {
		if b == nil || j.sum.Goodput > b.sum.Goodput ||
			(j.sum.Goodput == b.sum.Goodput && (j.sum.TTFT.P90 < b.sum.TTFT.P90 ||
				(j.sum.TTFT.P90 == b.sum.TTFT.P90 && j.sum.TPOT.P99 < b.sum.TPOT.P99))) {
			b = j
		}
	}
	return b
}
