// Command bench-sessions measures session affinity in the simulator (docs/results.md,
// "Session affinity"): it replays a Mooncake trace, whose conversations are the sessions, on
// one fleet and policy three times — affinity off, on with the router's defaults, and an oracle
// that knows every conversation (a table that never forgets) — and prints, for each, the share
// of follow-up turns placed on the worker that holds their previous turn, goodput, SLO
// attainment, the engines' prefix-hit rate and the session outcomes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// options are the command's flags.
type options struct {
	trace, shape, policy, slo, model string
	requests                         int
	decodeBusy                       float64
	seed                             uint64
}

func main() {
	var o options
	flag.StringVar(&o.trace, "trace", "", "Mooncake JSONL trace (its conversations are the sessions)")
	flag.IntVar(&o.requests, "requests", 0, "keep only the first N requests (0 = all)")
	flag.StringVar(&o.shape, "cluster", "4P4D", "fleet shape <prefill>P<decode>D")
	flag.StringVar(&o.policy, "policy", "slo", "slo, isl_bounding, prefill_load, isl_or_load or aggregated (all GPUs as decode workers)")
	flag.StringVar(&o.slo, "slo", "ttft=2s,tpot=100ms", "objective of goodput (and of the slo policy)")
	flag.StringVar(&o.model, "model", sim.DefaultPerfModel, "cost model of the engines")
	flag.Float64Var(&o.decodeBusy, "decode-busy-threshold", -1, "θd decode-busy guard (< 0 = off)")
	flag.Uint64Var(&o.seed, "seed", 1, "selection tie-breaks and engine hashes")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sessions:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, w io.Writer) error {
	if o.trace == "" {
		return errors.New("-trace is required")
	}
	f, err := os.Open(o.trace)
	if err != nil {
		return err
	}
	reqs, err := workload.ReadMooncake(f, workload.MooncakeOptions{}, workload.Window{MaxRequests: o.requests})
	f.Close()
	if err != nil {
		return err
	}
	slo, err := workload.ParseSLO(o.slo)
	if err != nil {
		return fmt.Errorf("-slo: %w", err)
	}
	cfg, err := config(o, slo)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d requests; %s %s; SLO %s\n", o.trace, len(reqs), o.shape, o.policy, o.slo)
	fmt.Fprintf(w, "%-8s %22s %10s %8s %10s  %s\n", "affinity", "follow-ups on previous", "goodput/s", "attain", "prefix hit", "outcomes")
	for _, v := range []struct {
		name string
		s    route.SessionConfig
	}{
		{"off", route.SessionConfig{}},
		{"on", route.SessionConfig{Enabled: true}},
		// The oracle knows every conversation: no binding expires or is evicted.
		{"oracle", route.SessionConfig{Enabled: true, TTL: 1 << 62, Max: 1 << 30}},
	} {
		cfg.Sessions = v.s
		rep, err := cluster.Run(ctx, cfg, reqs, cluster.Options{})
		if err != nil {
			return fmt.Errorf("affinity %s: %w", v.name, err)
		}
		sum := workload.Summarize(v.name, rep.Results, slo, workload.SteadyState{})
		s := rep.Sessions
		hit := 0.0
		if rep.PromptTokens > 0 {
			hit = 100 * float64(rep.PrefixHitTokens) / float64(rep.PromptTokens)
		}
		fmt.Fprintf(w, "%-8s %7d of %5d %6.1f%% %10.4f %8.4f %9.1f%%  %s\n", v.name, s.OnPrevious, s.FollowUps, 100*s.Share(),
			sum.Goodput, sum.Attainment, hit, outcomes(s.Stats))
	}
	return nil
}

// config is the fleet and policy of every run.
func config(o options, slo workload.SLO) (cluster.Config, error) {
	m, err := sim.PerfModel(o.model)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("-model: %w", err)
	}
	np, nd, err := cluster.ParseShape(o.shape)
	if err != nil {
		return cluster.Config{}, err
	}
	cfg := cluster.Config{Prefill: np, Decode: nd, Engine: sim.Config{Model: m}, Mode: cluster.Conditional, Seed: o.seed,
		Disagg: policy.DefaultDisagg()}
	switch kind := policy.Kind(o.policy); kind {
	case "aggregated":
		cfg.Mode, cfg.Prefill, cfg.Decode = cluster.Aggregated, 0, np+nd
	case policy.SLOKind:
		cfg.Disagg.Policy, cfg.Disagg.Cost, cfg.Disagg.CostModel = kind, m, m.Name
		cfg.Disagg.SLO = policy.SLO{TTFT: slo.TTFT, TPOT: slo.TPOT}
	case policy.ISLBounding, policy.PrefillLoad, policy.ISLOrLoad:
		cfg.Disagg.Policy = kind
		cfg.Disagg.PrefillBusyThreshold = policy.Set(cluster.DefaultPrefillBusyThreshold)
	default:
		return cluster.Config{}, fmt.Errorf("-policy: %q must be slo, isl_bounding, prefill_load, isl_or_load or aggregated", o.policy)
	}
	if o.decodeBusy >= 0 {
		cfg.Disagg.DecodeBusyThreshold = policy.Set(o.decodeBusy)
	}
	return cfg, nil
}

// outcomes are the session table's counters ("-" with affinity off).
func outcomes(st route.SessionStats) string {
	out := ""
	for _, a := range policy.Affinities() {
		if n := st.Outcomes[a]; n > 0 {
			out += fmt.Sprintf("%s=%d ", a, n)
		}
	}
	if st.Expired+st.Evicted > 0 {
		out += fmt.Sprintf("expired=%d evicted=%d", st.Expired, st.Evicted)
	}
	if out == "" {
		return "-"
	}
	return out
}
