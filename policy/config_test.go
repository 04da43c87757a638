package policy

import (
	"errors"
	"strings"
	"testing"
)

const src = "--router-conditional-disagg-config: "

func TestParseDisaggErrors(t *testing.T) {
	tests := []struct {
		spec, name string
		json       string
		want       []string // exact messages, in order
	}{
		{"§7", "not_json", `policy=isl`, []string{src + "must be a JSON object"}},
		{"§7", "array_not_object", `[{"policy":"isl_bounding"}]`, []string{src + "must be a JSON object"}},
		{"§7", "string_not_object", `"x"`, []string{src + "must be a JSON object"}},
		{"§7", "trailing_data", `{} {}`, []string{src + "must be a JSON object"}},
		{"§7", "truncated", `{"policy":`, []string{src + "must be a JSON object"}},
		{"§7", "duplicate_key", `{"policy":"isl_bounding","policy":"isl_or_load"}`, []string{src + `duplicate field "policy"`}},
		{"§7", "unknown_keys_sorted", `{"polcy":"x","foo":1,"policy":"isl_bounding"}`,
			[]string{src + "unknown field(s): foo, polcy (allowed: cost_model, decode_busy_source, decode_busy_threshold, eff_isl_ratio_threshold, eff_isl_threshold, policy, prefill_busy_threshold, slo_feedback, slo_feedback_max, slo_fleet, slo_handoff, slo_margin, slo_tpot_ms, slo_ttft_ms)"}},
		{"§7", "policy_not_string", `{"policy":3}`, []string{src + "policy: 3 must be a string"}},
		{"§7", "policy_null", `{"policy":null}`, []string{src + "policy: null must be a string"}},
		{"§7", "policy_not_allowed", `{"policy":"fast"}`, []string{src + `policy: "fast" must be one of isl_bounding, prefill_load, isl_or_load, slo`}},
		{"§7", "eff_fraction", `{"eff_isl_threshold":2048.5}`, []string{src + "eff_isl_threshold: 2048.5 must be an integer"}},
		{"§7", "eff_float_literal", `{"eff_isl_threshold":2048.0}`, []string{src + "eff_isl_threshold: 2048.0 must be an integer"}},
		{"§7", "eff_exponent", `{"eff_isl_threshold":2e3}`, []string{src + "eff_isl_threshold: 2e3 must be an integer"}},
		{"§7", "eff_string", `{"eff_isl_threshold":"2048"}`, []string{src + `eff_isl_threshold: "2048" must be an integer`}},
		{"§7", "eff_null", `{"eff_isl_threshold":null}`, []string{src + "eff_isl_threshold: null must be an integer"}},
		{"§7", "eff_bool", `{"eff_isl_threshold":true}`, []string{src + "eff_isl_threshold: true must be an integer"}},
		{"§7", "eff_negative", `{"eff_isl_threshold":-1}`, []string{src + "eff_isl_threshold: -1 must be >= 0"}},
		{"§7", "ratio_null", `{"eff_isl_ratio_threshold":null}`, []string{src + "eff_isl_ratio_threshold: null must be a number"}},
		{"§7", "ratio_bool", `{"eff_isl_ratio_threshold":false}`, []string{src + "eff_isl_ratio_threshold: false must be a number"}},
		{"§7", "ratio_string", `{"eff_isl_ratio_threshold":"0.5"}`, []string{src + `eff_isl_ratio_threshold: "0.5" must be a number`}},
		{"§7", "ratio_above_one", `{"eff_isl_ratio_threshold":1.01}`, []string{src + "eff_isl_ratio_threshold: 1.01 is outside [0.0, 1.0]"}},
		{"§7", "ratio_negative", `{"eff_isl_ratio_threshold":-0.1}`, []string{src + "eff_isl_ratio_threshold: -0.1 is outside [0.0, 1.0]"}},
		{"§7", "busy_bool", `{"decode_busy_threshold":true}`, []string{src + "decode_busy_threshold: true must be a number or null"}},
		{"§7", "busy_string", `{"prefill_busy_threshold":"1"}`, []string{src + `prefill_busy_threshold: "1" must be a number or null`}},
		{"§7", "busy_object", `{"prefill_busy_threshold":{"a": 1}}`, []string{src + `prefill_busy_threshold: {"a":1} must be a number or null`}},
		{"§7", "busy_negative", `{"prefill_busy_threshold":-0.5}`, []string{src + "prefill_busy_threshold: -0.5 must be >= 0"}},
		{"§7", "busy_overflow", `{"decode_busy_threshold":1e999}`, []string{src + "decode_busy_threshold: 1e999 is not a finite number"}},
		{"§7", "long_value_truncated", `{"policy":"` + strings.Repeat("x", 60) + `"}`,
			[]string{src + `policy: "` + strings.Repeat("x", 39) + `... must be one of isl_bounding, prefill_load, isl_or_load, slo`}},
		{"§7", "every_problem_at_once", `{"policy":"fast","foo":1,"policy":2,"eff_isl_threshold":-3,"eff_isl_ratio_threshold":7,"decode_busy_threshold":"x","prefill_busy_threshold":-1}`,
			[]string{
				src + `duplicate field "policy"`,
				src + "unknown field(s): foo (allowed: cost_model, decode_busy_source, decode_busy_threshold, eff_isl_ratio_threshold, eff_isl_threshold, policy, prefill_busy_threshold, slo_feedback, slo_feedback_max, slo_fleet, slo_handoff, slo_margin, slo_tpot_ms, slo_ttft_ms)",
				src + "policy: 2 must be a string",
				src + "eff_isl_threshold: -3 must be >= 0",
				src + "eff_isl_ratio_threshold: 7 is outside [0.0, 1.0]",
				src + "prefill_busy_threshold: -1 must be >= 0",
				src + `decode_busy_threshold: "x" must be a number or null`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			_, err := ParseDisagg([]byte(tc.json))
			if err == nil {
				t.Fatal("ParseDisagg accepted it")
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("error text:\n got  %q\n want %q", got, want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Source != SourceDisagg {
				t.Fatalf("error is not a *ConfigError from %s: %#v", SourceDisagg, err)
			}
		})
	}
}

func TestParseDisaggAccepts(t *testing.T) {
	def := DefaultDisagg()
	tests := []struct {
		spec, name string
		json       string
		want       Disagg
	}{
		{"C0", "empty_input_is_defaults", ``, def},
		{"C0", "empty_object_is_defaults", ` {} `, def},
		{"C1", "ratio_integer_one_accepted", `{"eff_isl_ratio_threshold": 1}`, func() Disagg { d := def; d.EffISLRatioThreshold = 1; return d }()},
		{"§2", "every_key", `{"policy":"isl_or_load","eff_isl_threshold":0,"eff_isl_ratio_threshold":0,"prefill_busy_threshold":2.5,"decode_busy_threshold":0.8}`,
			Disagg{Policy: ISLOrLoad, EffISLThreshold: 0, EffISLRatioThreshold: 0, PrefillBusyThreshold: Set(2.5), DecodeBusyThreshold: Set(0.8), SLO: def.SLO, SLOFeedback: false, SLOFeedbackMax: DefaultSLOFeedbackMax, SLOMargin: DefaultSLOMargin, SLOFleet: true}},
		{"§2", "null_busy_is_unset", `{"prefill_busy_threshold":null,"decode_busy_threshold":null}`, def},
		{"§2", "busy_has_no_upper_bound", `{"prefill_busy_threshold":1e6}`, func() Disagg { d := def; d.PrefillBusyThreshold = Set(1e6); return d }()},
		{"§2", "escaped_key", `{"p\u006flicy":"prefill_load"}`, func() Disagg { d := def; d.Policy = PrefillLoad; return d }()},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			got, err := ParseDisagg([]byte(tc.json))
			if err != nil {
				t.Fatalf("ParseDisagg: %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		spec, name string
		mod        func(*Config)
		want       []string
	}{
		{"C0", "defaults_feature_off_valid", func(c *Config) { *c = DefaultConfig() }, nil},
		{"§2", "enabled_defaults_valid", nil, nil},
		{"§7", "config_without_enable_flag", func(c *Config) { c.Enabled = false }, []string{src + "requires --router-conditional-disagg"}},
		{"§7", "enabled_without_kv_mode", func(c *Config) { c.RouterMode = "round_robin" }, []string{`--router-conditional-disagg requires --router-mode kv (got "round_robin")`}},
		{"§7", "enabled_without_kv_events", func(c *Config) { c.KVEvents = false }, []string{"--router-conditional-disagg requires --router-kv-events"}},
		{"§7", "enabled_without_pools", func(c *Config) { c.DistinctPools = false }, []string{"--router-conditional-disagg requires distinct prefill and decode pools"}},
		{"§7", "load_policy_without_threshold", func(c *Config) { c.Disagg.Policy = PrefillLoad },
			[]string{src + `policy "prefill_load" needs prefill_busy_threshold, but neither prefill_busy_threshold nor --router-queue-threshold is set`}},
		{"§7", "isl_or_load_without_threshold", func(c *Config) { c.Disagg.Policy = ISLOrLoad },
			[]string{src + `policy "isl_or_load" needs prefill_busy_threshold, but neither prefill_busy_threshold nor --router-queue-threshold is set`}},
		{"B4", "load_policy_with_queue_threshold_valid", func(c *Config) { c.Disagg.Policy, c.QueueThreshold = PrefillLoad, Set(0.8) }, nil},
		{"§7", "typed_ratio_out_of_range", func(c *Config) { c.Disagg.EffISLRatioThreshold = 1.5 }, []string{src + "eff_isl_ratio_threshold: 1.5 is outside [0.0, 1.0]"}},
		{"§7", "typed_busy_negative", func(c *Config) { c.Disagg.DecodeBusyThreshold = Set(-0.5) }, []string{src + "decode_busy_threshold: -0.5 must be >= 0"}},
		{"§7", "typed_policy_unknown", func(c *Config) { c.Disagg.Policy = "fast" }, []string{src + `policy: "fast" must be one of isl_bounding, prefill_load, isl_or_load, slo`}},
		{"§6", "selection_knob_negative", func(c *Config) { c.Selection.Temperature = -1 }, []string{"router: temperature: -1 must be a finite number >= 0"}},
		{"§2", "queue_threshold_negative", func(c *Config) { c.QueueThreshold = Set(-2) }, []string{"--router-queue-threshold: -2 must be >= 0"}},
		{"§7", "all_flag_problems_at_once", func(c *Config) { c.RouterMode, c.KVEvents, c.DistinctPools = "random", false, false }, []string{
			`--router-conditional-disagg requires --router-mode kv (got "random")`,
			"--router-conditional-disagg requires --router-kv-events",
			"--router-conditional-disagg requires distinct prefill and decode pools"}},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			c := enabledConfig()
			if tc.mod != nil {
				tc.mod(&c)
			}
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("error text:\n got  %q\n want %q", got, want)
			}
		})
	}
}

func TestConfigWarningsAndThresholds(t *testing.T) {
	c := enabledConfig()
	c.Disagg.DecodeBusyThreshold = Set(1.2)
	c.QueueThreshold = Set(0.8)
	got := c.Warnings()
	want := []string{
		src + "decode_busy_threshold: 1.2 > 1: guard triggers only above full KV capacity",
		"prefill_busy_threshold unset; inheriting --router-queue-threshold=0.8",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Warnings = %q, want %q", got, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("θd > 1 must be only a warning: %v", err)
	}
	if th, ok := c.PrefillBusyThreshold(); !ok || th != 0.8 {
		t.Fatalf("B4: θp = %v,%v, want inherited 0.8", th, ok)
	}
	c.Disagg.PrefillBusyThreshold = Set(2)
	if th, ok := c.PrefillBusyThreshold(); !ok || th != 2 {
		t.Fatalf("B5: θp = %v,%v, want explicit 2", th, ok)
	}
	if g := c.Guard(); !g.Enabled || g.Threshold != 1.2 {
		t.Fatalf("Guard = %+v", g)
	}
}
