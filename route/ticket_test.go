package route

import (
	"context"
	"testing"
	"time"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/policy"
)

// recordingLearner keeps what tickets report.
type recordingLearner struct {
	latencies []sample
	outputs   []int
}

type sample struct {
	rt                   policy.Route
	m                    feedback.Metric
	forecast, observedMS float64
	objectiveMS          float64
}

func (l *recordingLearner) Corrections() [policy.NumRoutes]policy.Correction {
	return [policy.NumRoutes]policy.Correction{}
}
func (l *recordingLearner) ObserveRouted(int, int64) {}
func (l *recordingLearner) ObserveOutput(n int)      { l.outputs = append(l.outputs, n) }
func (l *recordingLearner) ObserveLatency(rt policy.Route, m feedback.Metric, f, o, obj, _ float64) {
	l.latencies = append(l.latencies, sample{rt, m, f, o, obj})
}

// TestTicketLifecycle: a ticket releases the prefill entry at the prefill leg's end or the
// first token, everything at the end, each once; it learns TTFT from the decision to a
// streamed first token and TPOT from the first token to the end over the tokens after the
// first; a non-streamed answer teaches no latency; Cancel teaches nothing; Release frees the
// booking early and keeps learning.
func TestTicketLifecycle(t *testing.T) {
	sloCfg := enabledConfig()
	d, err := policy.ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100"}`))
	if err != nil {
		t.Fatal(err)
	}
	sloCfg.Disagg = d
	decide := func(t *testing.T, isl int) (*Ticket, *recordingLearner, func() (reqs, prefill int64)) {
		t.Helper()
		l := &recordingLearner{}
		now := testNow
		r, p := testRouterWith(t, Options{Learner: l, Now: func() time.Time { return now }})
		if err := r.SetPolicy(&sloCfg); err != nil {
			t.Fatal(err)
		}
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: prompt(isl)})
		if err != nil || out.Ticket == nil || out.Ticket.BookingID() != out.BookingID {
			t.Fatalf("decision %+v %v: want a ticket for its booking", out.Record(), err)
		}
		load := func() (reqs, prefill int64) {
			for _, w := range p.Workers() {
				reqs += w.ActiveRequests
				prefill += w.ActivePrefillTokens
			}
			return reqs, prefill
		}
		if _, pf := load(); pf == 0 {
			t.Fatalf("route %s booked no prefill tokens", out.Route)
		}
		return out.Ticket, l, load
	}
	t.Run("streamed", func(t *testing.T) {
		tk, l, load := decide(t, 3000)
		ttft, first := tk.FirstToken(testNow.Add(300*time.Millisecond), true)
		if !first || ttft != 300*time.Millisecond {
			t.Fatalf("first token: %v %v", ttft, first)
		}
		if _, again := tk.FirstToken(testNow.Add(time.Second), true); again {
			t.Fatal("a second first token counted")
		}
		if reqs, pf := load(); reqs != 1 || pf != 0 {
			t.Fatalf("after the first token: %d requests, %d prefill tokens; want 1 and 0", reqs, pf)
		}
		tk.Finish(testNow.Add(300*time.Millisecond+99*20*time.Millisecond), 100)
		tk.Finish(testNow.Add(time.Hour), 100)
		tk.Cancel()
		if reqs, _ := load(); reqs != 0 || !tk.Ended() {
			t.Fatalf("after the end: %d requests held, ended %v", reqs, tk.Ended())
		}
		if len(l.latencies) != 2 || l.latencies[0].m != feedback.MetricTTFT || l.latencies[0].observedMS != 300 ||
			l.latencies[1].m != feedback.MetricTPOT || l.latencies[1].observedMS != 20 || l.latencies[0].forecast <= 0 ||
			l.latencies[0].objectiveMS != 2000 || l.latencies[1].objectiveMS != 100 {
			t.Fatalf("latencies %+v, want TTFT 300 ms then TPOT 20 ms with forecasts and the objective 2000/100 ms", l.latencies)
		}
		if len(l.outputs) != 1 || l.outputs[0] != 100 {
			t.Fatalf("outputs %v, want [100]", l.outputs)
		}
	})
	t.Run("non_streamed", func(t *testing.T) {
		tk, l, load := decide(t, 3000)
		if ttft, first := tk.FirstToken(testNow.Add(2*time.Second), false); !first || ttft != 2*time.Second {
			t.Fatalf("whole answer: %v %v", ttft, first)
		}
		if _, pf := load(); pf != 0 {
			t.Fatal("prefill entry held after the answer's headers")
		}
		tk.Finish(testNow.Add(2*time.Second), 100)
		if len(l.latencies) != 0 || len(l.outputs) != 1 {
			t.Fatalf("a non-streamed answer taught latencies %+v, outputs %v; want none and [100]", l.latencies, l.outputs)
		}
	})
	t.Run("prefill_done_then_cancel", func(t *testing.T) {
		tk, l, load := decide(t, 3000)
		tk.PrefillDone()
		if reqs, pf := load(); reqs != 1 || pf != 0 {
			t.Fatalf("after the prefill leg: %d requests, %d prefill tokens", reqs, pf)
		}
		tk.Cancel()
		tk.Finish(testNow.Add(time.Second), 10)
		if reqs, _ := load(); reqs != 0 || len(l.latencies) != 0 || len(l.outputs) != 0 {
			t.Fatalf("cancelled: %d requests held, learned %+v %v", reqs, l.latencies, l.outputs)
		}
	})
	t.Run("released_early_keeps_learning", func(t *testing.T) {
		tk, l, load := decide(t, 3000)
		tk.Release()
		if reqs, _ := load(); reqs != 0 || tk.Ended() {
			t.Fatalf("after Release: %d requests held, ended %v", reqs, tk.Ended())
		}
		tk.FirstToken(testNow.Add(time.Second), true)
		tk.Finish(testNow.Add(2*time.Second), 2)
		if len(l.latencies) != 2 || len(l.outputs) != 1 {
			t.Fatalf("a late answer taught %+v %v; want TTFT, TPOT and its output", l.latencies, l.outputs)
		}
	})
	t.Run("nil", func(t *testing.T) {
		var tk *Ticket
		tk.PrefillDone()
		tk.FirstToken(testNow, true)
		tk.Finish(testNow, 3)
		tk.Release()
		tk.Cancel()
		if !tk.Ended() || tk.BookingID() != "" {
			t.Fatal("a nil ticket is not over")
		}
	})
}
