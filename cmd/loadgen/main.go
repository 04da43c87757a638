// Command loadgen replays a workload (Mooncake trace, Azure trace or a synthetic generator of
// package workload) against a live OpenAI-compatible /v1/completions endpoint — typically
// Envoy in front of condisagg and simulated workers — with concurrency and rate limits,
// measures TTFT, TPOT and token gaps from the SSE streams, and prints the summary table of
// package workload (or JSON with -o json).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type flags struct {
	run                 runConfig
	trace, azure, synth string
	seed                uint64
	window              workload.Window
	timeScale           float64
	inputScale          float64 // workload.ScaleLengths factors
	outputScale         float64
	slo                 workload.SLO
	steady              workload.SteadyState
	output, name        string
	azurePrefixGroups   int
	azurePrefixTokens   int
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	var vocab, slo string
	var vocabSeed uint64
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.run.url, "url", "http://127.0.0.1:10000/v1/completions", "completions endpoint")
	fs.StringVar(&f.run.model, "model", "model", "model name sent in every request")
	fs.StringVar(&f.trace, "trace", "", "Mooncake JSONL trace file")
	fs.StringVar(&f.azure, "azure", "", "Azure 2023 CSV trace file (no shared prefixes)")
	fs.StringVar(&f.synth, "synthetic", "", "synthetic workload: "+strings.Join(workload.SyntheticNames(), ", "))
	fs.IntVar(&f.azurePrefixGroups, "azure-prefix-groups", 0, "with --azure: number of synthetic shared prefixes (0: none)")
	fs.IntVar(&f.azurePrefixTokens, "azure-prefix-tokens", 0, "with --azure: length of each synthetic shared prefix")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic generator")
	fs.StringVar(&vocab, "vocab", fmt.Sprintf("%d,%d", workload.DefaultVocabLo, workload.DefaultVocabHi), "token id range LO,HI (ids in [LO, HI))")
	fs.Uint64Var(&vocabSeed, "vocab-seed", 0, "pseudo-token namespace seed")
	fs.IntVar(&f.window.MaxRequests, "max-requests", 0, "replay only the first N requests (0: all)")
	fs.DurationVar(&f.window.Duration, "duration", 0, "replay only requests arriving in the first D of the trace (trace time; 0: all)")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "multiply arrival and think times by this (0.5 replays twice as fast)")
	fs.Float64Var(&f.inputScale, "input-scale", 1, "multiply prompt lengths by this, in (0, 1] (shared prefixes stay shared; 0.0625 makes a 512-token trace block 32)")
	fs.Float64Var(&f.outputScale, "output-scale", 1, "multiply output lengths by this, in (0, 1]")
	fs.IntVar(&f.run.concurrency, "concurrency", 64, "most requests in flight")
	fs.Float64Var(&f.run.rate, "rate", 0, "most requests started per second (0: no limit)")
	fs.BoolVar(&f.run.closedLoop, "closed-loop", false, "send a session's next turn its think time after the previous turn completes")
	fs.DurationVar(&f.run.requestTimeout, "request-timeout", 10*time.Minute, "limit per request")
	fs.StringVar(&slo, "slo", "ttft=2s,tpot=100ms", "SLO for attainment and goodput")
	fs.DurationVar(&f.steady.Warmup, "warmup", 0, "exclude requests sent in the first D from goodput")
	fs.DurationVar(&f.steady.Drain, "drain", 0, "exclude requests sent in the last D from goodput")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	fs.StringVar(&f.name, "name", "loadgen", "row label in the table")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	f.run.maxGaps = 1 << 16
	return f, f.check(fs.Args(), vocabSeed, vocab, slo)
}

// check parses the compound flags into f and returns every problem at once.
func (f *flags) check(extra []string, vocabSeed uint64, vocab, slo string) error {
	var errs []error
	if len(extra) > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", extra))
	}
	if n := countSet(f.trace, f.azure, f.synth); n != 1 {
		errs = append(errs, fmt.Errorf("--trace, --azure, --synthetic: %d given, want exactly one", n))
	}
	var err error
	if f.run.vocab, err = parseVocab(vocabSeed, vocab); err != nil {
		errs = append(errs, err)
	}
	if f.slo, err = workload.ParseSLO(slo); err != nil {
		errs = append(errs, fmt.Errorf("--slo: %w", err))
	}
	if f.run.concurrency < 1 {
		errs = append(errs, fmt.Errorf("--concurrency: %d must be at least 1", f.run.concurrency))
	}
	if f.run.rate < 0 {
		errs = append(errs, fmt.Errorf("--rate: %v must be >= 0", f.run.rate))
	}
	if !(f.timeScale > 0) {
		errs = append(errs, fmt.Errorf("--time-scale: %v must be > 0", f.timeScale))
	}
	if !(f.inputScale > 0 && f.inputScale <= 1) {
		errs = append(errs, fmt.Errorf("--input-scale: %v must be in (0, 1]", f.inputScale))
	}
	if !(f.outputScale > 0 && f.outputScale <= 1) {
		errs = append(errs, fmt.Errorf("--output-scale: %v must be in (0, 1]", f.outputScale))
	}
	if f.run.requestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--request-timeout: %v must be > 0", f.run.requestTimeout))
	}
	if f.output != "table" && f.output != "json" {
		errs = append(errs, fmt.Errorf("-o: %q must be table or json", f.output))
	}
	return errors.Join(errs...)
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

func parseVocab(seed uint64, s string) (workload.Vocab, error) {
	lo, hi, ok := strings.Cut(s, ",")
	l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	h, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return workload.Vocab{}, fmt.Errorf("--vocab: %q must be LO,HI", s)
	}
	v, err := workload.NewVocab(seed, uint32(l), uint32(h))
	if err != nil {
		return v, fmt.Errorf("--vocab: %w", err)
	}
	return v, nil
}

// load reads or generates the workload, sliced and time-scaled.
func load(f *flags) ([]workload.Request, error) {
	var reqs []workload.Request
	var err error
	switch {
	case f.trace != "":
		reqs, err = readFile(f.trace, func(r io.Reader) ([]workload.Request, error) {
			return workload.ReadMooncake(r, workload.MooncakeOptions{}, f.window)
		})
	case f.azure != "":
		reqs, err = readFile(f.azure, func(r io.Reader) ([]workload.Request, error) {
			return workload.ReadAzure(r, workload.AzureOptions{Seed: f.seed, PrefixGroups: f.azurePrefixGroups, PrefixTokens: f.azurePrefixTokens}, f.window)
		})
	default:
		reqs, err = workload.Synthetic(f.synth, f.seed)
		reqs = f.window.Apply(reqs)
	}
	if err != nil {
		return nil, err
	}
	if f.inputScale != 1 || f.outputScale != 1 {
		if reqs, err = workload.ScaleLengths(reqs, f.inputScale, f.outputScale); err != nil {
			return nil, err
		}
	}
	return workload.ScaleRate(reqs, 1/f.timeScale)
}

func readFile(path string, read func(io.Reader) ([]workload.Request, error)) ([]workload.Request, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return read(fh)
}

// report is the -o json document.
type report struct {
	Summary workload.Summary
	ByISL   []workload.Summary           // per prompt-length bucket
	SendLag workload.Dist[time.Duration] // send time − scheduled time
	Errors  []string                     // up to 10 distinct failure messages
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	reqs, err := load(&f)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errors.New("the workload has no requests")
	}
	for i := range reqs {
		if reqs[i].Index != i {
			return fmt.Errorf("request %d has index %d: the workload must be numbered in order", i, reqs[i].Index)
		}
	}
	transport := &http.Transport{MaxIdleConnsPerHost: f.run.concurrency, DisableCompression: true}
	defer transport.CloseIdleConnections()
	rn := newRunner(f.run, &http.Client{Transport: transport}, len(reqs))
	results, lags := rn.run(ctx, reqs)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadgen: interrupted; the report covers the requests measured so far")
	}
	rep := report{Summary: workload.Summarize(f.name, results, f.slo, f.steady), SendLag: workload.NewDist(lags), Errors: firstErrors(results, 10),
		ByISL: workload.SummarizeByISL(f.name, results, f.slo, f.steady, workload.ISLBuckets())}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeReport(stdout, &rep)
}

func firstErrors(results []workload.Result, n int) []string {
	var out []string
	for i := range results {
		if e := results[i].Err; e != "" && len(out) < n && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

func writeReport(w io.Writer, rep *report) error {
	s := &rep.Summary
	if err := workload.WriteSummaries(w, append([]workload.Summary{*s}, rep.ByISL...)); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nslo %s  window %s  failed %d  send lag p99 %s\n", s.SLO, s.Window.Round(time.Millisecond), s.Failed, rep.SendLag.P99.Round(time.Millisecond))
	t := workload.Table{Header: []string{"route", "reason", "requests"}}
	for _, k := range sortedKeys(s.Routes) {
		name := k
		if name == "" {
			name = "(no decision header)"
		}
		t.Rows = append(t.Rows, []string{name, "", strconv.Itoa(s.Routes[k])})
	}
	for _, k := range sortedKeys(s.Reasons) {
		t.Rows = append(t.Rows, []string{"", k, strconv.Itoa(s.Reasons[k])})
	}
	fmt.Fprintln(w)
	if err := t.Write(w); err != nil {
		return err
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
