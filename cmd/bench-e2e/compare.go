package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// DefaultTolerance is the relative difference within which live and simulated agree.
const DefaultTolerance = 0.15

// toSimulated converts a wall-clock latency measured against workers running timeScale times
// faster than real time into simulated time.
func toSimulated(wall time.Duration, timeScale float64) time.Duration {
	return time.Duration(math.Round(float64(wall) * timeScale))
}

// scaleDist converts every quantile of a wall-clock distribution into simulated time.
func scaleDist(d workload.Dist[time.Duration], timeScale float64) workload.Dist[time.Duration] {
	s := func(v time.Duration) time.Duration { return toSimulated(v, timeScale) }
	return workload.Dist[time.Duration]{N: d.N, Mean: s(d.Mean), Min: s(d.Min), P10: s(d.P10), P25: s(d.P25),
		P50: s(d.P50), P75: s(d.P75), P90: s(d.P90), P95: s(d.P95), P99: s(d.P99), Max: s(d.Max)}
}

// row is one compared metric, both sides in simulated time.
type row struct {
	Metric          string
	Live, Simulated time.Duration
}

// diff is (live − simulated) / simulated; +Inf when only the simulated side is zero.
func (r row) diff() float64 {
	if r.Simulated == 0 {
		if r.Live == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(r.Live-r.Simulated) / float64(r.Simulated)
}

// within reports whether |diff| ≤ tol.
func (r row) within(tol float64) bool { return math.Abs(r.diff()) <= tol }

// compareRows builds the compared metrics from the live summary (already in simulated time)
// and the simulator's summary.
func compareRows(live, simulated *workload.Summary) []row {
	return []row{
		{"TTFT p50", live.TTFT.P50, simulated.TTFT.P50},
		{"TPOT p50", live.TPOT.P50, simulated.TPOT.P50},
		{"TTFT p90", live.TTFT.P90, simulated.TTFT.P90},
		{"TPOT p90", live.TPOT.P90, simulated.TPOT.P90},
		{"E2E p50", live.E2E.P50, simulated.E2E.P50},
	}
}

// headline is the number of rows the agreement verdict covers (TTFT p50 and TPOT p50); the
// others are printed for context.
const headline = 2

// writeComparison prints the table and returns whether the headline rows agree within tol.
func writeComparison(w io.Writer, rows []row, tol float64) (bool, error) {
	t := workload.Table{Header: []string{"metric", "live (sim time)", "simulated", "diff %", fmt.Sprintf("within %g %%?", tol*100)}}
	ok := true
	for i, r := range rows {
		verdict := "yes"
		if !r.within(tol) {
			verdict = "NO"
			if i < headline {
				ok = false
			}
		}
		if i >= headline {
			verdict += " (context)"
		}
		t.Rows = append(t.Rows, []string{r.Metric, ms(r.Live), ms(r.Simulated), fmt.Sprintf("%+.1f", 100*r.diff()), verdict})
	}
	return ok, t.Write(w)
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// scaleRun is the comparison at one time scale, with the difference split into its parts.
// The *Wall fields are wall-clock costs (simulated difference / time scale): a cost that stays
// the same at every scale is a fixed wall-clock overhead that the time scale multiplies.
type scaleRun struct {
	Scale  float64
	Rows   []row
	Agree  bool
	Failed int
	// Means in simulated time: the simulator's token gap, vllm-sim's own ITL, the client's gap,
	// and TTFT on both sides.
	SimGap, EngineITL, LiveGap time.Duration
	LiveTTFT, SimTTFT          time.Duration
	// PacingWall is vllm-sim's ITL over the simulator's per token; HTTPWall the client's gap
	// over vllm-sim's ITL; TTFTWall the live TTFT mean over the simulator's per request.
	PacingWall, HTTPWall, TTFTWall time.Duration
	// TimerWall is the measured mean lateness of a Go timer as long as one step's wall time.
	TimerWall time.Duration
}

func newScaleRun(scale float64, rows []row, tol float64, live, simulated *workload.Summary, engineITL time.Duration, failed int) scaleRun {
	agree := true
	for _, r := range rows[:min(headline, len(rows))] {
		agree = agree && r.within(tol)
	}
	wall := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) / scale)) }
	r := scaleRun{Scale: scale, Rows: rows, Agree: agree, Failed: failed,
		SimGap: simulated.Gap.Mean, EngineITL: engineITL, LiveGap: live.Gap.Mean,
		LiveTTFT: live.TTFT.Mean, SimTTFT: simulated.TTFT.Mean}
	r.PacingWall = wall(engineITL - r.SimGap)
	r.HTTPWall = wall(r.LiveGap - engineITL)
	r.TTFTWall = wall(r.LiveTTFT - r.SimTTFT)
	return r
}

// writeOverhead prints where one scale's difference comes from.
func writeOverhead(w io.Writer, r *scaleRun, replay time.Duration) {
	fmt.Fprintln(w, "where the time goes (means, simulated time; wall = simulated / time scale):")
	fmt.Fprintf(w, "  token gap: simulator %s | vllm-sim's own ITL %s | client through Envoy %s\n", ms(r.SimGap), ms(r.EngineITL), ms(r.LiveGap))
	fmt.Fprintf(w, "    engine pacing (vllm-sim ITL - simulator): %+.2f ms/token = %+.3f ms wall\n", msf(r.EngineITL-r.SimGap), msf(r.PacingWall))
	fmt.Fprintf(w, "    Go timer lateness at one step's wall time (measured here): %.3f ms wall\n", msf(r.TimerWall))
	fmt.Fprintf(w, "    HTTP path (client gap - vllm-sim ITL):    %+.2f ms/token = %+.3f ms wall\n", msf(r.LiveGap-r.EngineITL), msf(r.HTTPWall))
	fmt.Fprintf(w, "  TTFT: live %s, simulator %s: %+.1f ms per request = %+.2f ms wall\n", ms(r.LiveTTFT), ms(r.SimTTFT), msf(r.LiveTTFT-r.SimTTFT), msf(r.TTFTWall))
	fmt.Fprintf(w, "  replay took %.1fs wall (%s simulated)\n", replay.Seconds(), toSimulated(replay, r.Scale).Round(time.Millisecond))
}

// writeVerdict prints one line per time scale and the explanation of any difference.
func writeVerdict(w io.Writer, o *options, runs []scaleRun, took time.Duration) error {
	fmt.Fprintf(w, "\n== summary (%s, fleet %s, tolerance %g %%)\n", sliceName(o), o.shape, o.tolerance*100)
	t := workload.Table{Header: []string{"time scale", "TTFT p50 diff %", "TPOT p50 diff %", "agree?",
		"pacing ms/token (wall)", "timer late ms (wall)", "HTTP ms/token (wall)", "TTFT excess ms (wall)"}}
	var agree, differ []string
	for _, r := range runs {
		v := "yes"
		if !r.Agree {
			v = "NO"
			differ = append(differ, fmt.Sprint(r.Scale))
		} else {
			agree = append(agree, fmt.Sprint(r.Scale))
		}
		t.Rows = append(t.Rows, []string{fmt.Sprint(r.Scale), fmt.Sprintf("%+.1f", 100*r.Rows[0].diff()), fmt.Sprintf("%+.1f", 100*r.Rows[1].diff()), v,
			fmt.Sprintf("%+.3f", msf(r.PacingWall)), fmt.Sprintf("%.3f", msf(r.TimerWall)), fmt.Sprintf("%+.3f", msf(r.HTTPWall)), fmt.Sprintf("%+.1f", msf(r.TTFTWall))})
	}
	if err := t.Write(w); err != nil {
		return err
	}
	if len(differ) > 0 {
		fmt.Fprint(w, explanation)
	}
	fmt.Fprintf(w, "\nverdict: agree within %g %% at time scale [%s], differ at [%s] (run took %.1fs)\n",
		o.tolerance*100, strings.Join(agree, " "), strings.Join(differ, " "), took.Seconds())
	return nil
}

// explanation is printed when a scale disagrees: it names the mechanism the columns measure.
const explanation = `
Why the live stack is slower than the simulator at high time scales: every live cost that is
paid in wall-clock time is multiplied by the time scale when it is converted to simulated time.
  - pacing: vllm-sim sleeps until each step's end (duration / time scale), then delivers the
    step's tokens, publishes its KV events and computes the next step. While it is busy its
    virtual clock advances by the modelled step durations only, so a late timer is absorbed by
    the next step's deadline; but when it falls behind by more than the next step, or after it
    was idle (the clock then jumps to the wall clock), wall-clock lateness becomes simulated
    time, x time scale: timer lateness ("timer late" measures it here, at one step's wall
    time) and the step's own work while Envoy, condisagg, the sidecar, the other simulators
    and loadgen share the 2 CPUs. "pacing ms/token (wall)" is that residue per token.
  - the HTTP path (Envoy, SSE framing, loopback) adds almost nothing per token: the client's
    token gaps match vllm-sim's own ITL.
  - TTFT excess: the pacing of the prefill, transfer and first decode steps, the ext_proc round
    trip and the pd-sidecar's two requests, and the queueing slower steps cause; slower live
    prefill also keeps prefill bookings longer, so the router sees the prefill pool busy
    (bypass_prefill_busy) where the simulator does not, and those requests prefill on decode.
A run at time scale 1 (no amplification) is the fair comparison of the models; the other
scales show how much of the difference the speed-up costs.
`

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
