package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cost"
)

// Kind names a conditional-disaggregation policy (conditional-disagg.md §2).
type Kind string

const (
	ISLBounding Kind = "isl_bounding"
	PrefillLoad Kind = "prefill_load"
	ISLOrLoad   Kind = "isl_or_load"
	// SLO forecasts TTFT and TPOT per placement with the cost model and picks the one with
	// the most headroom (policy/slo.go); not one of Dynamo's policies.
	SLOKind Kind = "slo"
)

// Decode-busy guard inputs (Disagg.DecodeBusySource).
const (
	BusySourceBooked   = "booked"
	BusySourceReported = "reported"
)

// loadBased reports whether the policy reads the prefill busy signal.
func (k Kind) loadBased() bool { return k == PrefillLoad || k == ISLOrLoad }

// Source names used in configuration errors.
const (
	SourceDisagg = "--router-conditional-disagg-config"
	SourceRouter = "router"
)

// Defaults (conditional-disagg.md §2).
const (
	DefaultEffISLThreshold      = 2048
	DefaultEffISLRatioThreshold = 0.7
	DefaultBlockSize            = 16
	DefaultKVEventsSilence      = 300 * time.Second
	DefaultKVEventsMinRequests  = 20
	// UnknownMaxBatchedTokens stands in for an unknown mnbt: effectively never busy.
	UnknownMaxBatchedTokens = 10_000_000
)

// Threshold is an optional non-negative number (JSON null or absent = unset).
type Threshold struct {
	Value float64
	Set   bool
}

// Set returns a set Threshold.
func Set(v float64) Threshold { return Threshold{Value: v, Set: true} }

// Disagg is the JSON object of --router-conditional-disagg-config. Build it with ParseDisagg
// or DefaultDisagg: the zero value is not the default (a threshold of 0 is meaningful).
type Disagg struct {
	Policy               Kind
	EffISLThreshold      int64
	EffISLRatioThreshold float64
	PrefillBusyThreshold Threshold // θp; unset inherits --router-queue-threshold
	DecodeBusyThreshold  Threshold // θd; unset disables the decode-busy guard
	// DecodeBusySource is what θd applies to: "booked" (default, Dynamo's §4.2: booked blocks
	// over kvcap) or "reported" (the worker's own KV usage fraction from its /metrics).
	DecodeBusySource string
	// The slo policy's objective (slo_ttft_ms, slo_tpot_ms) and cost model: cost_model (one of
	// cost.Names()) or, from the shell, a model file of `condisagg calibrate` (CostModelFile
	// names it; UseCostModelFile sets both, so this package reads no file). Required with
	// policy "slo".
	SLO           SLO
	CostModel     string
	CostModelFile string
	Cost          cost.Model
	// SLOFeedback (slo_feedback, default false) applies the closed-loop corrections of the
	// feedback controller to the forecasts (off by default: on the evaluation matrix with
	// slo_fleet they neither cost nor gain goodput beyond the run-to-run noise, docs/results.md
	// "The controller on the fleet's view"; they are for a fleet the cost model does not fit); SLOFeedbackMax
	// (slo_feedback_max, default 8) bounds a correction to [1/max, max].
	SLOFeedback    bool
	SLOFeedbackMax float64
	// SLOMargin (slo_margin, default DefaultSLOMargin, in [0, 1]): while the best placement
	// keeps this share of the objective as headroom, the slo policy runs the request whole
	// where aggregated selection would, among the workers that keep it; 1 always maximises
	// headroom, 0 satisfices whenever the objective is met.
	SLOMargin float64
	// SLOFleet (slo_fleet, default true; docs/results.md "The fleet's steady state": 54 of 54
	// matrix cells at >= 0.98x against 46 without it): the slo policy forecasts each placement in the
	// fleet's steady state (Input.Fleet: prefill queue wait and the prefill share of every
	// decode step when the offered load is placed aggregated or split), not only from the
	// booked load of the instant, and under overload splits when that steady state favours it.
	SLOFleet bool
	// SLOHandoff (slo_handoff, default false) lets the slo policy price a fourth placement:
	// the prefill on the decode worker that holds the prompt's prefix, the decode on another
	// decode worker that pulls the whole KV (handoff.go). It needs engines whose KV role
	// serves both legs (vLLM kv_both) and a pd-sidecar in front of every decode worker.
	SLOHandoff bool
}

// ErrCostModelTwice is UseCostModelFile's refusal of a policy object that names cost_model.
var ErrCostModelTwice = errors.New("the policy object names cost_model too: keep one")

// UseCostModelFile makes m, read by the caller from the model file path (cost.ParseFile), the
// cost model of d. A policy object that names cost_model itself is refused: which one would
// forecast must not depend on precedence.
func (d *Disagg) UseCostModelFile(path string, m cost.Model) error {
	if d.CostModel != "" {
		return fmt.Errorf("%w (cost_model %q)", ErrCostModelTwice, d.CostModel)
	}
	d.CostModelFile, d.Cost = path, m
	return nil
}

// CostModelSource names where the slo policy's cost model comes from: `file <path>` or
// `named <name>` ("" when none is set).
func (d Disagg) CostModelSource() string {
	switch {
	case d.CostModelFile != "":
		return "file " + d.CostModelFile
	case d.CostModel != "":
		return "named " + d.CostModel
	}
	return ""
}

// DefaultDisagg is the configuration of `{}`.
func DefaultDisagg() Disagg {
	return Disagg{Policy: ISLBounding, EffISLThreshold: DefaultEffISLThreshold, EffISLRatioThreshold: DefaultEffISLRatioThreshold,
		SLO: SLO{TTFT: DefaultSLOTTFT, TPOT: DefaultSLOTPOT}, SLOFeedback: false, SLOFeedbackMax: DefaultSLOFeedbackMax,
		SLOMargin: DefaultSLOMargin, SLOFleet: true}
}

// Selection holds the worker-selection knobs (YAML `router:`, conditional-disagg.md §6).
type Selection struct {
	CreditWeight        float64 `yaml:"credit_weight"`         // device overlap credit multiplier (1.0)
	HostWeight          float64 `yaml:"host_weight"`           // CPU-tier block weight (0.75), also in cached()
	DiskWeight          float64 `yaml:"disk_weight"`           // disk/remote-tier block weight (0.25), also in cached()
	PrefillLoadScale    float64 `yaml:"prefill_load_scale"`    // prefill cost multiplier (1.0)
	ActiveRequestWeight float64 `yaml:"active_request_weight"` // per-active-request cost (0)
	Temperature         float64 `yaml:"temperature"`           // 0 = argmin, > 0 = softmax sampling
	CreditDecay         float64 `yaml:"credit_decay"`          // 0 = off
}

// DefaultSelection returns Dynamo's defaults.
func DefaultSelection() Selection {
	return Selection{CreditWeight: 1, HostWeight: 0.75, DiskWeight: 0.25, PrefillLoadScale: 1}
}

// Silence configures when a worker's KV event stream counts as silent (§8.3).
type Silence struct {
	After       time.Duration `yaml:"kv_events_silence"`      // no BlockStored for this long (300 s) ...
	MinRequests int           `yaml:"kv_events_min_requests"` // ... while at least this many requests were routed (20)
}

// Config is everything Decide reads. Build it with DefaultConfig, set the flags, then Validate.
// A validated Config is never modified; a reload builds and validates a new one.
type Config struct {
	Enabled        bool      // --router-conditional-disagg
	DisaggGiven    bool      // --router-conditional-disagg-config was passed
	RouterMode     string    // --router-mode
	KVEvents       bool      // --router-kv-events
	DistinctPools  bool      // prefill and decode pools are configured and distinct
	QueueThreshold Threshold // --router-queue-threshold
	BlockSize      int       // --block-size (bs)
	Disagg         Disagg
	Selection      Selection
	Silence        Silence
}

// DefaultConfig returns the defaults of every field (feature off).
func DefaultConfig() Config {
	return Config{RouterMode: "kv", BlockSize: DefaultBlockSize, Disagg: DefaultDisagg(), Selection: DefaultSelection(),
		Silence: Silence{After: DefaultKVEventsSilence, MinRequests: DefaultKVEventsMinRequests}}
}

// withDefaults fills the fields whose zero value is never meaningful.
func (c Config) withDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Disagg.Policy == "" {
		c.Disagg.Policy = ISLBounding
	}
	if c.Silence.After == 0 {
		c.Silence.After = DefaultKVEventsSilence
	}
	return c
}

// ConfigError is one configuration problem in the field/value/rule form of §7:
// `<source>: <field>: <value> <rule>`; empty parts are left out.
type ConfigError struct {
	Source, Field, Value, Rule string
}

func (e *ConfigError) Error() string {
	s := ""
	if e.Source != "" {
		s = e.Source + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	if e.Value != "" {
		s += e.Value + " "
	}
	return s + e.Rule
}

func cfgErr(source, field, value, rule string) error {
	return &ConfigError{Source: source, Field: field, Value: value, Rule: rule}
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Validate fills the defaults whose zero value is never meaningful (block size, policy,
// silence window) into c and returns every remaining problem, joined with errors.Join.
func (c *Config) Validate() error {
	*c = c.withDefaults()
	var errs []error
	if c.DisaggGiven && !c.Enabled {
		errs = append(errs, cfgErr(SourceDisagg, "", "", "requires --router-conditional-disagg"))
	}
	if c.Enabled {
		if c.RouterMode != "kv" {
			errs = append(errs, cfgErr("", "", "", "--router-conditional-disagg requires --router-mode kv (got "+strconv.Quote(c.RouterMode)+")"))
		}
		if !c.KVEvents {
			errs = append(errs, cfgErr("", "", "", "--router-conditional-disagg requires --router-kv-events"))
		}
		if !c.DistinctPools {
			errs = append(errs, cfgErr("", "", "", "--router-conditional-disagg requires distinct prefill and decode pools"))
		}
	}
	if c.BlockSize < 1 {
		errs = append(errs, cfgErr("--block-size", "", strconv.Itoa(c.BlockSize), "must be >= 1"))
	}
	if q := c.QueueThreshold; q.Set && (!(q.Value >= 0) || math.IsInf(q.Value, 0)) {
		errs = append(errs, cfgErr("--router-queue-threshold", "", fmtFloat(q.Value), "must be >= 0"))
	}
	errs = append(errs, c.Disagg.validate()...)
	if (c.Enabled || c.DisaggGiven) && c.Disagg.Policy.loadBased() && !c.Disagg.PrefillBusyThreshold.Set && !c.QueueThreshold.Set {
		errs = append(errs, cfgErr(SourceDisagg, "", "", "policy "+strconv.Quote(string(c.Disagg.Policy))+
			" needs prefill_busy_threshold, but neither prefill_busy_threshold nor --router-queue-threshold is set"))
	}
	errs = append(errs, c.Selection.validate()...)
	if c.Silence.After < 0 {
		errs = append(errs, cfgErr(SourceRouter, "kv_events_silence", c.Silence.After.String(), "must be > 0"))
	}
	if c.Silence.MinRequests < 0 {
		errs = append(errs, cfgErr(SourceRouter, "kv_events_min_requests", strconv.Itoa(c.Silence.MinRequests), "must be >= 0"))
	}
	return errors.Join(errs...)
}

// validate checks the ranges of the typed values (ParseDisagg checks them on the raw text).
func (d Disagg) validate() []error {
	var errs []error
	switch d.Policy {
	case ISLBounding, PrefillLoad, ISLOrLoad, "":
	case SLOKind:
		if d.Cost.Name == "" {
			errs = append(errs, cfgErr(SourceDisagg, "cost_model", strconv.Quote(d.CostModel),
				`is required with policy "slo": one of `+strings.Join(cost.Names(), ", ")+", or a model file (router.cost_model_file)"))
		} else if err := d.Cost.Validate(); err != nil {
			errs = append(errs, cfgErr(SourceDisagg, "cost_model", strconv.Quote(d.Cost.Name), err.Error()))
		}
		if d.SLO.TTFT <= 0 {
			errs = append(errs, cfgErr(SourceDisagg, "slo_ttft_ms", d.SLO.TTFT.String(), "must be > 0"))
		}
		if d.SLO.TPOT <= 0 {
			errs = append(errs, cfgErr(SourceDisagg, "slo_tpot_ms", d.SLO.TPOT.String(), "must be > 0"))
		}
		if !(d.SLOFeedbackMax >= 1 && d.SLOFeedbackMax <= MaxSLOFeedbackMax) {
			errs = append(errs, cfgErr(SourceDisagg, "slo_feedback_max", fmtFloat(d.SLOFeedbackMax), "must be in [1, 100]"))
		}
		if !(d.SLOMargin >= 0 && d.SLOMargin <= 1) {
			errs = append(errs, cfgErr(SourceDisagg, "slo_margin", fmtFloat(d.SLOMargin), "must be in [0, 1]"))
		}
	default:
		errs = append(errs, cfgErr(SourceDisagg, "policy", strconv.Quote(string(d.Policy)), "must be one of isl_bounding, prefill_load, isl_or_load, slo"))
	}
	switch d.DecodeBusySource {
	case "", BusySourceBooked, BusySourceReported:
	default:
		errs = append(errs, cfgErr(SourceDisagg, "decode_busy_source", strconv.Quote(d.DecodeBusySource), "must be booked or reported"))
	}
	if d.EffISLThreshold < 0 {
		errs = append(errs, cfgErr(SourceDisagg, "eff_isl_threshold", strconv.FormatInt(d.EffISLThreshold, 10), "must be >= 0"))
	}
	if r := d.EffISLRatioThreshold; !(r >= 0 && r <= 1) {
		errs = append(errs, cfgErr(SourceDisagg, "eff_isl_ratio_threshold", fmtFloat(r), "is outside [0.0, 1.0]"))
	}
	for _, t := range []struct {
		name string
		th   Threshold
	}{{"prefill_busy_threshold", d.PrefillBusyThreshold}, {"decode_busy_threshold", d.DecodeBusyThreshold}} {
		if t.th.Set && (!(t.th.Value >= 0) || math.IsInf(t.th.Value, 0)) {
			errs = append(errs, cfgErr(SourceDisagg, t.name, fmtFloat(t.th.Value), "must be >= 0"))
		}
	}
	return errs
}

func (s Selection) validate() []error {
	var errs []error
	for _, k := range []struct {
		name string
		v    float64
	}{{"credit_weight", s.CreditWeight}, {"host_weight", s.HostWeight}, {"disk_weight", s.DiskWeight},
		{"prefill_load_scale", s.PrefillLoadScale}, {"active_request_weight", s.ActiveRequestWeight},
		{"temperature", s.Temperature}, {"credit_decay", s.CreditDecay}} {
		if !(k.v >= 0) || math.IsInf(k.v, 0) {
			errs = append(errs, cfgErr(SourceRouter, k.name, fmtFloat(k.v), "must be a finite number >= 0"))
		}
	}
	return errs
}

// Warnings returns the non-fatal remarks about c for the startup log.
func (c Config) Warnings() []string {
	var w []string
	if t := c.Disagg.DecodeBusyThreshold; t.Set && t.Value > 1 {
		w = append(w, SourceDisagg+": decode_busy_threshold: "+fmtFloat(t.Value)+" > 1: guard triggers only above full KV capacity")
	}
	if c.Disagg.CostModelFile != "" && c.Disagg.Policy != SLOKind {
		w = append(w, "cost_model_file "+strconv.Quote(c.Disagg.CostModelFile)+": only the slo policy reads it; policy is "+string(c.Disagg.Policy))
	}
	if !c.Disagg.PrefillBusyThreshold.Set && c.QueueThreshold.Set && c.Enabled {
		w = append(w, "prefill_busy_threshold unset; inheriting --router-queue-threshold="+fmtFloat(c.QueueThreshold.Value))
	}
	return w
}

// PrefillBusyThreshold resolves θp = prefill_busy_threshold ?? --router-queue-threshold.
func (c *Config) PrefillBusyThreshold() (float64, bool) {
	if t := c.Disagg.PrefillBusyThreshold; t.Set {
		return t.Value, true
	}
	if c.QueueThreshold.Set {
		return c.QueueThreshold.Value, true
	}
	return 0, false
}

// Guard is the decode-busy guard that a bypass commit must re-check (θd; off when unset).
func (c *Config) Guard() Guard {
	t := c.Disagg.DecodeBusyThreshold
	return Guard{Threshold: t.Value, Enabled: t.Set, Reported: c.Disagg.DecodeBusySource == BusySourceReported}
}

// String renders d as the canonical JSON of --router-conditional-disagg-config (every key;
// unset busy thresholds as null), for logs and Explain.
func (d Disagg) String() string {
	busy := func(t Threshold) string {
		if !t.Set {
			return "null"
		}
		return fmtFloat(t.Value)
	}
	return `{"policy":` + strconv.Quote(string(d.Policy)) +
		`,"eff_isl_threshold":` + strconv.FormatInt(d.EffISLThreshold, 10) +
		`,"eff_isl_ratio_threshold":` + fmtFloat(d.EffISLRatioThreshold) +
		`,"prefill_busy_threshold":` + busy(d.PrefillBusyThreshold) +
		`,"decode_busy_threshold":` + busy(d.DecodeBusyThreshold) + d.sourceString() + d.sloString() + `}`
}

// sourceString is decode_busy_source when it is not the default (Dynamo's string otherwise).
func (d Disagg) sourceString() string {
	if d.DecodeBusySource == "" || d.DecodeBusySource == BusySourceBooked {
		return ""
	}
	return `,"decode_busy_source":` + strconv.Quote(d.DecodeBusySource)
}

// sloString is the slo policy's members of String ("" for Dynamo's policies, whose string
// stays Dynamo's).
func (d Disagg) sloString() string {
	if d.Policy != SLOKind {
		return ""
	}
	model := `,"cost_model":` + strconv.Quote(d.Cost.Name)
	if d.CostModelFile != "" {
		model = `,"cost_model_file":` + strconv.Quote(d.CostModelFile)
	}
	return `,"slo_ttft_ms":` + fmtFloat(ms(d.SLO.TTFT)) + `,"slo_tpot_ms":` + fmtFloat(ms(d.SLO.TPOT)) +
		model + `,"slo_feedback":` + strconv.FormatBool(d.SLOFeedback) +
		`,"slo_feedback_max":` + fmtFloat(d.SLOFeedbackMax) + `,"slo_margin":` + fmtFloat(d.SLOMargin) + fleetString(d.SLOFleet) + d.handoffString()
}

// handoffString is slo_handoff's member of String, present only when on (the strings of
// configs without it stay as they were).
func (d Disagg) handoffString() string {
	if !d.SLOHandoff {
		return ""
	}
	return `,"slo_handoff":true`

}

// fleetString is slo_fleet in the config string, only when off (the default is on; the
// strings of default configs stay as they were).
func fleetString(on bool) string {
	if !on {
		return `,"slo_fleet":false`
	}
	return ""
}
