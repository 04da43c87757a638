package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// slice returns the requests loadgen replays for o, in trace time (loadgen reads the same
// generator or file with the same window).
func slice(o *options) ([]workload.Request, error) {
	w := workload.Window{MaxRequests: o.requests}
	var reqs []workload.Request
	if o.trace != "" {
		fh, err := os.Open(o.trace)
		if err != nil {
			return nil, fmt.Errorf("bench-e2e: open trace: %w", err)
		}
		defer fh.Close()
		if reqs, err = workload.ReadMooncake(fh, workload.MooncakeOptions{}, w); err != nil {
			return nil, fmt.Errorf("bench-e2e: read trace %s: %w", o.trace, err)
		}
	} else {
		all, err := workload.Synthetic(o.synthetic, o.seed)
		if err != nil {
			return nil, fmt.Errorf("bench-e2e: synthetic %q: %w", o.synthetic, err)
		}
		reqs = w.Apply(all)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("bench-e2e: %s: the slice has no requests", sliceName(o))
	}
	return reqs, nil
}

// clusterConfig is the simulated twin of the live stack: same shape, engine defaults as
// vllm-sim's (cost model llama3.1-8b-h100, block size 16, max-num-seqs 1024), the same KV
// capacity, token budget and router policy.
func clusterConfig(o *options) (cluster.Config, error) {
	d, err := policy.ParseDisagg([]byte(o.disagg))
	if err != nil {
		return cluster.Config{}, fmt.Errorf("bench-e2e: --disagg: %w", err)
	}
	cfg := cluster.Config{Prefill: o.prefill, Decode: o.decode, Mode: cluster.Conditional, Disagg: d,
		Engine:     sim.Config{BlockSize: sim.DefaultBlockSize, NumGPUBlocks: o.numGPUBlocks, MaxNumBatchedTokens: o.mnbt},
		EventDelay: o.eventDelay, Seed: o.seed}
	if o.queueThreshold > 0 {
		cfg.QueueThreshold = policy.Set(o.queueThreshold)
	}
	return cfg, cfg.Validate()
}

// simulate runs the slice through cluster.Run and summarises it.
func simulate(ctx context.Context, o *options, reqs []workload.Request) (*cluster.Report, workload.Summary, error) {
	cfg, err := clusterConfig(o)
	if err != nil {
		return nil, workload.Summary{}, err
	}
	rep, err := cluster.Run(ctx, cfg, reqs, cluster.Options{})
	if err != nil {
		return nil, workload.Summary{}, fmt.Errorf("bench-e2e: simulate: %w", err)
	}
	results := rep.Results
	for i := range results { // the live side counts routes from the decision header
		results[i].Route, results[i].Reason = rep.Decisions[i].Route, rep.Decisions[i].Reason
	}
	return rep, workload.Summarize("simulated", results, workload.SLO{}, workload.SteadyState{}), nil
}

// writeRoutes prints the router's decisions on both sides: a different split between the
// remote and bypass paths explains latency differences before any timing does.
func writeRoutes(w io.Writer, live, simulated *workload.Summary) {
	keys := map[string]bool{}
	for k := range live.Reasons {
		keys[k] = true
	}
	for k := range simulated.Reasons {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	t := workload.Table{Header: []string{"route / reason", "live", "simulated"}}
	for _, r := range []string{"prefill", "decode"} {
		t.Rows = append(t.Rows, []string{"route " + r, fmt.Sprint(live.Routes[r]), fmt.Sprint(simulated.Routes[r])})
	}
	for _, k := range names {
		t.Rows = append(t.Rows, []string{"  " + k, fmt.Sprint(live.Reasons[k]), fmt.Sprint(simulated.Reasons[k])})
	}
	_ = t.Write(w)
}
