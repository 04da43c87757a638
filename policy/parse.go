package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cost"
)

// allowedKeys lists the keys of --router-conditional-disagg-config, sorted.
var allowedKeys = []string{"cost_model", "decode_busy_source", "decode_busy_threshold", "eff_isl_ratio_threshold", "eff_isl_threshold", "policy",
	"prefill_busy_threshold", "slo_feedback", "slo_feedback_max", "slo_fleet", "slo_handoff", "slo_margin", "slo_tpot_ms", "slo_ttft_ms"}

// maxValueText bounds how much of an offending value an error message quotes.
const maxValueText = 40

// ParseDisagg parses the JSON of --router-conditional-disagg-config. Empty input is `{}`.
// It parses into a key list first (to see duplicates), then checks every key, and returns
// every problem at once (errors.Join of *ConfigError) in the texts of conditional-disagg.md §7.
func ParseDisagg(data []byte) (Disagg, error) {
	d := DefaultDisagg()
	if len(bytes.TrimSpace(data)) == 0 {
		return d, nil
	}
	fields, ok := scanObject(data)
	if !ok {
		return d, errors.Join(cfgErr(SourceDisagg, "", "", "must be a JSON object"))
	}
	var errs []error
	last := make(map[string]json.RawMessage, len(fields))
	var unknown []string
	for _, f := range fields {
		if _, dup := last[f.key]; dup {
			errs = append(errs, cfgErr(SourceDisagg, "", "", "duplicate field "+strconv.Quote(f.key)))
		} else if !slices.Contains(allowedKeys, f.key) {
			unknown = append(unknown, f.key)
		}
		last[f.key] = f.raw
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		errs = append(errs, cfgErr(SourceDisagg, "", "", "unknown field(s): "+strings.Join(unknown, ", ")+
			" (allowed: "+strings.Join(allowedKeys, ", ")+")"))
	}
	if raw, ok := last["policy"]; ok {
		errs = appendErr(errs, parsePolicy(raw, &d.Policy))
	}
	if raw, ok := last["eff_isl_threshold"]; ok {
		errs = appendErr(errs, parseEffThreshold(raw, &d.EffISLThreshold))
	}
	if raw, ok := last["eff_isl_ratio_threshold"]; ok {
		errs = appendErr(errs, parseRatio(raw, &d.EffISLRatioThreshold))
	}
	if raw, ok := last["prefill_busy_threshold"]; ok {
		errs = appendErr(errs, parseBusy("prefill_busy_threshold", raw, &d.PrefillBusyThreshold))
	}
	if raw, ok := last["decode_busy_threshold"]; ok {
		errs = appendErr(errs, parseBusy("decode_busy_threshold", raw, &d.DecodeBusyThreshold))
	}
	if raw, ok := last["slo_ttft_ms"]; ok {
		errs = appendErr(errs, parseMillis("slo_ttft_ms", raw, &d.SLO.TTFT))
	}
	if raw, ok := last["slo_tpot_ms"]; ok {
		errs = appendErr(errs, parseMillis("slo_tpot_ms", raw, &d.SLO.TPOT))
	}
	if raw, ok := last["cost_model"]; ok {
		errs = appendErr(errs, parseCostModel(raw, &d))
	}
	if raw, ok := last["decode_busy_source"]; ok {
		if json.Unmarshal(raw, &d.DecodeBusySource) != nil || (d.DecodeBusySource != BusySourceBooked && d.DecodeBusySource != BusySourceReported) {
			errs = append(errs, cfgErr(SourceDisagg, "decode_busy_source", valueText(raw), "must be \"booked\" or \"reported\""))
			d.DecodeBusySource = ""
		}
	}
	if raw, ok := last["slo_feedback"]; ok {
		if err := json.Unmarshal(raw, &d.SLOFeedback); err != nil || (string(raw) != "true" && string(raw) != "false") {
			errs = append(errs, cfgErr(SourceDisagg, "slo_feedback", valueText(raw), "must be true or false"))
		}
	}
	if raw, ok := last["slo_feedback_max"]; ok {
		if !isNumber(raw) || json.Unmarshal(raw, &d.SLOFeedbackMax) != nil {
			errs = append(errs, cfgErr(SourceDisagg, "slo_feedback_max", valueText(raw), "must be a number in [1, 100]"))
		}
	}
	if raw, ok := last["slo_fleet"]; ok {
		if err := json.Unmarshal(raw, &d.SLOFleet); err != nil || (string(raw) != "true" && string(raw) != "false") {
			errs = append(errs, cfgErr(SourceDisagg, "slo_fleet", valueText(raw), "must be true or false"))
		}
	}
	if raw, ok := last["slo_handoff"]; ok {
		if err := json.Unmarshal(raw, &d.SLOHandoff); err != nil || (string(raw) != "true" && string(raw) != "false") {
			errs = append(errs, cfgErr(SourceDisagg, "slo_handoff", valueText(raw), "must be true or false"))
		}
	}
	if raw, ok := last["slo_margin"]; ok {
		if !isNumber(raw) || json.Unmarshal(raw, &d.SLOMargin) != nil {
			errs = append(errs, cfgErr(SourceDisagg, "slo_margin", valueText(raw), "must be a number in [0, 1]"))
		}
	}
	return d, errors.Join(errs...)
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

type field struct {
	key string
	raw json.RawMessage
}

// scanObject splits one top-level JSON object into its members, in order, keeping duplicates.
func scanObject(data []byte) ([]field, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		out = append(out, field{key, raw})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return nil, false
	}
	return out, true
}

// valueText renders a raw JSON value for an error message: compact, at most 40 bytes.
func valueText(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	if len(s) > maxValueText {
		s = s[:maxValueText] + "..."
	}
	return s
}

func isNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}

func parsePolicy(raw json.RawMessage, dst *Kind) error {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return cfgErr(SourceDisagg, "policy", valueText(raw), "must be a string")
	}
	switch k := Kind(s); k {
	case ISLBounding, PrefillLoad, ISLOrLoad, SLOKind:
		*dst = k
		return nil
	}
	return cfgErr(SourceDisagg, "policy", valueText(raw), "must be one of isl_bounding, prefill_load, isl_or_load, slo")
}

// maxSLOMillis bounds an objective (one hour): beyond it the estimates lose meaning.
const maxSLOMillis = 3_600_000

// parseMillis reads a positive number of milliseconds (fractions allowed).
func parseMillis(name string, raw json.RawMessage, dst *time.Duration) error {
	var v float64
	if !isNumber(raw) || json.Unmarshal(raw, &v) != nil || !(v > 0) || v > maxSLOMillis {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be a number of milliseconds in (0, 3600000]")
	}
	*dst = time.Duration(v * float64(time.Millisecond))
	return nil
}

// ParseMillis reads a request's objective header (x-slo-ttft-ms, x-slo-tpot-ms): a positive
// number of milliseconds, at most an hour.
func ParseMillis(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f > 0) || f > maxSLOMillis {
		return 0, fmt.Errorf("%q must be a number of milliseconds in (0, 3600000]", valueTextString(v))
	}
	return time.Duration(f * float64(time.Millisecond)), nil
}

func valueTextString(v string) string {
	if len(v) > maxValueText {
		return v[:maxValueText] + "..."
	}
	return v
}

// parseCostModel resolves cost_model to the calibrated coefficients it names.
func parseCostModel(raw json.RawMessage, d *Disagg) error {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return cfgErr(SourceDisagg, "cost_model", valueText(raw), "must be a string: one of "+strings.Join(cost.Names(), ", "))
	}
	m, err := cost.ByName(s)
	if err != nil {
		return cfgErr(SourceDisagg, "cost_model", valueText(raw), "must be one of "+strings.Join(cost.Names(), ", "))
	}
	d.CostModel, d.Cost = s, m
	return nil
}

// parseEffThreshold accepts only integer literals: 2048.0 and 2e3 are rejected like Python's
// isinstance(v, int) check in Dynamo.
func parseEffThreshold(raw json.RawMessage, dst *int64) error {
	const name = "eff_isl_threshold"
	if !isNumber(raw) || bytes.ContainsAny(raw, ".eE") {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be an integer")
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		if bytes.HasPrefix(raw, []byte("-")) {
			return cfgErr(SourceDisagg, name, valueText(raw), "must be >= 0")
		}
		return cfgErr(SourceDisagg, name, valueText(raw), "is too large")
	}
	if v < 0 {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be >= 0")
	}
	*dst = v
	return nil
}

func parseRatio(raw json.RawMessage, dst *float64) error {
	const name = "eff_isl_ratio_threshold"
	if !isNumber(raw) {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be a number")
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return cfgErr(SourceDisagg, name, valueText(raw), "is outside [0.0, 1.0]")
	}
	*dst = v
	return nil
}

func parseBusy(name string, raw json.RawMessage, dst *Threshold) error {
	if string(raw) == "null" {
		*dst = Threshold{}
		return nil
	}
	if !isNumber(raw) {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be a number or null")
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(v, 0) {
		return cfgErr(SourceDisagg, name, valueText(raw), "is not a finite number")
	}
	if v < 0 {
		return cfgErr(SourceDisagg, name, valueText(raw), "must be >= 0")
	}
	*dst = Set(v)
	return nil
}
