package pool

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// trace runs steps through a fresh healthState and writes one token per step: the wait before
// the next probe for a probe step ("·" for a passive one), then "+down(reason,need)" or "+up"
// when the step excluded or returned the worker.
func trace(hp healthParams, steps string) string {
	var s healthState
	var out []string
	for _, st := range strings.Fields(steps) {
		tok, changed := "·", false
		switch st {
		case "ok", "fail", "timeout", "refused":
			r := map[string]ProbeResult{"ok": ProbeOK, "fail": ProbeFailed, "timeout": ProbeTimeout, "refused": ProbeRefused}[st]
			var wait time.Duration
			changed, wait = s.probe(hp, r)
			tok = wait.String()
		case "5xx":
			changed = s.upstreamFailure(hp, ReasonUpstream5xx)
		case "connect":
			changed = s.upstreamFailure(hp, ReasonConnectFailure)
		case "good":
			s.upstreamSuccess()
		default:
			panic("unknown step " + st)
		}
		switch {
		case changed && s.down:
			tok += fmt.Sprintf("+down(%s,%d)", s.reason, s.need)
		case changed:
			tok += "+up"
		}
		out = append(out, tok)
	}
	return strings.Join(out, " ")
}

// TestHealthState checks the probe-and-passive state machine rule by rule, on the default
// knobs: interval 500ms, backoff cap 8s, 2 failures, 2 successes, 3 upstream failures.
func TestHealthState(t *testing.T) {
	hp := Config{}.withDefaults().healthParams()
	rep := func(s string, n int) string { return strings.TrimSpace(strings.Repeat(s+" ", n)) }
	tests := []struct {
		name, spec, steps, want string
	}{
		{"failures_in_a_row_exclude", "H1", "fail fail",
			"500ms 500ms+down(probe_failed,2)"},
		{"a_good_probe_resets_the_count", "H1", "fail ok fail ok",
			"500ms 500ms 500ms 500ms"},
		{"the_last_failure_names_the_reason", "H1", "timeout refused",
			"500ms 500ms+down(probe_refused,2)"},
		{"timeouts_count", "H1", "ok timeout timeout",
			"500ms 500ms 500ms+down(probe_timeout,2)"},
		{"failed_probes_of_an_excluded_worker_back_off_to_the_cap", "H3", "fail fail fail fail fail fail fail fail",
			"500ms 500ms+down(probe_failed,2) 1s 2s 4s 8s 8s 8s"},
		{"a_good_probe_while_excluded_waits_one_interval_and_a_relapse_keeps_the_backoff", "H3",
			"fail fail fail fail ok fail ok ok",
			"500ms 500ms+down(probe_failed,2) 1s 2s 500ms 4s 500ms 500ms+up"},
		{"return_needs_successes_in_a_row", "H4", "fail fail ok fail ok ok",
			"500ms 500ms+down(probe_failed,2) 500ms 1s 500ms 500ms+up"},
		{"upstream_failures_in_a_row_exclude", "H2", "5xx 5xx connect",
			"· · ·+down(connect_failure,2)"},
		{"a_good_response_resets_the_upstream_streak", "H2", "5xx 5xx good 5xx 5xx",
			"· · · · ·"},
		{"a_good_probe_does_not_reset_the_upstream_streak", "H2", "5xx 5xx ok 5xx",
			"· · 500ms ·+down(upstream_5xx,2)"},
		{"upstream_signals_are_ignored_while_excluded", "H2", "fail fail 5xx 5xx 5xx good ok ok",
			"500ms 500ms+down(probe_failed,2) · · · · 500ms 500ms+up"},
		{"probe_and_upstream_counts_are_separate", "H1/H2", "fail 5xx 5xx ok",
			"500ms · · 500ms"},
		{"a_flapping_worker_needs_twice_the_successes_each_time_up_to_8x", "H5",
			"fail fail ok ok fail fail " + rep("ok", 4) + " fail fail " + rep("ok", 8) + " fail fail " + rep("ok", 16) + " fail fail",
			"500ms 500ms+down(probe_failed,2) 500ms 500ms+up 500ms 500ms+down(probe_failed,4) " +
				rep("500ms", 3) + " 500ms+up 500ms 500ms+down(probe_failed,8) " +
				rep("500ms", 7) + " 500ms+up 500ms 500ms+down(probe_failed,16) " +
				rep("500ms", 15) + " 500ms+up 500ms 500ms+down(probe_failed,16)"},
		{"a_worker_stable_for_20_probes_starts_again_from_health_successes", "H5",
			"fail fail ok ok " + rep("ok", 20) + " fail fail",
			"500ms 500ms+down(probe_failed,2) 500ms 500ms+up " + rep("500ms", 21) + " 500ms+down(probe_failed,2)"},
		{"19_stable_probes_are_not_enough", "H5",
			"fail fail ok ok " + rep("ok", 19) + " fail fail",
			"500ms 500ms+down(probe_failed,2) 500ms 500ms+up " + rep("500ms", 20) + " 500ms+down(probe_failed,4)"},
		{"a_passive_exclusion_after_a_return_counts_as_a_flap", "H5", "fail fail ok ok 5xx 5xx 5xx",
			"500ms 500ms+down(probe_failed,2) 500ms 500ms+up · · ·+down(upstream_5xx,4)"},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			if got := trace(hp, tc.steps); got != tc.want {
				t.Fatalf("%s: steps %q\n got  %s\n want %s", tc.spec, tc.steps, got, tc.want)
			}
		})
	}
}

// TestHealthStateBackoffCapBelowDouble: a cap below twice the interval is the first wait too.
func TestHealthStateBackoffCapBelowDouble(t *testing.T) {
	hp := Config{HealthBackoffMax: 700 * time.Millisecond}.withDefaults().healthParams()
	if got, want := trace(hp, "fail fail fail fail"), "500ms 500ms+down(probe_failed,2) 700ms 700ms"; got != want {
		t.Fatalf("H3: got %s, want %s", got, want)
	}
}
