package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// Mode is a routing mode of the simulated router.
type Mode string

const (
	// Aggregated runs every request on one decode worker (no prefill pool; KV-aware selection,
	// reason no_prefill_workers).
	Aggregated Mode = "aggregated"
	// Disaggregated always prefills remotely (feature off, reason remote_disabled).
	Disaggregated Mode = "disaggregated"
	// Conditional runs conditional disaggregation with Config.Disagg.
	Conditional Mode = "conditional"
)

// DefaultPrefillBusyThreshold is θp when neither Disagg.PrefillBusyThreshold nor QueueThreshold
// is set and a load policy needs one: busy above 2·mnbt queued uncached tokens (perf-model.md §5).
const DefaultPrefillBusyThreshold = 2.0

// Config describes one simulated fleet and its router.
type Config struct {
	Prefill, Decode int // number of prefill and decode engines
	// Engine is the template of every engine (block size, KV capacity, token budget, cost
	// model); Seed and Events are set per engine.
	Engine sim.Config
	Mode   Mode
	// Disagg is --router-conditional-disagg-config for Mode Conditional (see policy.DefaultDisagg).
	Disagg policy.Disagg
	// Shadow is a candidate policy object that decides beside the router's on every request
	// without routing (route.Router.SetShadow); Report.Shadow holds the agreement. nil: none.
	Shadow *policy.Disagg
	// QueueThreshold is --router-queue-threshold; a load policy with neither it nor
	// Disagg.PrefillBusyThreshold set uses DefaultPrefillBusyThreshold.
	QueueThreshold policy.Threshold
	// Selection are the worker-selection knobs; the zero value means policy.DefaultSelection.
	Selection policy.Selection
	// Sessions is the router's soft session affinity (off in the zero value): requests of one
	// workload session (workload.Request.Session >= 0) name it as extproc's session headers do.
	Sessions route.SessionConfig
	// RequestOverhead is each engine's own handling of a request before its scheduler sees it
	// (vLLM's API server: HTTP, JSON, the prompt's token array, the output processor's set-up):
	// every leg (a whole request; the prefill leg and then the decode leg of a remote prefill)
	// reaches its engine this long after it is routed. `condisagg calibrate` measures it
	// (cost.Calibration.OverheadMS) but keeps it out of the step model. 0: none.
	RequestOverhead time.Duration
	// EventDelay delays each engine's KV events before the index sees them (0 = at the end of the
	// step that produced them).
	EventDelay time.Duration
	// Seed seeds the selection tie-breaks and the engines' block hashes.
	Seed uint64
	// Vocab expands the workload's segments into tokens; the zero value means
	// workload.DefaultVocab.
	Vocab workload.Vocab
	// LoRAAdapters are the adapters every engine of the first model serves beside the base
	// model (vLLM --lora-modules); Options.Model names a request's.
	LoRAAdapters []string
	// Models names the served models when there are several, as serve's `models` list: each
	// model gets its own fleet of Prefill and Decode engines, with its own pool and prefix
	// index, and Options.Model selects a request's (a name no model serves fails that
	// request as the server refuses it). Empty: one unnamed model that takes every name.
	Models []string
}

// maxModels bounds Config.Models: each model is a whole fleet.
const maxModels = 8

// ParseShape parses a fleet shape such as "4P4D" (prefill and decode engine counts).
func ParseShape(s string) (prefill, decode int, err error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	p, d, ok := strings.Cut(u, "P")
	if !ok || !strings.HasSuffix(d, "D") {
		return 0, 0, fmt.Errorf("cluster: shape %q must look like 4P4D", s)
	}
	prefill, err1 := strconv.Atoi(p)
	decode, err2 := strconv.Atoi(strings.TrimSuffix(d, "D"))
	if err1 != nil || err2 != nil || prefill < 0 || decode < 1 || prefill > 256 || decode > 256 {
		return 0, 0, fmt.Errorf("cluster: shape %q must be <0..256>P<1..256>D", s)
	}
	return prefill, decode, nil
}

// withDefaults fills the zero values that are never meaningful.
func (c Config) withDefaults() Config {
	if c.Selection == (policy.Selection{}) {
		c.Selection = policy.DefaultSelection()
	}
	if c.Vocab == (workload.Vocab{}) {
		c.Vocab = workload.DefaultVocab()
	}
	if c.Mode == "" {
		c.Mode = Conditional
	}
	if c.Mode == Conditional && c.Disagg.Policy == "" {
		c.Disagg = policy.DefaultDisagg()
	}
	return c
}

// Validate returns every problem of c (after defaults), joined, in field/value/rule form.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, fmt.Errorf("cluster config: %s: %s %s", field, value, rule))
	}
	switch c.Mode {
	case Aggregated:
		if c.Prefill != 0 {
			bad("prefill", strconv.Itoa(c.Prefill), "must be 0 in aggregated mode")
		}
	case Disaggregated, Conditional:
		if c.Prefill < 1 {
			bad("prefill", strconv.Itoa(c.Prefill), "must be >= 1 in "+string(c.Mode)+" mode")
		}
	default:
		bad("mode", strconv.Quote(string(c.Mode)), "must be one of aggregated, disaggregated, conditional")
	}
	if c.Decode < 1 {
		bad("decode", strconv.Itoa(c.Decode), "must be >= 1")
	}
	if c.Prefill > 256 || c.Decode > 256 {
		bad("prefill+decode", strconv.Itoa(c.Prefill+c.Decode), "must be <= 256 engines per pool")
	}
	if len(c.Models) > maxModels {
		bad("models", strconv.Itoa(len(c.Models)), "must name at most "+strconv.Itoa(maxModels)+" models")
	}
	seen := map[string]bool{}
	for _, a := range c.LoRAAdapters {
		seen[a] = true
	}
	for i, m := range c.Models {
		switch {
		case strings.TrimSpace(m) == "":
			bad("models["+strconv.Itoa(i)+"]", strconv.Quote(m), "must be a non-empty model name")
		case seen[m]:
			bad("models["+strconv.Itoa(i)+"]", strconv.Quote(m), "is named twice (models and lora_adapters share one namespace)")
		}
		seen[m] = true
	}
	if c.RequestOverhead < 0 {
		bad("request_overhead", c.RequestOverhead.String(), "must be >= 0")
	}
	if c.EventDelay < 0 {
		bad("event_delay", c.EventDelay.String(), "must be >= 0")
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Mode == Conditional {
		pc := c.policyConfig()
		if err := pc.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Shadow != nil {
		sc := c.shadowConfig()
		if err := sc.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster config: shadow: %w", err))
		}
	}
	return errors.Join(errs...)
}

// shadowConfig is the candidate's policy configuration: c's own with the feature on and
// Shadow's policy object (θp defaulted as for the live one).
func (c Config) shadowConfig() policy.Config {
	s := c
	s.Mode, s.Disagg = Conditional, *c.Shadow
	if s.Disagg.Policy == policy.SLOKind && s.Disagg.Cost.Name == "" {
		s.Disagg.Cost = engineModel(s.Engine)
		s.Disagg.CostModel = s.Disagg.Cost.Name
	}
	return s.policyConfig()
}

// engineModel is the cost model the engines run (sim's default when none is set): an slo
// policy without its own cost_model forecasts with the simulator's own coefficients.
func engineModel(e sim.Config) sim.CostModel {
	if e.Model.Name != "" {
		return e.Model
	}
	m, _ := sim.PerfModel(sim.DefaultPerfModel) // a listed name
	return m
}

// policyConfig is the router's policy configuration for c's mode.
func (c Config) policyConfig() policy.Config {
	pc := policy.DefaultConfig()
	pc.KVEvents, pc.DistinctPools = true, true
	pc.Selection = c.Selection
	pc.QueueThreshold = c.QueueThreshold
	if bs := c.Engine.BlockSize; bs > 0 {
		pc.BlockSize = bs
	}
	if c.Mode != Conditional {
		return pc
	}
	pc.Enabled, pc.DisaggGiven = true, true
	pc.Disagg = c.Disagg
	if !pc.Disagg.PrefillBusyThreshold.Set && !pc.QueueThreshold.Set {
		pc.Disagg.PrefillBusyThreshold = policy.Set(DefaultPrefillBusyThreshold)
	}
	return pc
}
