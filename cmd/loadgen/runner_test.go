package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// Measured TTFT and TPOT match the server's pacing: TTFT >= 80 ms within a scheduling tolerance,
// TPOT at least the 20 ms asked for and within a tolerance of the gaps the server really left
// between its flushes (a loaded machine stretches the server's timers, not the measurement);
// prompts arrive with the request's token count.
func TestMeasuresTTFTAndTPOT(t *testing.T) {
	s := &tokenServer{ttft: constant(80 * time.Millisecond), tpot: constant(20 * time.Millisecond)}
	srv := s.start(t)
	reqs := mkRequests(4, func(i int) int { return 6 + i }, func(i int) time.Duration { return time.Duration(i) * 10 * time.Millisecond })
	results, _ := newTestRunner(testConfig(srv.URL), len(reqs)).run(t.Context(), reqs)
	const tol = 60 * time.Millisecond
	for i, r := range results {
		if r.Err != "" || r.OutputTokens != 6+i {
			t.Fatalf("request %d: err %q, %d tokens", i, r.Err, r.OutputTokens)
		}
		if r.TTFT < 80*time.Millisecond || r.TTFT > 80*time.Millisecond+tol {
			t.Errorf("request %d: TTFT %v, want 80ms (+%v)", i, r.TTFT, tol)
		}
		tpot, _ := r.TPOT()
		if sent := s.sentTPOT(6 + i); tpot < 18*time.Millisecond || sent < 20*time.Millisecond || (tpot-sent).Abs() > tol/3 {
			t.Errorf("request %d: TPOT %v; the server flushed a token every %v (asked 20ms)", i, tpot, sent)
		}
		if len(r.Gaps) != r.OutputTokens-1 {
			t.Errorf("request %d: %d gaps for %d tokens", i, len(r.Gaps), r.OutputTokens)
		}
		if s.prompts[6+i] != 100+i {
			t.Errorf("request %d: server saw a %d-token prompt, want %d", i, s.prompts[6+i], 100+i)
		}
	}
	if results[3].Arrival < 30*time.Millisecond {
		t.Errorf("request 3 sent at %v, before its 30ms arrival", results[3].Arrival)
	}
}

// Goodput counts exactly the requests meeting both SLO parts: odd requests stream at 200 ms
// per token and miss tpot=100ms; even ones at 1 ms meet it (with room for a loaded machine's
// timer delays).
func TestGoodputUnderSLO(t *testing.T) {
	s := &tokenServer{ttft: constant(10 * time.Millisecond), tpot: func(n int) time.Duration {
		if n%2 == 1 {
			return 200 * time.Millisecond
		}
		return time.Millisecond
	}}
	srv := s.start(t)
	reqs := mkRequests(6, func(i int) int { return 4 + i }, func(int) time.Duration { return 0 })
	results, _ := newTestRunner(testConfig(srv.URL), len(reqs)).run(t.Context(), reqs)
	slo := workload.SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond}
	sum := workload.Summarize("t", results, slo, workload.SteadyState{})
	if sum.Completed != 6 || sum.Attainment != 0.5 {
		t.Fatalf("completed %d attainment %v; want 6 and 0.5 (%s)", sum.Completed, sum.Attainment, errorsOf(results))
	}
	if good := sum.Goodput * sum.Window.Seconds(); math.Abs(good-3) > 1e-6 {
		t.Fatalf("goodput %v over %v counts %v requests, want 3", sum.Goodput, sum.Window, good)
	}
	// Window: first send -> last completion; the slowest is request 5, 9 tokens at 200 ms.
	if sum.Window < 8*200*time.Millisecond {
		t.Fatalf("window %v shorter than the slowest stream", sum.Window)
	}
}

// At most --concurrency requests are in flight, and the limit is reached.
func TestConcurrencyLimit(t *testing.T) {
	s := &tokenServer{ttft: constant(30 * time.Millisecond), tpot: constant(5 * time.Millisecond)}
	srv := s.start(t)
	cfg := testConfig(srv.URL)
	cfg.concurrency = 3
	reqs := mkRequests(12, func(int) int { return 3 }, func(int) time.Duration { return 0 })
	results, _ := newTestRunner(cfg, len(reqs)).run(t.Context(), reqs)
	if e := errorsOf(results); e != "" {
		t.Fatal(e)
	}
	if s.maxInflight != 3 {
		t.Fatalf("server saw at most %d requests in flight, want exactly 3", s.maxInflight)
	}
}

// --rate admits the k-th request no earlier than k/rate after the start, even when every
// request is due at once.
func TestRateLimit(t *testing.T) {
	s := &tokenServer{ttft: constant(time.Millisecond), tpot: constant(time.Millisecond)}
	srv := s.start(t)
	cfg := testConfig(srv.URL)
	cfg.rate = 40 // 25 ms apart
	reqs := mkRequests(8, func(int) int { return 2 }, func(int) time.Duration { return 0 })
	results, lags := newTestRunner(cfg, len(reqs)).run(t.Context(), reqs)
	if e := errorsOf(results); e != "" {
		t.Fatal(e)
	}
	for i, r := range results {
		if min := time.Duration(i) * 25 * time.Millisecond; r.Arrival < min {
			t.Fatalf("request %d sent at %v, want >= %v", i, r.Arrival, min)
		}
	}
	// About 175 ms; the bound only catches a limiter far slower than its rate (under 8/s), since
	// a loaded 2-core machine can delay the sends by hundreds of milliseconds.
	if span := results[7].Arrival - results[0].Arrival; span > time.Second {
		t.Fatalf("8 requests at 40/s took %v to start, want about 175ms", span)
	}
	if lags[7] < 7*25*time.Millisecond-time.Millisecond {
		t.Fatalf("last request's send lag %v, want >= 175ms behind its arrival", lags[7])
	}
}

// Decision headers are counted per route and reason; error statuses count as failures.
func TestRoutesAndFailures(t *testing.T) {
	s := &tokenServer{ttft: constant(time.Millisecond), tpot: constant(time.Millisecond),
		decision: func(n int) string {
			if n%2 == 0 {
				return "route=decode;reason=bypass_isl;isl=100;eff_isl=10;overlap_blocks=5"
			}
			return "route=prefill;reason=remote_ratio_too_high;isl=101;eff_isl=101;overlap_blocks=0"
		},
		status: func(n int) int {
			if n == 7 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}}
	srv := s.start(t)
	reqs := mkRequests(6, func(i int) int { return 2 + i }, func(int) time.Duration { return 0 })
	results, _ := newTestRunner(testConfig(srv.URL), len(reqs)).run(t.Context(), reqs)
	sum := workload.Summarize("t", results, workload.SLO{}, workload.SteadyState{})
	if sum.Routes["decode"] != 3 || sum.Routes["prefill"] != 3 || sum.Reasons["bypass_isl"] != 3 || sum.Reasons["remote_ratio_too_high"] != 3 {
		t.Fatalf("routes %v reasons %v", sum.Routes, sum.Reasons)
	}
	if sum.Failed != 1 || !strings.Contains(results[5].Err, "status 503") {
		t.Fatalf("failed %d, request 5 err %q; want the 503 counted", sum.Failed, results[5].Err)
	}
}

// Cancelling the context stops the dispatcher and the in-flight streams; unsent requests
// are reported as such and run returns.
func TestCancellation(t *testing.T) {
	s := &tokenServer{ttft: constant(time.Hour), tpot: constant(time.Hour), received: make(chan int, 16)}
	srv := s.start(t)
	ctx, cancel := context.WithCancel(t.Context())
	reqs := mkRequests(5, func(int) int { return 3 }, func(i int) time.Duration { return time.Duration(i) * time.Hour })
	done := make(chan []workload.Result)
	go func() {
		rs, _ := newTestRunner(testConfig(srv.URL), len(reqs)).run(ctx, reqs)
		done <- rs
	}()
	<-s.received // request 0 is streaming (its first token is an hour away)
	cancel()
	rs := <-done
	if !strings.Contains(rs[0].Err, "context canceled") || rs[1].Err != "not sent" || rs[4].Err != "not sent" {
		t.Fatalf("errors after cancel: %s", errorsOf(rs))
	}
}

// Closed loop: a session's next turn is sent its think time after the previous completes.
func TestClosedLoopSessions(t *testing.T) {
	s := &tokenServer{ttft: constant(20 * time.Millisecond), tpot: constant(10 * time.Millisecond)}
	srv := s.start(t)
	reqs := mkRequests(4, func(i int) int { return 3 + i }, func(i int) time.Duration { return time.Duration(i) * time.Millisecond })
	// Session 0: requests 0 -> 2; session 1: 1 -> 3. Think 30 ms.
	for i := range reqs {
		reqs[i].Session, reqs[i].Turn = int64(i%2), i/2
		if i >= 2 {
			reqs[i].Parent, reqs[i].ThinkTime = i-2, 30*time.Millisecond
		}
	}
	cfg := testConfig(srv.URL)
	cfg.closedLoop = true
	rs, _ := newTestRunner(cfg, len(reqs)).run(t.Context(), reqs)
	if e := errorsOf(rs); e != "" {
		t.Fatal(e)
	}
	for _, c := range []int{2, 3} {
		p := rs[c-2]
		if ready := p.Arrival + p.E2E + 30*time.Millisecond; rs[c].Arrival < ready {
			t.Fatalf("turn %d sent at %v, before parent completion + think %v", c, rs[c].Arrival, ready)
		}
	}
}
