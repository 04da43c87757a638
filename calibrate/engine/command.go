package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/condisagg/condisagg/calibrate"
	"github.com/condisagg/condisagg/cost"
)

const usage = `usage: condisagg calibrate --endpoint URL --model NAME -o model.yaml [--prefill-endpoint URL] [flags]

Measures one idle OpenAI-compatible engine (vLLM, vllm-sim) with decode batches, prompts sent
beside running decodes (mixed steps) and isolated prefills, fits the cost model's step-time
coefficients (t0, a1, a2, d1, d2), reads its KV capacity from /metrics and, with
--prefill-endpoint (a pd-sidecar in front of a prefill engine), measures the KV transfer to
the --endpoint engine over prompt length and fits its latency, bandwidth and bytes per token.
It writes a model file that serve (router.cost_model_file), tune, matrix and vllm-sim accept in
place of a calibration name, with an SVG of measured against fitted beside it.

`

// Command runs `condisagg calibrate`; it returns the exit code: 2 for bad flags, 1 for a
// failed run or fit, 0 otherwise.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg Config
	var minutes float64
	var out, name string
	var quiet bool
	var xfer cost.Model
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "the engine's base URL, http://host:port (aggregated or decode engine)")
	fs.StringVar(&cfg.PrefillEndpoint, "prefill-endpoint", "", "the pd-sidecar's base URL in front of a prefill engine: measure the KV transfer to --endpoint (needs NixlConnector on both engines)")
	fs.StringVar(&cfg.PrefillHost, "prefill-host", "", "the prefill engine as the sidecar's allowlist names it (x-condisagg-prefill-host; default: --prefill-endpoint's host:port)")
	fs.StringVar(&cfg.Model, "model", "", "served model name")
	fs.StringVar(&out, "o", "", "model file to write (.yaml); the SVG goes beside it")
	fs.StringVar(&name, "name", "", "name written into the model file (default: the --model name)")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", 0, "the engine's max_model_len (0 = read from /v1/models)")
	fs.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", 0, "the engine's KV blocks (0 = read vllm:cache_config_info from /metrics)")
	fs.IntVar(&cfg.BlockSize, "block-size", 16, "tokens per KV block, with --num-gpu-blocks")
	fs.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", DefaultMaxNumBatchedTokens, "the engine's --max-num-batched-tokens: must match (it bounds the mixed probes and chunks long prompts)")
	fs.IntVar(&cfg.MaxISL, "max-isl", 0, "longest prefill probe (0 = max_model_len - 1)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", DefaultMaxBatch, "most concurrent streams of a decode probe")
	fs.IntVar(&cfg.Repeats, "repeats", DefaultRepeats, "rounds of isolated and mixed prefill probes")
	fs.Float64Var(&minutes, "max-minutes", DefaultMaxDuration.Minutes(), "stop the sweep after this long and fit what was measured")
	fs.Float64Var(&cfg.MinR2, "min-r2", 0, "least R² each kind of sample must reach (0 = 0.95); lower it only for a noisy host, and say so")
	fs.Float64Var(&cfg.MaxRPS, "max-rps", DefaultMaxRPS, "average request rate cap, in bursts of at most --max-batch (0 = no cap)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the prompt tokens")
	fs.Float64Var(&xfer.BytesPerToken, "bytes-per-token", 0, "KV bytes per token for the transfer term without --prefill-endpoint (2·layers·kv_heads·head_dim·dtype bytes)")
	fs.Float64Var(&xfer.XferAlphaMS, "xfer-alpha-ms", 0.5, "fixed KV transfer latency written to the file without --prefill-endpoint")
	fs.Float64Var(&xfer.XferGBps, "xfer-gbps", 40, "KV transfer bandwidth written to the file without --prefill-endpoint")
	fs.BoolVar(&quiet, "quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.MaxDuration = time.Duration(minutes * float64(time.Minute))
	var measured []error
	if cfg.PrefillEndpoint != "" {
		// The transfer terms are measured over the P/D pair: a value given as well would be
		// silently replaced.
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "bytes-per-token", "xfer-alpha-ms", "xfer-gbps":
				measured = append(measured, fmt.Errorf("calibrate: --%s %s: measured with --prefill-endpoint; drop the flag", f.Name, f.Value))
			}
		})
	}
	if err := errors.Join(append(measured, validateFlags(cfg, fs.Args(), out, minutes, xfer))...); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if name == "" {
		name = cfg.Model
	}
	bar := newBar(stderr, !quiet)
	o, err := Run(ctx, cfg, bar)
	bar.end()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	m := ModelOf(o, name, xfer)
	if err := write(out, m, record(o, cfg, xfer), o); err != nil {
		fmt.Fprintf(stderr, "calibrate: write %s: %v\n", out, err)
		return 1
	}
	report(stdout, o, m, out)
	return 0
}

// write writes the model file and its SVG beside it.
func write(out string, m cost.Model, rec *cost.Calibration, o *Outcome) error {
	data, err := cost.NewFile(m, rec).Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return err
	}
	svg, err := Plot(o)
	if err != nil {
		return err
	}
	return os.WriteFile(svgPath(out), svg, 0o644)
}

// validateFlags reports every bad flag at once.
func validateFlags(cfg Config, rest []string, out string, minutes float64, xfer cost.Model) error {
	errs := []error{cfg.Validate()}
	if len(rest) > 0 {
		errs = append(errs, fmt.Errorf("calibrate: unexpected arguments %q", rest))
	}
	if !cost.IsFile(out) {
		errs = append(errs, fmt.Errorf("calibrate: -o %q: want the model file to write, ending in .yaml", out))
	}
	if !(minutes > 0) {
		errs = append(errs, fmt.Errorf("calibrate: --max-minutes %v: must be > 0", minutes))
	}
	if err := xfer.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// svgPath is the plot's file beside the model file: model.yaml -> model.svg.
func svgPath(out string) string {
	return strings.TrimSuffix(out, filepath.Ext(out)) + ".svg"
}

// record is the calibration section of the model file.
func record(o *Outcome, cfg Config, xfer cost.Model) *cost.Calibration {
	f := o.Fit
	rec := &cost.Calibration{Endpoint: cfg.Endpoint, ServedModel: cfg.Model, Time: time.Now().UTC().Format(time.RFC3339),
		Samples: len(o.Samples), R2: f.R2, OverheadMS: f.OverheadMS, PerTokenMS: f.OverheadPerTokenMS, Terms: map[string]cost.Quality{}, RelStdErr: map[string]float64{}}
	for k, v := range f.RelStdErr {
		rec.RelStdErr[k] = v
	}
	for k, q := range f.Families {
		rec.Terms[k.String()] = q
	}
	if t := o.Transfer; t != nil {
		rec.Samples += len(o.Transfers)
		rec.Terms[calibrate.Transfer.String()] = t.Quality
		for k, v := range t.RelStdErr {
			rec.RelStdErr[k] = v
		}
		return rec
	}
	rec.NotMeasured = []string{"xfer_alpha_ms", "xfer_gbps"}
	if xfer.BytesPerToken == 0 {
		rec.NotMeasured = append(rec.NotMeasured, "bytes_per_token")
	}
	return rec
}

// report prints the fitted coefficients and the fit quality.
func report(w io.Writer, o *Outcome, m cost.Model, out string) {
	f := o.Fit
	fmt.Fprintf(w, "calibrated %s: %d samples in %s (max_model_len %d, KV %d blocks of 16)\n",
		m.Name, len(o.Samples), o.Elapsed.Round(time.Second), o.MaxModelLen, m.NumGPUBlocks)
	if o.Cut {
		fmt.Fprintf(w, "  sweep cut by --max-minutes after %d of %d probes\n", o.ProbesDone, len(o.Probes)+len(o.TransferProbes))
	}
	for _, t := range []struct {
		name string
		v    float64
		unit string
	}{{"t0", m.T0, "ms"}, {"a1", m.A1, "ms/token"}, {"a2", m.A2, "ms/pair"}, {"d1", m.D1, "ms/seq"}, {"d2", m.D2, "ms/context token"}, {"overhead", f.OverheadMS, "ms/request (not in the model)"},
		{"overhead_per_token", f.OverheadPerTokenMS, "ms/prompt token (not in the model)"}} {
		fmt.Fprintf(w, "  %-18s %-11.4g %-34s ±%.1f%%\n", t.name, t.v, t.unit, 100*f.RelStdErr[t.name])
	}
	kinds := make([]calibrate.Kind, 0, len(f.Families))
	for k := range f.Families {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	fmt.Fprintf(w, "  R² %.4f", f.R2)
	for _, k := range kinds {
		q := f.Families[k]
		fmt.Fprintf(w, "; %s: R² %.4f, worst %.1f%% over %d", k, q.R2, 100*q.WorstRelErr, q.Samples)
	}
	fmt.Fprintln(w)
	if len(f.Outliers) > 0 {
		fmt.Fprintf(w, "  %d disturbed samples set aside\n", len(f.Outliers))
	}
	if len(f.Dropped) > 0 {
		fmt.Fprintf(w, "  fixed at 0 (not visible in this sweep): %s\n", strings.Join(f.Dropped, ", "))
	}
	if t := o.Transfer; t != nil {
		fmt.Fprintf(w, "  KV transfer over %d samples: xfer_alpha_ms %.4g ±%.1f%%, xfer_gbps %.4g ±%.1f%%, bytes_per_token %.0f; R² %.4f, worst %.1f%%\n",
			t.Quality.Samples, t.AlphaMS, 100*t.RelStdErr["xfer_alpha_ms"], t.GBps, 100*t.RelStdErr["xfer_gbps"], t.BytesPerToken, t.Quality.R2, 100*t.Quality.WorstRelErr)
		if len(t.Dropped) > 0 {
			fmt.Fprintf(w, "  fixed at 0 (not visible in the transfer sweep): %s\n", strings.Join(t.Dropped, ", "))
		}
	} else {
		fmt.Fprintf(w, "  KV transfer not measured (needs --prefill-endpoint, a P/D pair): xfer_alpha_ms %v, xfer_gbps %v, bytes_per_token %v as given\n", m.XferAlphaMS, m.XferGBps, m.BytesPerToken)
	}
	fmt.Fprintf(w, "wrote %s and %s\n", out, svgPath(out))
}

// bar is the progress line: probes done of planned. It draws only on a terminal.
type bar struct {
	w  io.Writer
	on bool
	mu sync.Mutex // guards pb
	pb *progressbar.ProgressBar
}

func newBar(w io.Writer, show bool) *bar {
	f, ok := w.(interface{ Fd() uintptr })
	return &bar{w: w, on: show && ok && term.IsTerminal(int(f.Fd()))}
}

func (b *bar) Plan(total int) {
	if !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pb = progressbar.NewOptions(total, progressbar.OptionSetWriter(b.w), progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }))
}

func (b *bar) Done(label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb == nil {
		return
	}
	b.pb.Describe(fmt.Sprintf("%-28.28s", label))
	_ = b.pb.Add(1)
}

func (b *bar) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil && !b.pb.IsFinished() && b.pb.IsStarted() {
		_ = b.pb.Exit()
	}
}
