package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// loadWorkload is the slice loadgen replays, built as loadgen builds it: the leading
// requests, lengths scaled, then arrivals.
func loadWorkload(c *config) ([]workload.Request, error) {
	f, err := os.Open(c.trace)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reqs, err := workload.ReadMooncake(f, workload.MooncakeOptions{}, workload.Window{MaxRequests: c.requests})
	if err != nil {
		return nil, err
	}
	if reqs, err = workload.ScaleLengths(reqs, c.inScale, c.outScale); err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if r.InputTokens+r.OutputTokens > c.maxLen {
			return nil, fmt.Errorf("request %d needs %d+%d tokens, over --max-model-len %d: lower --input-scale",
				r.Index, r.InputTokens, r.OutputTokens, c.maxLen)
		}
	}
	return workload.ScaleRate(reqs, 1/c.timeScale)
}

func describe(reqs []workload.Request) string {
	in, out := make([]int, len(reqs)), make([]int, len(reqs))
	for i, r := range reqs {
		in[i], out[i] = r.InputTokens, r.OutputTokens
	}
	di, do := workload.NewDist(in), workload.NewDist(out)
	span := reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	return fmt.Sprintf("%d requests over %s (%.2f req/s); input p50 %d p90 %d max %d; output p50 %d p90 %d max %d",
		len(reqs), span.Round(100*time.Millisecond), float64(len(reqs)-1)/span.Seconds(), di.P50, di.P90, di.Max, do.P50, do.P90, do.Max)
}

// loadModel reads the cost model and, from a calibrated file, the engine's own request
// handling (calibration.request_overhead_ms; 0 for a named model or a file without it).
func loadModel(path string) (sim.CostModel, time.Duration, error) {
	m, err := sim.ResolvePerfModel(path, os.ReadFile)
	if err != nil || !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml") {
		return m, 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return m, 0, err
	}
	_, cal, err := cost.ParseFile(path, b)
	if err != nil || cal == nil {
		return m, 0, err
	}
	return m, time.Duration(cal.OverheadMS * float64(time.Millisecond)), nil
}

// simulate runs one layout in package cluster on the engines' own limits and the calibrated
// model, with the same router policy as the real run.
func simulate(ctx context.Context, c *config, m sim.CostModel, overhead time.Duration, layout string, reqs []workload.Request) (row, error) {
	cfg := cluster.Config{Prefill: 1, Decode: 1, Seed: 1, RequestOverhead: overhead,
		Engine: sim.Config{BlockSize: blockSize, NumGPUBlocks: c.blocks, MaxNumBatchedTokens: c.mnbt, MaxNumSeqs: c.maxSeqs, Model: m}}
	switch layout {
	case "aggregated":
		cfg.Mode, cfg.Prefill, cfg.Decode = cluster.Aggregated, 0, 2
	case "disaggregated":
		cfg.Mode = cluster.Disaggregated
	case "isl_or_load":
		cfg.Mode, cfg.Disagg = cluster.Conditional, policy.DefaultDisagg()
		cfg.Disagg.Policy = policy.ISLOrLoad
	case "slo":
		cfg.Mode, cfg.Disagg = cluster.Conditional, policy.DefaultDisagg()
		cfg.Disagg.Policy, cfg.Disagg.Cost, cfg.Disagg.CostModel = policy.SLOKind, m, m.Name
		cfg.Disagg.SLO.TTFT, cfg.Disagg.SLO.TPOT = c.slo.TTFT, c.slo.TPOT
	}
	rep, err := cluster.Run(ctx, cfg, reqs, cluster.Options{})
	if err != nil {
		return row{}, err
	}
	for i := range rep.Results {
		if d := rep.Decisions[i]; d.Route != "" {
			rep.Results[i].Route = string(d.Route)
		}
	}
	return rowFromSummary(workload.Summarize(layout, rep.Results, c.slo, workload.SteadyState{}), rep.Preemptions), nil
}
