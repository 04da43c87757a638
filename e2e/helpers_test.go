package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// scenarioTimeout bounds the waits of each scenario (and of each chaos scenario at the short
// size): generous for a two-core machine busy with -race builds beside the tests, as each wait
// ends on its own signal (a counter, a worker's state, an access-log line) long before.
const scenarioTimeout = 2 * time.Minute

func startStack(t *testing.T, cfg Config) *Stack {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts Envoy, condisagg and simulated workers; not in -short mode")
	}
	cfg.Bin, cfg.Dir = bin, t.TempDir()
	if cfg.TimeScale == 0 {
		cfg.TimeScale = timeScale
	}
	if os.Getenv("E2E_VERBOSE") != "" {
		cfg.EnvoyLog = os.Stderr
	}
	s, err := Start(t.Context(), cfg) // each process's start is bounded by startTimeout
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			s.LogOutputs(t)
		}
	})
	return s
}

func scenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// turn sends one chat turn through Envoy and returns the answer and which workers finished a
// request for it (vllm-sim /metrics).
func turn(t *testing.T, ctx context.Context, s *Stack, body []byte, hdr http.Header, served int) (*Response, map[string]int) {
	t.Helper()
	return turnVia(t, ctx, s, s.Envoy, body, hdr, served)
}

// turnVia is turn through the Envoy env.
func turnVia(t *testing.T, ctx context.Context, s *Stack, env *envoy.Process, body []byte, hdr http.Header, served int) (*Response, map[string]int) {
	t.Helper()
	before, err := s.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.ChatVia(ctx, env, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", r.Status, r.Body)
	}
	if !r.Done || r.Text == "" || r.Events < 3 {
		t.Fatalf("stream incomplete: done=%v events=%d text=%q", r.Done, r.Events, r.Text)
	}
	delta, err := s.WaitServed(ctx, before, served)
	if err != nil {
		t.Fatal(err)
	}
	return r, delta
}

// wantDecision checks the decision header echoed on the response.
func wantDecision(t *testing.T, r *Response, route, reason string) {
	t.Helper()
	if r.Decision.Route != route || r.Decision.Reason != reason {
		t.Fatalf("decision %q; want route=%s reason=%s", r.Decision.Raw, route, reason)
	}
}

// remoteDecode checks that a remote-path request was served by the prefill worker and one
// decode worker, and returns the decode worker.
func remoteDecode(t *testing.T, s *Stack, delta map[string]int) string {
	t.Helper()
	d := ""
	for name, n := range delta {
		if w := s.Worker(name); w != nil && w.Spec.Role == Decode && n == 1 {
			d = name
		}
	}
	if len(delta) != 2 || delta["prefill-0"] != 1 || d == "" {
		t.Fatalf("served %v; want prefill-0 and one decode worker once each", delta)
	}
	return d
}

// waitExplain polls `condisagg explain` until ok accepts the answer (the router has applied
// the KV events of earlier turns), and returns it.
func waitExplain(t *testing.T, ctx context.Context, s *Stack, body []byte, ok func(*condisaggv1.ExplainResponse) bool) *condisaggv1.ExplainResponse {
	t.Helper()
	var ex *condisaggv1.ExplainResponse
	err := Poll(ctx, func() error {
		var err error
		if ex, err = s.Explain(ctx, body); err != nil {
			return err
		}
		if !ok(ex) {
			return fmt.Errorf("explain: not there yet: %v", ex)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// waitWorker polls `condisagg workers` until ok accepts the named worker's state.
func waitWorker(t *testing.T, ctx context.Context, s *Stack, name, what string, ok func(*condisaggv1.Worker) bool) {
	t.Helper()
	err := Poll(ctx, func() error {
		w, err := s.WorkerStatus(ctx, name)
		if err != nil {
			return err
		}
		if !ok(w) {
			return fmt.Errorf("%s: not %s yet: %v", name, what, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func overlapOn(ex *condisaggv1.ExplainResponse, worker string) int64 {
	for _, o := range ex.Overlaps {
		if o.Worker == worker {
			return o.GpuBlocks
		}
	}
	return 0
}

func nextTurn(msgs []Message, answer string, seed uint64, words int) []Message {
	return append(append([]Message(nil), msgs...), Message{Role: "assistant", Content: answer},
		Message{Role: "user", Content: Words(seed, words)})
}

// forgedHeaders aims every routing header of the contract at addr.
func forgedHeaders(addr string) http.Header {
	h := http.Header{}
	for _, k := range []string{"x-gateway-destination-endpoint", "x-condisagg-decode-host", "x-condisagg-prefill-host", "x-prefiller-host-port"} {
		h.Set(k, addr)
	}
	h.Set("x-condisagg-route", "decode")
	h.Set("x-bypass-remote-prefill", "true")
	h.Set("x-condisagg-decision", "route=decode;reason=bypass_isl")
	return h
}

// canary is an HTTP server that must never receive a request. Its port comes from a bind of
// port 0, so it may be one another process on the machine still dials as dead: an HTTP/2
// connection preface ("PRI *") is such a stranger (a gRPC client, say an Envoy of another
// test whose condisagg port was released), as nothing of the stack reaches a worker address
// over HTTP/2; it is logged, not counted.
func canary(t *testing.T) (string, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PRI" && r.ProtoMajor == 2 {
			t.Logf("canary: not counted: an HTTP/2 preface from outside the test")
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &hits
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// wantAPIError checks an OpenAI-style error answered through Envoy.
func wantAPIError(t *testing.T, r *Response, status int, code, mention string) {
	t.Helper()
	var e apiError
	if r.Status != status || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(r.Body, &e) != nil {
		t.Fatalf("got %d %q %s; want %d with a JSON error body", r.Status, r.Header.Get("Content-Type"), r.Body, status)
	}
	if e.Error.Code != code || r.Header.Get("X-Condisagg-Error") != code || e.Error.Type == "" ||
		!strings.Contains(e.Error.Message, mention) {
		t.Fatalf("error %+v (x-condisagg-error %q); want code %s mentioning %q", e.Error, r.Header.Get("X-Condisagg-Error"), code, mention)
	}
}
