package tune

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// Config is one tune run. Each field is set by the `condisagg tune` flag named in its comment,
// and Validate names a problem by that flag, since that is what the user typed.
type Config struct {
	Trace     string        // --trace: Mooncake JSONL file; exactly one of Trace and Synthetic
	Synthetic string        // --synthetic: one of workload.SyntheticNames
	Requests  int           // --requests: keep only the first N requests (0 = all)
	Duration  time.Duration // --duration: keep only requests arriving within this time (0 = all)
	RateScale float64       // --rate-scale: multiply the arrival rate

	Cluster             string        // --cluster: fleet shape <prefill>P<decode>D
	Model               string        // --model: one of sim.PerfModelNames, or a model file (.yaml) of `condisagg calibrate`
	MaxNumBatchedTokens int           // --max-num-batched-tokens
	MaxNumSeqs          int           // --max-num-seqs
	NumGPUBlocks        int           // --num-gpu-blocks (0 = the model's)
	EventDelay          time.Duration // --event-delay: KV events reach the router's index this late

	SLO           string        // --slo: workload.ParseSLO syntax
	Warmup, Drain time.Duration // --warmup, --drain: arrivals excluded from goodput

	PrefillBusyThreshold float64 // --prefill-busy-threshold: θp, a multiple of mnbt
	DecodeBusyThreshold  float64 // --decode-busy-threshold: θd, a fraction of KV capacity; < 0 = off

	SweepPolicy      policy.Kind // --sweep-policy: isl_bounding or isl_or_load
	SweepEff         []int64     // --sweep-eff: eff_isl_threshold values; nil = 512…4096 and the quartiles of eff
	SweepRatio       []float64   // --sweep-ratio: eff_isl_ratio_threshold values tried at the best T
	SweepMargin      []float64   // --sweep-margin: slo_margin values, each an slo row beside the default
	SweepPrefillBusy []float64   // --sweep-prefill-busy: θp values tried with isl_or_load at the best (T, R)
	NoSweep          bool        // --no-sweep
	// SLOFleet is --slo-fleet: the slo policy runs with slo_fleet (its steady-state forecast);
	// DefaultConfig sets it, as the policy's default does.
	SLOFleet bool
	// RoleAdvice is --role-advice: also run always-disaggregated, isl_or_load and the slo policy
	// on every prefill:decode split of the fleet's GPUs (and aggregated on all of them), search
	// the fewest GPUs on which the slo policy serves the best goodput found, and check the live
	// analytic advice against the splits (roles.go).
	RoleAdvice bool
	// RoleTolerance is --role-tolerance: how far below the best goodput a smaller fleet, or the
	// analytic advice's split, may serve and still count as serving it.
	RoleTolerance float64
	// Shadow is --shadow: a candidate policy object (JSON, as --router-conditional-disagg-config)
	// replayed beside every conditional mode without routing; the report counts its agreement.
	Shadow string
	// SessionAffinity, SessionTTL and MaxSessions are --session-affinity, --session-ttl and
	// --max-sessions: the router's soft session affinity in every run (route.SessionConfig).
	SessionAffinity bool
	SessionTTL      time.Duration
	MaxSessions     int

	Seed     uint64 // --seed: synthetic workload, selection tie-breaks and engine hashes
	Parallel int    // --parallel: simulations run at once
}

// DefaultConfig is the configuration `condisagg tune` starts from; its flags show these values
// as their defaults.
func DefaultConfig() Config {
	return Config{
		RateScale: 1, Cluster: "4P4D", Model: sim.DefaultPerfModel,
		MaxNumBatchedTokens: sim.DefaultMaxNumBatchedTokens, MaxNumSeqs: sim.DefaultMaxNumSeqs,
		SLO: "ttft=2s,tpot=100ms", PrefillBusyThreshold: cluster.DefaultPrefillBusyThreshold,
		DecodeBusyThreshold: -1, RoleTolerance: 0.02, SLOFleet: true, SweepPolicy: policy.ISLBounding,
		SweepRatio: []float64{0.5, 0.9, 1.0}, SweepPrefillBusy: []float64{1, 2, 4, 8},
		Seed: 1, Parallel: 1,
	}
}

// maxParallel bounds --parallel: every simulation holds a whole fleet's KV state in memory.
const maxParallel = 64

// plan is what a valid Config resolves to.
type plan struct {
	base  cluster.Config // Prefill/Decode/Engine/EventDelay/Seed; Mode and Disagg per run
	shape string
	slo   workload.SLO
	ss    workload.SteadyState
	// shadow is the parsed --shadow candidate (nil: none).
	shadow *policy.Disagg
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve validates c and parses its composite fields.
func (c *Config) resolve() (*plan, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("tune: "+format, a...)) }
	p := &plan{shape: strings.ToUpper(c.Cluster), ss: workload.SteadyState{Warmup: c.Warmup, Drain: c.Drain}}
	np, nd, err := cluster.ParseShape(c.Cluster)
	if err != nil {
		bad("--cluster: %v", err)
	} else if np < 1 {
		bad("--cluster: %q needs at least one prefill worker", c.Cluster)
	}
	m, err := sim.ResolvePerfModel(c.Model, os.ReadFile)
	if err != nil {
		bad("--model: %v", err)
	}
	if p.slo, err = workload.ParseSLO(c.SLO); err != nil {
		bad("--slo: %v", err)
	}
	if !(c.RoleTolerance >= 0 && c.RoleTolerance < 1) {
		bad("--role-tolerance: %v must be in [0, 1)", c.RoleTolerance)
	}
	if c.Parallel < 1 || c.Parallel > maxParallel {
		bad("--parallel: %d must be in [1, %d]", c.Parallel, maxParallel)
	}
	if !(c.RateScale > 0) || math.IsInf(c.RateScale, 0) {
		bad("--rate-scale: %v must be > 0", c.RateScale)
	}
	if !(c.PrefillBusyThreshold >= 0) {
		bad("--prefill-busy-threshold: %v must be >= 0", c.PrefillBusyThreshold)
	}
	if c.SweepPolicy != policy.ISLBounding && c.SweepPolicy != policy.ISLOrLoad {
		bad("--sweep-policy: %q must be isl_bounding or isl_or_load (prefill_load has no ISL threshold)", c.SweepPolicy)
	}
	for _, n := range c.SweepEff {
		if n < 0 {
			bad("--sweep-eff: %d must be >= 0", n)
		}
	}
	for _, m := range c.SweepMargin {
		if !(m >= 0 && m <= 1) {
			bad("--sweep-margin: %v must be in [0, 1]", m)
		}
	}
	for _, r := range c.SweepRatio {
		if !(r >= 0 && r <= 1) {
			bad("--sweep-ratio: %v must be in [0, 1]", r)
		}
	}
	for _, b := range c.SweepPrefillBusy {
		if !(b >= 0) || math.IsInf(b, 0) {
			bad("--sweep-prefill-busy: %v must be a number >= 0", b)
		}
	}
	if c.Shadow != "" {
		d, err := policy.ParseDisagg([]byte(c.Shadow))
		if err != nil {
			bad("--shadow: %v", err)
		} else {
			p.shadow = &d
		}
	}
	if (c.Trace == "") == (c.Synthetic == "") {
		bad("exactly one of --trace and --synthetic is required")
	}
	if c.SessionTTL < 0 || c.MaxSessions < 0 {
		bad("--session-ttl %s and --max-sessions %d must be >= 0 (0: the default)", c.SessionTTL, c.MaxSessions)
	}
	p.base = cluster.Config{Prefill: np, Decode: nd, EventDelay: c.EventDelay, Seed: c.Seed,
		Sessions: route.SessionConfig{Enabled: c.SessionAffinity, TTL: c.SessionTTL, Max: c.MaxSessions},
		Engine:   sim.Config{Model: m, MaxNumBatchedTokens: c.MaxNumBatchedTokens, MaxNumSeqs: c.MaxNumSeqs, NumGPUBlocks: c.NumGPUBlocks}}
	if err := p.base.Engine.Validate(); err != nil {
		bad("engine: %v", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Workload is the request stream of a run and the name the report gives it.
type Workload struct {
	Name     string
	Requests []workload.Request
}

// Load reads the trace or generates the synthetic workload of c, then applies the window and
// the rate scale.
func Load(c *Config) (*Workload, error) {
	win := workload.Window{MaxRequests: c.Requests, Duration: c.Duration}
	w := &Workload{}
	var err error
	switch {
	case c.Trace != "":
		w.Name = filepath.Base(c.Trace)
		fh, err := os.Open(c.Trace)
		if err != nil {
			return nil, fmt.Errorf("tune: open trace: %w", err)
		}
		defer fh.Close()
		if strings.HasSuffix(strings.ToLower(c.Trace), ".csv") { // Azure LLM inference trace 2023
			w.Requests, err = workload.ReadAzure(fh, workload.AzureOptions{Seed: c.Seed}, win)
		} else {
			w.Requests, err = workload.ReadMooncake(fh, workload.MooncakeOptions{}, win)
		}
		if err != nil {
			return nil, fmt.Errorf("tune: read trace %s: %w", c.Trace, err)
		}
	case c.Synthetic != "":
		w.Name = "synthetic " + c.Synthetic
		if w.Requests, err = workload.Synthetic(c.Synthetic, c.Seed); err != nil {
			return nil, fmt.Errorf("tune: --synthetic: %w", err)
		}
		w.Requests = win.Apply(w.Requests)
	default:
		return nil, errors.New("tune: exactly one of --trace and --synthetic is required")
	}
	if c.RateScale != 1 {
		if w.Requests, err = workload.ScaleRate(w.Requests, c.RateScale); err != nil {
			return nil, fmt.Errorf("tune: --rate-scale %v: %w", c.RateScale, err)
		}
	}
	if len(w.Requests) == 0 {
		return nil, fmt.Errorf("tune: workload %s has no requests", w.Name)
	}
	return w, nil
}
