package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/leakcheck"

	"github.com/condisagg/condisagg/workload"
)

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// tokenServer is a real SSE completions server that emits max_tokens tokens, the first after
// ttft and each later one tpot after the previous, timed per request by max_tokens.
type tokenServer struct {
	ttft, tpot func(maxTokens int) time.Duration
	status     func(maxTokens int) int    // nil: 200
	decision   func(maxTokens int) string // x-condisagg-decision value; nil: none
	received   chan int                   // if set, gets each request's max_tokens on arrival

	mu          sync.Mutex // guards the fields below
	inflight    int
	maxInflight int
	arrivals    []time.Time
	prompts     map[int]int         // max_tokens -> prompt length
	sent        map[int][]time.Time // max_tokens -> when each token was flushed
}

// sentTPOT is the mean gap between the tokens the server really flushed for the request of
// maxTokens: the pacing the client should measure, whatever the machine's load did to the
// server's timers.
func (s *tokenServer) sentTPOT(maxTokens int) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.sent[maxTokens]
	if len(ts) < 2 {
		return 0
	}
	return ts[len(ts)-1].Sub(ts[0]) / time.Duration(len(ts)-1)
}

func (s *tokenServer) start(t *testing.T) *httptest.Server {
	t.Helper()
	s.prompts, s.sent = map[int]int{}, map[int][]time.Time{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt    []uint32 `json:"prompt"`
		MaxTokens int      `json:"max_tokens"`
		Stream    bool     `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream || r.URL.Path != "/v1/completions" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	s.arrivals = append(s.arrivals, time.Now())
	s.prompts[body.MaxTokens] = len(body.Prompt)
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.inflight--; s.mu.Unlock() }()
	if s.received != nil {
		s.received <- body.MaxTokens
	}
	if s.decision != nil {
		w.Header().Set(headerDecision, s.decision(body.MaxTokens))
	}
	if s.status != nil {
		if code := s.status(body.MaxTokens); code != http.StatusOK {
			http.Error(w, `{"error":"busy"}`, code)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for k := range body.MaxTokens {
		d := s.tpot(body.MaxTokens)
		if k == 0 {
			d = s.ttft(body.MaxTokens)
		}
		if !pause(r, d) {
			return
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", k)
		fl.Flush()
		s.mu.Lock()
		s.sent[body.MaxTokens] = append(s.sent[body.MaxTokens], time.Now())
		s.mu.Unlock()
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", len(body.Prompt), body.MaxTokens)
}

// pause paces the server's token emission; false if the client went away.
func pause(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func constant(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// mkRequests builds n requests with prompts of 100+i tokens, outputs out(i), at arrival(i).
func mkRequests(n int, out func(i int) int, arrival func(i int) time.Duration) []workload.Request {
	reqs := make([]workload.Request, n)
	for i := range reqs {
		reqs[i] = workload.Request{Index: i, Arrival: arrival(i), Session: -1, Turn: -1, Parent: -1,
			InputTokens: 100 + i, OutputTokens: out(i), Prompt: []workload.Segment{{ID: uint64(i), Len: uint32(100 + i)}}}
	}
	return reqs
}

func testConfig(url string) runConfig {
	return runConfig{url: url + "/v1/completions", model: "m", vocab: workload.DefaultVocab(), concurrency: 16,
		requestTimeout: 30 * time.Second, maxGaps: 1 << 10}
}

func newTestRunner(cfg runConfig, n int) *runner {
	return newRunner(cfg, &http.Client{Transport: &http.Transport{}}, n)
}

func errorsOf(rs []workload.Result) string {
	var b strings.Builder
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(&b, "%d: %s; ", r.Index, r.Err)
		}
	}
	return b.String()
}
