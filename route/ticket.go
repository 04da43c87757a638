package route

import (
	"time"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/policy"
)

// Ticket is one routed request's life after its decision: what it booked, when it was decided,
// and what the slo controller and the role advice learn from its answer. The server (extproc,
// on the wall clock) and the simulator (cluster, on its virtual clock) only report the events
// of the answer, each with its own clock; the ticket releases the booking at the right one and
// does the TTFT and TPOT arithmetic, so the two cannot drift apart (internal/golden holds them
// to the same feedback state).
//
// Events after the end (Finish or Cancel) are no-ops, and every release happens at most once,
// so a caller may report what it sees without tracking what was already released. A Ticket
// has one owner: its methods are not safe for concurrent use (the booking it releases is).
// The methods of a nil *Ticket (nothing was booked) do nothing.
type Ticket struct {
	r       *Router
	m       *model
	booking string
	route   policy.Route
	// forecastTTFT and forecastTPOT are the cost model's uncorrected forecasts (feedback.Forecasts, in
	// ms; 0: no forecast chose the placement, so the controller learns nothing from it).
	forecastTTFT, forecastTPOT float64
	// objTTFT and objTPOT are the request's objective (feedback.Objectives, in ms): the
	// controller learns only the error beyond it.
	objTTFT, objTPOT           float64
	decided                    time.Time // the router's clock when the booking was made
	first                      time.Time // a streamed answer's first token; zero before
	sawFirst                   bool      // FirstToken ran
	prefillFreed, freed, ended bool
}

// newTicket is the ticket of booking id on model m, decided at now.
func (r *Router) newTicket(m *model, id string, dec *policy.Decision, now time.Time) *Ticket {
	t := &Ticket{r: r, m: m, booking: id, route: dec.Route, decided: now}
	t.forecastTTFT, t.forecastTPOT = feedback.Forecasts(dec, dec.Route)
	t.objTTFT, t.objTPOT = feedback.Objectives(dec)
	return t
}

// BookingID is the pool booking the ticket holds ("" for a nil ticket).
func (t *Ticket) BookingID() string {
	if t == nil {
		return ""
	}
	return t.booking
}

// Ended reports whether Finish or Cancel ran (true for a nil ticket: nothing to follow).
func (t *Ticket) Ended() bool { return t == nil || t.ended }

// PrefillDone: the request's prefill leg is over (pd-sidecar's x-condisagg-prefill-ms on the
// response headers; the simulator's prefill engine finishing). The prefill entry ends now: the
// prefill worker is free, and holding its load until the decode worker's first token would make
// a congested decode pool look like a busy prefill pool (conditional-disagg.md §5.2).
func (t *Ticket) PrefillDone() {
	if t == nil || t.ended {
		return
	}
	t.releasePrefill()
}

// FirstToken: the answer's first output token reached the gateway at now. The prefill entry
// ends, and it returns the time since the decision. A streamed answer's first token is a TTFT,
// which the slo controller compares with its forecast; a non-streamed answer arrives whole (its
// headers come with its last token), so its time is neither a TTFT nor the start of a TPOT.
// Only the first call counts.
func (t *Ticket) FirstToken(now time.Time, streamed bool) (sinceDecision time.Duration, first bool) {
	if t == nil || t.ended || t.sawFirst {
		return 0, false
	}
	t.sawFirst = true
	t.releasePrefill()
	ttft := now.Sub(t.decided)
	if !streamed {
		return ttft, true
	}
	t.first = now
	if t.forecastTTFT > 0 {
		t.learn(feedback.MetricTTFT, t.forecastTTFT, t.objTTFT, ttft)
	}
	return ttft, true
}

// Finish: the answer completed at now with outputTokens output tokens (the usage's
// completion_tokens, else the tokens seen; 0: unknown). The role advice counts the output
// length; a streamed answer with two tokens or more gives the controller its TPOT, the first
// token to the last over the tokens after the first; the booking ends.
func (t *Ticket) Finish(now time.Time, outputTokens int) {
	if t == nil || t.ended {
		return
	}
	t.r.learner.ObserveOutput(outputTokens)
	t.m.fleet.Output(now, fleetPool(t.route), outputTokens)
	if t.forecastTPOT > 0 && !t.first.IsZero() && outputTokens >= 2 {
		t.learn(feedback.MetricTPOT, t.forecastTPOT, t.objTPOT, now.Sub(t.first)/time.Duration(outputTokens-1))
	}
	t.end()
}

// Cancel: the answer failed, was cut, or went where it was not sent; the booking ends and the
// controller learns nothing from it.
func (t *Ticket) Cancel() {
	if t == nil || t.ended {
		return
	}
	t.end()
}

// Release frees the booking now but keeps following the answer: extproc's
// unanswered_booking_timeout, for an answer so late that the load it stands for must not be
// held any longer; its first token and finish still teach the controller.
func (t *Ticket) Release() {
	if t == nil || t.freed {
		return
	}
	t.freed, t.prefillFreed = true, true
	t.m.pool.Release(t.booking)
}

func (t *Ticket) end() {
	t.ended = true
	t.Release()
}

func (t *Ticket) releasePrefill() {
	if t.prefillFreed {
		return
	}
	t.prefillFreed = true
	t.m.pool.ReleasePrefill(t.booking)
}

// learn feeds the controller one observed latency beside its forecast and objective (ms).
func (t *Ticket) learn(m feedback.Metric, forecastMS, objectiveMS float64, observed time.Duration) {
	bound := t.r.policy.Load().Disagg.SLOFeedbackMax
	t.r.learner.ObserveLatency(t.route, m, forecastMS, float64(observed)/float64(time.Millisecond), objectiveMS, bound)
}
