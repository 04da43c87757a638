package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/condisagg/condisagg/calibrate"
	"github.com/condisagg/condisagg/cost"
)

// Config is one calibration run against one engine. Each field is set by the flag named in its
// comment.
type Config struct {
	Endpoint            string        // --endpoint: http://host:port of the engine (the decode engine of a P/D pair)
	PrefillEndpoint     string        // --prefill-endpoint: the pd-sidecar in front of the prefill engine ("" : no transfer sweep)
	PrefillHost         string        // --prefill-host: x-condisagg-prefill-host (default: --prefill-endpoint's host:port)
	Model               string        // --model: the served model name
	MaxModelLen         int           // --max-model-len: 0 = the engine's (/v1/models)
	NumGPUBlocks        int           // --num-gpu-blocks: 0 = the engine's (/metrics), in blocks of BlockSize
	BlockSize           int           // --block-size: with --num-gpu-blocks (default 16)
	MaxNumBatchedTokens int           // --max-num-batched-tokens: the engine's step budget
	MaxISL              int           // --max-isl: longest prefill probe (0 = max_model_len − 1)
	MaxBatch            int           // --max-batch: most concurrent streams
	Repeats             int           // --repeats: rounds of prefill probes
	MaxDuration         time.Duration // --max-minutes: the sweep stops here and fits what it has
	MaxRPS              float64       // --max-rps: average request rate cap (bursts of MaxBatch)
	Seed                uint64        // --seed: prompt tokens
	MinR2               float64       // --min-r2: each kind of sample's R² must reach it (0 = calibrate's 0.95)
	Timeout             time.Duration // per request
}

// Defaults of Config.
const (
	DefaultMaxNumBatchedTokens = 8192 // vLLM's on H100/H200 (perf-model.md §3)
	DefaultMaxBatch            = 32
	DefaultRepeats             = 2
	DefaultMaxDuration         = 15 * time.Minute
	DefaultMaxRPS              = 20
	DefaultTimeout             = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Repeats == 0 {
		c.Repeats = DefaultRepeats
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = DefaultMaxDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports every bad field by its flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag string, v any, rule string) {
		errs = append(errs, fmt.Errorf("calibrate: --%s %v: %s", flag, v, rule))
	}
	if u, err := url.Parse(c.Endpoint); c.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("endpoint", strconv.Quote(c.Endpoint), "want the engine's http://host:port")
	}
	if c.Model == "" {
		bad("model", `""`, "want the served model name")
	}
	if c.PrefillEndpoint != "" {
		if u, err := url.Parse(c.PrefillEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("prefill-endpoint", strconv.Quote(c.PrefillEndpoint), "want the pd-sidecar's http://host:port in front of the prefill engine")
		}
	}
	if c.PrefillHost != "" {
		if _, port, err := net.SplitHostPort(c.PrefillHost); err != nil || port == "" {
			bad("prefill-host", strconv.Quote(c.PrefillHost), "want host:port, as the pd-sidecar's allowlist names the prefill engine")
		}
		if c.PrefillEndpoint == "" {
			bad("prefill-host", strconv.Quote(c.PrefillHost), "needs --prefill-endpoint")
		}
	}
	for _, f := range []struct {
		flag string
		v    int
	}{{"max-model-len", c.MaxModelLen}, {"num-gpu-blocks", c.NumGPUBlocks}, {"block-size", c.BlockSize}, {"max-num-batched-tokens", c.MaxNumBatchedTokens},
		{"max-isl", c.MaxISL}, {"max-batch", c.MaxBatch}, {"repeats", c.Repeats}} {
		if f.v < 0 {
			bad(f.flag, f.v, "must be >= 0")
		}
	}
	if c.MaxBatch > 1024 {
		bad("max-batch", c.MaxBatch, "must be <= 1024")
	}
	if !(c.MinR2 >= 0 && c.MinR2 < 1) {
		bad("min-r2", c.MinR2, "must be in [0, 1) (0 = the default 0.95)")
	}
	if !(c.MaxRPS >= 0) || math.IsInf(c.MaxRPS, 0) {
		bad("max-rps", c.MaxRPS, "must be a number >= 0 (0 = no cap)")
	}
	if c.MaxDuration < 0 {
		bad("max-minutes", c.MaxDuration, "must be >= 0")
	}
	return errors.Join(errs...)
}

// Progress hears about each probe done; nil = silent.
type Progress interface {
	Plan(total int)
	Done(label string)
}

// Outcome is a run's measurements and, when they sufficed, the fit.
type Outcome struct {
	Probes  []calibrate.Probe // planned
	Samples []calibrate.Sample
	Fit     *calibrate.Result
	// The transfer sweep (with --prefill-endpoint): its probes, samples and fit; Transfer is
	// nil without it.
	TransferProbes []calibrate.Probe
	Transfers      []calibrate.TransferSample
	Transfer       *calibrate.TransferResult
	KVBlocks16     int // KV capacity in 16-token blocks
	MaxModelLen    int
	Cut            bool // the sweep was stopped by MaxDuration
	ProbesDone     int
	Elapsed        time.Duration
}

// Run reads the engine's bounds, refuses a busy engine, runs the planned probes (then, with
// PrefillEndpoint, the transfer probes) under the rate cap and the time limit, and fits the
// samples.
func Run(ctx context.Context, cfg Config, progress Progress) (*Outcome, error) {
	start := time.Now()
	cfg = cfg.withDefaults()
	// Idle connections for every stream of a decode probe, so later probes reuse them.
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.MaxBatch + 2, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	c := &client{base: strings.TrimRight(cfg.Endpoint, "/"), model: cfg.Model, http: &http.Client{Timeout: cfg.Timeout, Transport: tr}}
	mml, blocks, bs, err := bounds(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	out := &Outcome{MaxModelLen: mml, KVBlocks16: blocks * bs / 16}
	pc := calibrate.PlanConfig{MaxModelLen: out.MaxModelLen, KVTokens: blocks * bs,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxISL: cfg.MaxISL, MaxBatch: cfg.MaxBatch, Repeats: cfg.Repeats}
	if out.Probes, err = calibrate.Plan(pc); err != nil {
		return nil, err
	}
	if cfg.PrefillEndpoint != "" {
		if out.TransferProbes, err = calibrate.PlanTransfer(pc); err != nil {
			return nil, err
		}
	}
	if progress != nil {
		progress.Plan(len(out.Probes) + len(out.TransferProbes))
	}
	sweep, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	limit := rate.Inf
	if cfg.MaxRPS > 0 {
		limit = rate.Limit(cfg.MaxRPS)
	}
	r := &runner{c: c, cfg: cfg, blockSize: bs, maxModelLen: out.MaxModelLen, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), lim: rate.NewLimiter(limit, cfg.MaxBatch)}
	if cfg.PrefillEndpoint != "" {
		r.pd = sidecarClient(cfg, c)
	}
	// Two short requests first: a fresh engine's first steps (graph capture, allocator warm-up)
	// are slower than its steady ones.
	for range 2 {
		if _, err := r.prefill(sweep, prompt(r.rng, 64)); err != nil {
			return nil, err
		}
	}
	for _, p := range out.Probes {
		s, err := r.probe(sweep, p)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if sweep.Err() != nil {
				out.Cut = true
				break
			}
			return nil, fmt.Errorf("calibrate: %s probe (ISL %d, batch %d): %w", p.Kind, p.ISL, p.Batch, err)
		}
		out.Samples = append(out.Samples, s...)
		out.ProbesDone++
		if progress != nil {
			progress.Done(fmt.Sprintf("%s ISL %d ×%d", p.Kind, p.ISL, p.Batch))
		}
	}
	if err := r.transfers(ctx, sweep, out, progress); err != nil {
		return nil, err
	}
	out.Elapsed = time.Since(start)
	total := len(out.Probes) + len(out.TransferProbes)
	out.Fit, err = calibrate.Fit(out.Samples, calibrate.FitOptions{MinR2: cfg.MinR2})
	if err == nil && cfg.PrefillEndpoint != "" {
		out.Transfer, err = calibrate.FitTransfer(out.Transfers, cfg.MinR2)
		if err != nil {
			err = fmt.Errorf("calibrate: KV transfer through %s: %w", cfg.PrefillEndpoint, err)
		}
	}
	if err != nil && out.Cut {
		err = fmt.Errorf("%w (the sweep was cut by --max-minutes after %d of %d probes: allow more minutes)", err, out.ProbesDone, total)
	}
	return out, err
}

// transfers runs the transfer probes after the step-time ones, under the same rate cap and
// time limit (sweep); a cut sets out.Cut and keeps what was measured.
func (r *runner) transfers(ctx, sweep context.Context, out *Outcome, progress Progress) error {
	if out.Cut {
		return nil
	}
	for _, p := range out.TransferProbes {
		s, err := r.transfer(sweep, p)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if sweep.Err() != nil {
				out.Cut = true
				return nil
			}
			return fmt.Errorf("calibrate: transfer probe (ISL %d): %w", p.ISL, err)
		}
		out.Transfers = append(out.Transfers, s)
		out.ProbesDone++
		if progress != nil {
			progress.Done(fmt.Sprintf("transfer ISL %d", p.ISL))
		}
	}
	return nil
}

// bounds reads what the sweep must fit in (max_model_len, KV blocks and their size; flags
// first) and refuses an engine that is serving other requests.
func bounds(ctx context.Context, c *client, cfg Config) (maxModelLen, blocks, blockSize int, err error) {
	mml, err := c.maxModelLen(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	if maxModelLen = cfg.MaxModelLen; maxModelLen == 0 {
		if maxModelLen = mml; mml == 0 {
			return 0, 0, 0, fmt.Errorf("calibrate: engine %s: /v1/models gives no max_model_len for %q; pass --max-model-len", c.base, cfg.Model)
		}
	}
	blocks, blockSize = cfg.NumGPUBlocks, cfg.BlockSize
	st, merr := c.metrics(ctx)
	if blocks == 0 {
		if merr != nil {
			return 0, 0, 0, merr
		}
		blocks, blockSize = st.numGPUBlocks, st.blockSize
	}
	if st.busy > 0 {
		return 0, 0, 0, fmt.Errorf("calibrate: engine %s has %v requests running or waiting; calibrate measures step times and needs an engine with no other traffic (drain it first)", c.base, st.busy)
	}
	return maxModelLen, blocks, blockSize, nil
}

type runner struct {
	c           *client
	pd          *client // the pd-sidecar (nil without --prefill-endpoint)
	cfg         Config
	blockSize   int
	maxModelLen int
	rng         *rand.Rand
	lim         *rate.Limiter
}

// probe measures p: a prefill probe sends a fresh prompt and then the same prompt again, which
// the prefix cache serves but for its last block (two samples); a decode probe is one sample.
func (r *runner) probe(ctx context.Context, p calibrate.Probe) ([]calibrate.Sample, error) {
	if p.Kind == calibrate.Decode || p.Kind == calibrate.Mixed {
		// Streams that reached the engine far apart (a slow client or API server) leave too
		// short a steady window: run the probe again once with three times the output.
		var s calibrate.Sample
		var err error
		for attempt := range 2 {
			if attempt == 1 {
				p.OutTokens = min(3*p.OutTokens, r.maxModelLen-p.ISL-1)
			}
			if p.Kind == calibrate.Decode {
				s, err = r.decode(ctx, p)
			} else {
				s, err = r.mixed(ctx, p)
			}
			if !errors.Is(err, calibrate.ErrNoSteadyWindow) {
				break
			}
		}
		return []calibrate.Sample{s}, err
	}
	toks := prompt(r.rng, p.ISL)
	mnbt := r.cfg.MaxNumBatchedTokens
	fresh, err := r.prefill(ctx, toks)
	if err != nil {
		return nil, err
	}
	again, err := r.prefill(ctx, toks)
	if err != nil {
		return nil, err
	}
	hit := again.cached
	if hit < 0 {
		// Not reported (vLLM without --enable-prompt-tokens-details): vLLM's prefix cache hits
		// every full block, capped below the prompt's last token.
		hit = (p.ISL - 1) / r.blockSize * r.blockSize
	}
	return []calibrate.Sample{
		calibrate.PrefillSample(p.ISL, max(fresh.cached, 0), mnbt, fresh.times[0]),
		calibrate.PrefillSample(p.ISL, hit, mnbt, again.times[0]),
	}, nil
}

// prefill times one isolated prompt to its first token.
func (r *runner) prefill(ctx context.Context, toks []int) (streamed, error) {
	if err := r.lim.Wait(ctx); err != nil {
		return streamed{}, err
	}
	return r.c.stream(ctx, time.Now(), toks, 1, nil)
}

// mixed starts the probe's background streams, sends its prompt once every stream has
// produced calibrate.MixedLead tokens, and lets the streams run until each has produced
// mixedTail tokens after the prompt's first token; then it ends them (the engine aborts a
// request whose client went away) and reads the window that holds the prompt's step. However
// long the prompt's handling takes before it reaches the engine, the streams are still running.
func (r *runner) mixed(ctx context.Context, p calibrate.Probe) (calibrate.Sample, error) {
	if err := r.lim.WaitN(ctx, p.Batch+1); err != nil {
		return calibrate.Sample{}, fmt.Errorf("request rate cap: %w", err)
	}
	const bgISL, mixedTail = 64, 8
	bgOut := min(4096, r.maxModelLen-bgISL-1)
	lens := make([]int, p.Batch)
	times := make([][]time.Duration, p.Batch) // written only by stream i's goroutine until Wait
	counts := make([]atomic.Int64, p.Batch)
	stopAt := make([]atomic.Int64, p.Batch)
	ready := make(chan struct{}, p.Batch)
	tailDone := make(chan struct{}, p.Batch)
	origin := time.Now()
	bgCtx, stopBG := context.WithCancel(ctx)
	defer stopBG()
	g, gctx := errgroup.WithContext(ctx)
	bg, _ := errgroup.WithContext(bgCtx)
	for i := range lens {
		lens[i] = bgISL
		stopAt[i].Store(math.MaxInt64)
		toks := prompt(r.rng, bgISL)
		bg.Go(func() error {
			_, err := r.c.stream(bgCtx, origin, toks, bgOut, func(n int, at time.Duration) {
				times[i] = append(times[i], at)
				counts[i].Store(int64(n))
				switch {
				case n == calibrate.MixedLead:
					ready <- struct{}{}
				case int64(n) == stopAt[i].Load():
					tailDone <- struct{}{}
				}
			})
			if bgCtx.Err() != nil {
				return nil // ended by us after the tail
			}
			if err == nil {
				err = errors.New("a background stream ended before the prompt ran beside it")
			}
			stopBG()
			return err
		})
	}
	var first time.Duration
	g.Go(func() error {
		for range p.Batch {
			select {
			case <-ready:
			case <-gctx.Done():
				return gctx.Err()
			case <-bgCtx.Done():
				return errors.New("a background stream ended before the prompt was sent")
			}
		}
		s, err := r.c.stream(gctx, origin, prompt(r.rng, p.ISL), 1, nil)
		if err != nil {
			return err
		}
		first = s.times[0]
		for i := range stopAt {
			stopAt[i].Store(counts[i].Load() + mixedTail)
		}
		return nil
	})
	werr := g.Wait()
	if werr == nil {
		// Each stream reports its tail once; a stream already past its mark reports nothing.
		waitTail(bgCtx, tailDone, p.Batch, counts, stopAt)
	}
	stopBG()
	if err := bg.Wait(); err != nil {
		return calibrate.Sample{}, err
	}
	if werr != nil {
		return calibrate.Sample{}, werr
	}
	for i := range times {
		times[i] = times[i][:min(len(times[i]), int(stopAt[i].Load()))]
	}
	return calibrate.MixedSample(p.ISL, lens, times, first)
}

// waitTail waits until every background stream has passed its stop mark.
func waitTail(ctx context.Context, tailDone <-chan struct{}, n int, counts, stopAt []atomic.Int64) {
	for {
		passed := 0
		for i := range n {
			if counts[i].Load() >= stopAt[i].Load() {
				passed++
			}
		}
		if passed == n {
			return
		}
		select {
		case <-tailDone:
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// decode sends the probe's streams together (as the rate cap allows) and reads the steady
// window of their token times.
func (r *runner) decode(ctx context.Context, p calibrate.Probe) (calibrate.Sample, error) {
	if err := r.lim.WaitN(ctx, p.Batch); err != nil {
		return calibrate.Sample{}, fmt.Errorf("request rate cap: %w", err)
	}
	prompts := make([][]int, p.Batch)
	lens := make([]int, p.Batch)
	for i := range prompts {
		prompts[i], lens[i] = prompt(r.rng, p.ISL), p.ISL
	}
	times := make([][]time.Duration, p.Batch)
	origin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i := range prompts {
		g.Go(func() error {
			var err error
			s, err := r.c.stream(gctx, origin, prompts[i], p.OutTokens, nil)
			times[i] = s.times
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return calibrate.Sample{}, err
	}
	s, err := calibrate.DecodeSample(lens, times)
	if errors.Is(err, calibrate.ErrNoSteadyWindow) {
		err = fmt.Errorf("%w (the streams started too far apart: lower --max-batch or raise --max-rps)", err)
	}
	return s, err
}

// ModelOf is the cost model of a finished run: the fitted step-time terms, the KV capacity
// read from the engine, and the transfer terms measured over a P/D pair or, without one, given
// (xfer).
func ModelOf(o *Outcome, name string, xfer cost.Model) cost.Model {
	m := o.Fit.Model
	m.Name = name
	m.NumGPUBlocks = o.KVBlocks16
	m.BytesPerToken, m.XferAlphaMS, m.XferGBps = xfer.BytesPerToken, xfer.XferAlphaMS, xfer.XferGBps
	if t := o.Transfer; t != nil {
		m.BytesPerToken, m.XferAlphaMS, m.XferGBps = t.BytesPerToken, t.AlphaMS, t.GBps
	}
	return m
}

func trimSlash(s string) string { return strings.TrimRight(s, "/") }
