package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// runConfig is one replay's settings; validated by parseFlags.
type runConfig struct {
	url         string // full URL of the completions endpoint
	model       string
	vocab       workload.Vocab
	concurrency int     // most requests in flight
	rate        float64 // most requests started per second; 0: no limit
	// closedLoop sends a session's later turn ThinkTime after its previous turn completes
	// (and not before its nominal arrival); otherwise every request goes at its arrival.
	closedLoop     bool
	requestTimeout time.Duration
	maxGaps        int // token gaps kept per request
}

// runner replays a workload against one endpoint. Its goroutines are owned by run: every one
// has returned when run does.
type runner struct {
	cfg    runConfig
	client *http.Client
	start  time.Time
	sem    chan struct{} // one token per in-flight request

	mu   sync.Mutex // guards next
	next time.Time  // earliest start of the next request under the rate limit

	results []workload.Result // one per request, each written by the goroutine sending it
	lags    []time.Duration   // send time − scheduled time, per request
}

func newRunner(cfg runConfig, client *http.Client, n int) *runner {
	r := &runner{cfg: cfg, client: client, sem: make(chan struct{}, cfg.concurrency),
		results: make([]workload.Result, n), lags: make([]time.Duration, n)}
	return r
}

// run replays reqs (in arrival order) and returns one Result per request, and each request's
// send lag; requests not sent because ctx ended carry Err "not sent". Result arrivals are
// actual send times. The dispatcher takes an in-flight slot before it starts a request's
// goroutine, so open-loop replay has at most concurrency goroutines; closed-loop replay adds
// one per live session (waiting out think times without a slot).
func (r *runner) run(ctx context.Context, reqs []workload.Request) ([]workload.Result, []time.Duration) {
	r.start = time.Now()
	r.next = r.start
	for i := range reqs {
		r.results[i] = workload.Result{Index: reqs[i].Index, Arrival: reqs[i].Arrival, InputTokens: reqs[i].InputTokens, Err: "not sent"}
	}
	next := nextTurns(reqs)
	var wg sync.WaitGroup
	for i := range reqs {
		if r.cfg.closedLoop && reqs[i].Parent >= 0 {
			continue // its session's goroutine sends it
		}
		if !r.waitUntil(ctx, reqs[i].Arrival) || !r.admit(ctx) {
			break
		}
		wg.Go(func() {
			r.issue(ctx, &reqs[i], reqs[i].Arrival)
			if r.cfg.closedLoop {
				r.session(ctx, reqs, next, i)
			}
		})
	}
	wg.Wait()
	r.client.CloseIdleConnections()
	return r.results, r.lags
}

// nextTurns maps each request to the next turn of its session (the request whose Parent it
// is), or -1.
func nextTurns(reqs []workload.Request) []int {
	next := make([]int, len(reqs))
	for i := range next {
		next[i] = -1
	}
	for j := range reqs {
		if p := reqs[j].Parent; p >= 0 && p < j && next[p] < 0 {
			next[p] = j
		}
	}
	return next
}

// session sends the later turns of the session whose previous turn is reqs[i], each
// ThinkTime after the previous one completes and not before its own arrival.
func (r *runner) session(ctx context.Context, reqs []workload.Request, next []int, i int) {
	for j := next[i]; j >= 0; i, j = j, next[j] {
		prev := &r.results[i]
		ready := prev.Arrival + prev.E2E + reqs[j].ThinkTime
		if prev.Err != "" {
			ready = time.Since(r.start) + reqs[j].ThinkTime
		}
		due := max(ready, reqs[j].Arrival)
		if !r.waitUntil(ctx, due) || !r.admit(ctx) {
			return
		}
		r.issue(ctx, &reqs[j], due)
	}
}

// waitUntil blocks until offset d from the start; false if ctx ended first.
func (r *runner) waitUntil(ctx context.Context, d time.Duration) bool {
	wait := time.Until(r.start.Add(d))
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// admit waits for an in-flight slot and for the rate limit; false if ctx ended first. On
// true the caller owns a slot and must release it.
func (r *runner) admit(ctx context.Context) bool {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if r.cfg.rate > 0 {
		r.mu.Lock()
		at := r.next
		if now := time.Now(); now.After(at) {
			at = now
		}
		r.next = at.Add(time.Duration(float64(time.Second) / r.cfg.rate))
		r.mu.Unlock()
		if !r.waitUntil(ctx, at.Sub(r.start)) {
			<-r.sem
			return false
		}
	}
	return true
}

// issue sends req on an admitted slot, records its result and releases the slot.
func (r *runner) issue(ctx context.Context, req *workload.Request, due time.Duration) {
	defer func() { <-r.sem }()
	res := r.do(ctx, req)
	r.lags[req.Index] = res.Arrival - due
	r.results[req.Index] = res
}

// do sends one request and measures its stream. Arrival is the send time, taken once the
// body is built.
func (r *runner) do(ctx context.Context, req *workload.Request) workload.Result {
	res := workload.Result{Index: req.Index, InputTokens: req.InputTokens, CachedTokens: -1, Arrival: time.Since(r.start)}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	defer cancel()
	body := workload.AppendCompletionBody(nil, r.cfg.vocab, req, workload.BodyOptions{Model: r.cfg.model, Stream: true})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.url, bytes.NewReader(body))
	if err != nil {
		res.Err = fmt.Sprintf("request %d: %v", req.Index, err)
		return res
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	res.Arrival = t0.Sub(r.start)
	resp, err := r.client.Do(hreq)
	if err != nil {
		res.Err = fmt.Sprintf("request %d: %v", req.Index, err)
		return res
	}
	defer resp.Body.Close()
	res.Route, res.Reason = parseDecision(resp.Header.Get(headerDecision))
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		res.Err = fmt.Sprintf("request %d: status %d: %s", req.Index, resp.StatusCode, bytes.TrimSpace(msg))
		return res
	}
	st, err := readStream(resp.Body, func() time.Duration { return time.Since(t0) }, r.cfg.maxGaps)
	res.TTFT, res.E2E, res.OutputTokens, res.Gaps, res.CachedTokens = st.first, st.last, st.tokens(), st.gaps, st.cached
	switch {
	case err != nil:
		res.Err = fmt.Sprintf("request %d: %v", req.Index, err)
	case ctx.Err() != nil:
		res.Err = fmt.Sprintf("request %d: %v", req.Index, context.Cause(ctx))
	case st.chunks == 0:
		res.Err = fmt.Sprintf("request %d: stream had no output", req.Index)
	}
	return res
}
