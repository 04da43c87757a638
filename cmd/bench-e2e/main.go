package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/internal/flaglist"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/workload"
)

// demoDisagg is the default router policy: conditional disaggregation with Dynamo's default
// ISL thresholds, the prefill-load signal and the decode-busy guard (as cmd/demo).
const demoDisagg = `{"policy":"isl_or_load","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7,` +
	`"prefill_busy_threshold":2.0,"decode_busy_threshold":0.8}`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e:", err)
		os.Exit(1)
	}
}

type options struct {
	synthetic, trace string
	seed             uint64
	requests         int
	shape            string
	prefill, decode  int
	timeScales       []float64
	numGPUBlocks     int
	mnbt             int
	disagg           string
	queueThreshold   float64
	eventDelay       time.Duration // simulated
	concurrency      int
	timeout          time.Duration // whole run, wall clock
	tolerance        float64
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench-e2e", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.synthetic, "synthetic", "llm-d-b2b", "synthetic workload: "+fmt.Sprint(workload.SyntheticNames()))
	fs.StringVar(&o.trace, "trace", "", "Mooncake JSONL trace: replay its first --requests requests instead of --synthetic")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic generator and of the simulator")
	fs.IntVar(&o.requests, "requests", 60, "length of the slice (leading requests)")
	fs.StringVar(&o.shape, "cluster", "1P2D", "fleet shape (prefill and decode workers)")
	scales := fs.String("time-scale", "1,10", "comma-separated time scales: the live workers run this many times faster than real time, one fresh stack per scale")
	fs.IntVar(&o.numGPUBlocks, "num-gpu-blocks", 16384, "KV capacity of every worker (blocks of 16 tokens)")
	fs.IntVar(&o.mnbt, "max-num-batched-tokens", 8192, "token budget per step of every worker (vllm-sim's default)")
	fs.StringVar(&o.disagg, "disagg", demoDisagg, "--router-conditional-disagg-config JSON")
	fs.Float64Var(&o.queueThreshold, "queue-threshold", 2, "router queue_threshold (0 = unset)")
	fs.DurationVar(&o.eventDelay, "event-delay", 0, "simulator: KV event delay in simulated time")
	fs.IntVar(&o.concurrency, "concurrency", 256, "loadgen: most requests in flight")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound of the whole run (wall clock)")
	fs.Float64Var(&o.tolerance, "tolerance", DefaultTolerance, "relative difference counted as agreement")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	var err error
	if o.prefill, o.decode, err = cluster.ParseShape(o.shape); err != nil {
		errs = append(errs, fmt.Errorf("--cluster: %w", err))
	}
	if o.timeScales, err = parseScales(*scales); err != nil {
		errs = append(errs, err)
	}
	if o.requests < 1 {
		errs = append(errs, fmt.Errorf("--requests: %d must be at least 1", o.requests))
	}
	if o.numGPUBlocks < 1 || o.mnbt < 1 {
		errs = append(errs, fmt.Errorf("--num-gpu-blocks %d, --max-num-batched-tokens %d: must be at least 1", o.numGPUBlocks, o.mnbt))
	}
	if o.concurrency < 1 {
		errs = append(errs, fmt.Errorf("--concurrency: %d must be at least 1", o.concurrency))
	}
	if o.timeout <= 0 || o.tolerance <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v, --tolerance %v: must be > 0", o.timeout, o.tolerance))
	}
	return o, errors.Join(errs...)
}

// parseScales parses "1,10" into time scales, each > 0.
func parseScales(s string) ([]float64, error) {
	out, errs := flaglist.Parse("--time-scale", s, "a number > 0", func(v string) (float64, error) {
		x, err := strconv.ParseFloat(v, 64)
		if err == nil && (!(x > 0) || math.IsInf(x, 0)) {
			err = errors.New("out of range")
		}
		return x, err
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--time-scale: %q lists no time scale", s)
	}
	return out, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	reqs, err := slice(&o)
	if err != nil {
		return err
	}
	simRep, simSum, err := simulate(ctx, &o, reqs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "slice: %s, %d requests over %s of trace time; fleet %s\n",
		sliceName(&o), len(reqs), reqs[len(reqs)-1].Arrival.Round(time.Millisecond), o.shape)
	fmt.Fprintf(out, "simulator: span %s, %d steps, done in %.1fs wall\n", simRep.Span.Round(time.Millisecond), simRep.Steps, time.Since(start).Seconds())
	dir, err := os.MkdirTemp("", "condisagg-bench-e2e-")
	if err != nil {
		return fmt.Errorf("bench-e2e: scratch directory: %w", err)
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(out, "building condisagg, vllm-sim, pd-sidecar, loadgen ...")
	tl, err := build(ctx, dir)
	if err != nil {
		return err
	}
	var runs []scaleRun
	for i, scale := range o.timeScales {
		lv, err := runLive(ctx, &o, tl, filepath.Join(dir, fmt.Sprintf("run%d", i)), scale, out)
		if err != nil {
			return err
		}
		overshoot := timerOvershoot(ctx, time.Duration(float64(simSum.Gap.Mean)/scale), timerSamples)
		r, err := report(out, &o, scale, lv, &simSum, overshoot)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	return writeVerdict(out, &o, runs, time.Since(start))
}

// report prints one time scale's comparison, routes and overhead split.
func report(out io.Writer, o *options, scale float64, lv *liveResult, simSum *workload.Summary, overshoot time.Duration) (scaleRun, error) {
	liveSum := toSimulatedSummary(lv.summary, scale)
	fmt.Fprintf(out, "\n== time scale %g: %d requests, %d completed, %d failed; send lag p99 %s wall\n",
		scale, lv.summary.Requests, lv.summary.Completed, lv.summary.Failed, lv.report.SendLag.duration().P99.Round(time.Microsecond))
	for _, e := range lv.report.Errors {
		fmt.Fprintln(out, "live error:", e)
	}
	rows := compareRows(&liveSum, simSum)
	if _, err := writeComparison(out, rows, o.tolerance); err != nil {
		return scaleRun{}, err
	}
	fmt.Fprintln(out)
	writeRoutes(out, &liveSum, simSum)
	fmt.Fprintln(out)
	r := newScaleRun(scale, rows, o.tolerance, &liveSum, simSum, lv.engine.itlMean(), lv.summary.Failed)
	r.TimerWall = overshoot
	writeOverhead(out, &r, lv.wall)
	return r, nil
}

func sliceName(o *options) string {
	if o.trace != "" {
		return "trace " + o.trace
	}
	return fmt.Sprintf("synthetic %s seed %d", o.synthetic, o.seed)
}
