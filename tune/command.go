package tune

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/internal/flaglist"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// The commands `condisagg tune` and `condisagg matrix`: their flags, how the flags become a
// Config or a MatrixConfig, and what each writes where. cmd/condisagg only dispatches to them,
// as it hands `serve` to the server package.

const tuneUsage = `usage: condisagg tune (--trace FILE | --synthetic NAME) [flags]

Simulates the workload on a prefill/decode fleet with the real router (kvindex, pool, policy) in
the loop, once per routing mode, and recommends conditional-disaggregation thresholds.

`

// progressMinRequests is the workload size from which the progress bar is drawn without
// --progress: shorter runs finish before a bar would tell anything.
const progressMinRequests = 2000

// tuneFlags are the flags of `condisagg tune` that are not fields of Config, and all of them as
// the report records them.
type tuneFlags struct {
	output, jsonOut, plots          string
	sweepEff, sweepRatio, sweepBusy string
	sweepMargin                     string
	quiet, progress                 bool
	all                             map[string]string // every flag's name and effective value
}

// tuneFlagSet defines the flags of `condisagg tune` on c and f; their defaults are c's.
func tuneFlagSet(c *Config, f *tuneFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tuneUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Trace, "trace", "", "Mooncake JSONL trace file")
	fs.StringVar(&c.Synthetic, "synthetic", "", "synthetic workload instead of a trace: "+strings.Join(workload.SyntheticNames(), ", "))
	fs.IntVar(&c.Requests, "requests", 0, "keep only the first N requests (0 = all)")
	fs.DurationVar(&c.Duration, "duration", 0, "keep only requests arriving within this time (0 = all)")
	fs.Float64Var(&c.RateScale, "rate-scale", c.RateScale, "multiply the arrival rate")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "fleet shape: <prefill>P<decode>D")
	fs.StringVar(&c.Model, "model", c.Model, "cost model: "+strings.Join(sim.PerfModelNames(), ", ")+", or a model file (.yaml) written by condisagg calibrate")
	fs.StringVar(&c.SLO, "slo", c.SLO, "SLO for goodput and attainment")
	fs.DurationVar(&c.Warmup, "warmup", 0, "exclude requests arriving in the first D from goodput")
	fs.DurationVar(&c.Drain, "drain", 0, "exclude requests arriving in the last D from goodput")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "engine token budget per step")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "engine running sequences")
	fs.IntVar(&c.NumGPUBlocks, "num-gpu-blocks", 0, "KV blocks per engine (0 = the model's)")
	fs.DurationVar(&c.EventDelay, "event-delay", 0, "delay of KV events before the router's index sees them")
	fs.Float64Var(&c.PrefillBusyThreshold, "prefill-busy-threshold", c.PrefillBusyThreshold, "θp of the load policies (multiple of mnbt)")
	fs.Float64Var(&c.DecodeBusyThreshold, "decode-busy-threshold", c.DecodeBusyThreshold, "θd decode-busy guard (fraction of KV capacity; < 0 = off)")
	fs.Func("quantile", "retired: the p-quantile rule is gone; the sweep recommends (--sweep-eff auto covers the quartiles of eff)", func(string) error {
		return errors.New("the p-quantile rule was retired (it served 48-100% of the sweep's best goodput on the matrix traces): drop the flag; " +
			"the sweep's best point is the recommendation, and --sweep-eff auto already tries the quartiles of eff")
	})
	fs.BoolVar(&c.RoleAdvice, "role-advice", false, "also run always-disaggregated, isl_or_load and slo on every prefill:decode split of the fleet's GPUs, find the fewest GPUs for the best goodput, and check the live analytic advice")
	fs.Float64Var(&c.RoleTolerance, "role-tolerance", c.RoleTolerance, "with --role-advice: share of the best goodput a smaller fleet (or the analytic split) may lose and still count")
	fs.BoolVar(&c.SessionAffinity, "session-affinity", false, "soft session affinity: a session's follow-up prefers the worker of its previous turn (the trace's conversations are the sessions)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", 0, "session binding TTL with --session-affinity (0 = the router's default)")
	fs.IntVar(&c.MaxSessions, "max-sessions", 0, "session table bound with --session-affinity (0 = the router's default)")
	fs.StringVar(&c.Shadow, "shadow", "", "candidate policy object (JSON, as --router-conditional-disagg-config) replayed beside every conditional mode without routing; the report counts its agreement")
	fs.StringVar((*string)(&c.SweepPolicy), "sweep-policy", string(c.SweepPolicy), "policy of the threshold sweep: isl_bounding or isl_or_load")
	fs.StringVar(&f.sweepBusy, "sweep-prefill-busy", joinNums(c.SweepPrefillBusy), "θp values tried with isl_or_load at the best (T, R)")
	fs.StringVar(&f.sweepEff, "sweep-eff", "auto", "eff_isl_threshold values of the sweep (comma list; auto = 512, 1024, 2048, 4096 and the quartiles of eff)")
	fs.StringVar(&f.sweepRatio, "sweep-ratio", joinNums(c.SweepRatio), "eff_isl_ratio_threshold values tried at the best eff threshold (0.7 is always tried)")
	fs.BoolVar(&c.SLOFleet, "slo-fleet", c.SLOFleet, "run the slo policy with slo_fleet (forecasts in the fleet's steady state)")
	fs.StringVar(&f.sweepMargin, "sweep-margin", "", "slo_margin values (comma list in [0, 1]): each runs the slo policy with it as an extra row (\"slo margin=M\"); empty = the default only")
	fs.BoolVar(&c.NoSweep, "no-sweep", false, "skip the threshold sweep")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the synthetic workload, selection tie-breaks and engine hashes")
	fs.IntVar(&c.Parallel, "parallel", c.Parallel, "simulations run at once")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	fs.StringVar(&f.jsonOut, "json-out", "", "also write the JSON report to this file")
	fs.StringVar(&f.plots, "plots", "", "directory for SVG plots (sweep, TTFT and TPOT CDFs); empty = none")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&f.progress, "progress", false, "progress bar even for short runs (drawn only when stderr is a terminal)")
	return fs
}

// parseTuneFlags returns the run's configuration, or false after printing every problem.
func parseTuneFlags(args []string, stderr io.Writer) (*Config, *tuneFlags, bool) {
	c, f := DefaultConfig(), &tuneFlags{}
	fs := tuneFlagSet(&c, f, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, nil, false // the flag package has printed it
	}
	f.all = map[string]string{}
	fs.VisitAll(func(fl *flag.Flag) { f.all[fl.Name] = fl.Value.String() })
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("tune: unexpected arguments %q", fs.Args()))
	}
	if f.output != "table" && f.output != "json" {
		errs = append(errs, fmt.Errorf("tune: -o: %q must be table or json", f.output))
	}
	if f.sweepEff != "auto" {
		c.SweepEff = parseList(&errs, "--sweep-eff", f.sweepEff, "an integer", func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
	}
	c.SweepRatio = parseList(&errs, "--sweep-ratio", f.sweepRatio, "a number", parseFloat)
	c.SweepPrefillBusy = parseList(&errs, "--sweep-prefill-busy", f.sweepBusy, "a number", parseFloat)
	if f.sweepMargin != "" {
		c.SweepMargin = parseList(&errs, "--sweep-margin", f.sweepMargin, "a number", parseFloat)
	}
	if err := errors.Join(append(errs, c.Validate())...); err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, false
	}
	return &c, f, true
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// parseList parses a comma list of what; the ranges are Config.Validate's to check.
func parseList[T any](errs *[]error, name, text, what string, parse func(string) (T, error)) []T {
	out, bad := flaglist.Parse("tune: "+name, text, what, parse)
	*errs = append(*errs, bad...)
	return out
}

func joinNums(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

// Command is `condisagg tune` with the arguments after the command name. It returns the exit
// code: 2 for bad flags or an unreadable workload, 1 for a failed run or write, 0 otherwise.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, f, ok := parseTuneFlags(args, stderr)
	if !ok {
		return 2
	}
	w, err := Load(c)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	bar := NewBar(stderr, !f.quiet && (f.progress || len(w.Requests) >= progressMinRequests))
	rep, err := Run(ctx, c, w, Options{Progress: bar, Flags: f.all})
	bar.End(err)
	if err == nil && f.plots != "" {
		rep.Plots, err = WritePlots(f.plots, rep)
	}
	if err == nil && f.jsonOut != "" {
		err = rep.WriteJSONFile(f.jsonOut)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if f.output == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tune: write report: %v\n", err)
		return 1
	}
	return 0
}

// MatrixCommand is `condisagg matrix` with the arguments after the command name: the evaluation
// matrix of workloads × fleets × SLOs (RunMatrix). It returns the exit code as Command does.
func MatrixCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traceDir := fs.String("trace-dir", "", "folder holding mooncake/conversation_trace.jsonl and azure2023/*.csv")
	workloads := fs.String("workloads", strings.Join(MatrixWorkloadNames(), ","), "workloads: "+strings.Join(MatrixWorkloadNames(), ", "))
	fleets := fs.String("fleets", "4P4D,2P6D,6P2D", "fleet shapes")
	slos := fs.String("slos", "2s/100ms,1s/50ms,500ms/30ms", "objectives TTFT/TPOT")
	duration := fs.Duration("duration", 600*time.Second, "first arrivals of each workload kept (0 = all)")
	model := fs.String("model", sim.DefaultPerfModel, "cost model of the engines: "+strings.Join(sim.PerfModelNames(), ", ")+", or a model file (.yaml) written by condisagg calibrate")
	seed := fs.Uint64("seed", 1, "seed of the synthetic workloads, tie-breaks and engine hashes")
	parallel := fs.Int("parallel", 2, "simulations at once")
	jsonOut := fs.String("json-out", "", "write the cells as JSON to this file")
	svgOut := fs.String("svg", "", "write the heat map of the ratios to this SVG file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	margin := fs.Float64("slo-margin", policy.DefaultSLOMargin, "slo_margin of the slo policy runs, in [0, 1]")
	fleetOn := fs.Bool("slo-fleet", true, "slo_fleet of the slo policy runs (forecasts in the fleet's steady state)")
	feedback := fs.Bool("slo-feedback", false, "slo_feedback of the slo policy runs (the closed-loop corrections)")
	handoff := fs.Bool("slo-handoff", false, "slo_handoff of the slo policy runs (the handoff placement)")
	baselines := fs.String("baselines", "", "a --json-out file of an earlier run of the same matrix: simulate only the slo policy and take every baseline from it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !(*margin >= 0 && *margin <= 1) {
		fmt.Fprintf(stderr, "matrix: --slo-margin: %v must be in [0, 1]\n", *margin)
		return 2
	}
	run := MatrixRun{Seed: *seed, Flags: map[string]string{}}
	fs.VisitAll(func(fl *flag.Flag) { run.Flags[fl.Name] = fl.Value.String() })
	run.Commit, run.CommitSource = Commit(ctx)
	mc := MatrixConfig{Model: *model, Seed: *seed, Parallel: *parallel, Fleets: flaglist.Items(*fleets),
		SLOMargin: margin, SLOFeedback: *feedback, SLOHandoff: *handoff, NoSLOFleet: !*fleetOn}
	var err error
	if *baselines != "" {
		f, err := os.Open(*baselines)
		if err != nil {
			fmt.Fprintf(stderr, "matrix: --baselines: %v\n", err)
			return 2
		}
		mc.Baselines, run.BaselinesCommit, err = ReadMatrixBaselines(f, run.Flags)
		f.Close()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	if mc.SLOs, err = ParseSLOList(*slos); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, name := range flaglist.Items(*workloads) {
		w, err := MatrixWorkloadByName(name, *traceDir, *duration)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		mc.Workloads = append(mc.Workloads, w)
	}
	progress := func(done, total int, name string) {
		if !*quiet {
			fmt.Fprintf(stderr, "matrix: %d/%d %s\n", done, total, name)
		}
	}
	cells, err := RunMatrix(ctx, mc, progress)
	if err == nil {
		err = WriteMatrixText(stdout, cells)
	}
	if err == nil && *jsonOut != "" {
		err = writeWith(*jsonOut, func(w io.Writer) error { return WriteMatrixJSON(w, run, cells) })
	}
	if err == nil && *svgOut != "" {
		var b []byte
		if b, err = MatrixHeatmapSVG(cells); err == nil {
			err = os.WriteFile(*svgOut, b, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func writeWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
