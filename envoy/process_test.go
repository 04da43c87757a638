package envoy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "condisagg/internal/proc.", "condisagg/envoy.(*testProcessor)", "condisagg/envoy.(*testStream)")
}

// upstream is a loopback HTTP server standing in for a worker; it records the requests of its
// own test that reached it.
type upstream struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	reqs chan seenRequest // buffered; one entry per request
}

// originHeader names the test a request comes from: send sets it to origin(t), and an upstream
// counts and records only requests that carry its own test's origin. A request without it comes
// from outside the test: some process on the machine dialling an address it holds for dead or
// for its own (a released port, a killed worker's) that the kernel has since handed to this
// upstream's listener. Such a request is logged and answered 421, never counted, so a canary
// fails its test only on a request that test sent.
const originHeader = "x-test-origin"

func origin(t *testing.T) string { return strconv.Itoa(os.Getpid()) + " " + t.Name() }

type seenRequest struct {
	method, path  string
	bodySHA       [32]byte
	contentLength int64
	header        http.Header
	body          []byte
}

func newUpstream(t *testing.T, name string) *upstream {
	t.Helper()
	u := &upstream{name: name, reqs: make(chan seenRequest, 64)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" { // Envoy's active health check of decode_fallback
			return
		}
		if got := r.Header.Get(originHeader); got != origin(t) {
			t.Logf("%s: not counted: %s %s from outside this test (%s %q)", name, r.Method, r.URL.Path, originHeader, got)
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		u.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		select {
		case u.reqs <- seenRequest{r.Method, r.URL.Path, sha256.Sum256(body), r.ContentLength, r.Header.Clone(), body}:
		default:
		}
		// Three flushed chunks, as a streamed completion would arrive.
		w.Header().Set("content-type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"served_by\":%q,\"chunk\":%d}\n\n", name, i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) endpoint(t *testing.T) Endpoint {
	t.Helper()
	e, err := ParseEndpoint(u.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// startEnvoy renders p, starts the real Envoy on it and stops it when the test ends.
func startEnvoy(t *testing.T, p Params) *Process {
	t.Helper()
	bin := envoyBin(t)
	path, err := WriteBootstrap(t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	proc, err := Start(ctx, bin, path, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proc.Stop(); err != nil {
			t.Errorf("stop envoy: %v\n%s", err, proc.Output())
		}
	})
	return proc
}

// forged are router headers a client might send to pick a host (all must be stripped).
func forged(canary string) map[string]string {
	return map[string]string{
		"x-condisagg-route":              "prefill",
		"X-Condisagg-Decode-Host":        canary,
		"x-condisagg-prefill-host":       canary,
		"x-gateway-destination-endpoint": canary,
		"x-prefiller-host-port":          canary,
		"x-bypass-remote-prefill":        "true",
	}
}

type result struct {
	status int
	body   string
	header http.Header
}

func send(t *testing.T, proc *Process, method, path string, body []byte, headers map[string]string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+proc.ListenerAddr("llm")+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(originHeader, origin(t))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s through Envoy: %v\nenvoy output:\n%s", method, path, err, proc.Output())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return result{resp.StatusCode, string(b), resp.Header}
}

// expectServed checks the request u received; wantLength is the Content-Length it should carry
// (-1: none, the body came chunked).
func expectServed(t *testing.T, u *upstream, method, path string, body []byte, wantLength int64) seenRequest {
	t.Helper()
	select {
	case r := <-u.reqs:
		if r.method != method || r.path != path || r.bodySHA != sha256.Sum256(body) {
			t.Errorf("%s got %s %s (body sha %x); want %s %s with the client's body", u.name, r.method, r.path, r.bodySHA[:4], method, path)
		}
		if body != nil && r.contentLength != wantLength {
			t.Errorf("%s got Content-Length %d; want %d", u.name, r.contentLength, wantLength)
		}
		return r
	default:
		t.Fatalf("%s received no request; want %s %s", u.name, method, path)
		return seenRequest{}
	}
}

func chatBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"`)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "word%d ", i)
	}
	b.WriteString(`"}]}`)
	return b.Bytes()
}

// TestEnvoyRoutesOnExtProcDecision runs the real Envoy, in each body mode, in front of a minimal
// ext_proc server: the decision headers select the prefill or decode cluster and the exact
// upstream address, the body arrives unchanged with its Content-Length, the streamed answer comes
// back whole, and forged client headers never reach ext_proc, the upstream, or the canary they
// point at. In STREAMED mode the route is fixed before the body, so everything goes to decode.
func TestEnvoyRoutesOnExtProcDecision(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode      BodyMode
		failOpen  bool
		remoteFor string // the path routed to prefill
	}{
		{Buffered, FailOpen, "/v1/completions"},
		{Streamed, FailOpen, ""},
		{FullDuplex, FailClosed, "/v1/completions"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			routeThroughEnvoy(t, testParams(c.mode, c.failOpen), c.remoteFor)
		})
	}
}

func routeThroughEnvoy(t *testing.T, p Params, remoteFor string) {
	decode, prefill := newUpstream(t, "decode"), newUpstream(t, "prefill")
	fallback, canary := newUpstream(t, "fallback"), newUpstream(t, "canary")
	proc := &testProcessor{mode: p.Mode, headers: make(chan map[string]string, 16), decide: func(path string) (string, string) {
		if path != "" && path == remoteFor {
			return "prefill", prefill.srv.Listener.Addr().String()
		}
		return "decode", decode.srv.Listener.Addr().String()
	}}
	p.ExtProc = startProcessor(t, proc)
	if p.FailOpen {
		p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
	}
	env := startEnvoy(t, p)
	canaryAddr := canary.srv.Listener.Addr().String()
	for _, c := range []struct {
		method, path string
		body         []byte
	}{
		{http.MethodPost, "/v1/chat/completions", chatBody(200 << 10)},
		{http.MethodPost, "/v1/completions", []byte(`{"model":"m","prompt":"hello"}`)},
		{http.MethodGet, "/v1/models", nil},
	} {
		want, route := decode, "decode"
		if c.path == remoteFor {
			want, route = prefill, "prefill"
		}
		res := send(t, env, c.method, c.path, c.body, forged(canaryAddr))
		if res.status != http.StatusOK || strings.Count(res.body, `"served_by":"`+want.name+`"`) != 3 {
			t.Fatalf("%s %s: status %d body %q; want 200 with three chunks from %s", c.method, c.path, res.status, res.body, want.name)
		}
		// Envoy drops Content-Length when ext_proc may rewrite a STREAMED body; in full duplex the
		// value condisagg sets is kept (allow_content_length_header).
		wantLength := int64(len(c.body))
		if p.Mode == Streamed {
			wantLength = -1
		}
		seen := expectServed(t, want, c.method, c.path, c.body, wantLength)
		if got := seen.header.Get("x-condisagg-route"); got != route {
			t.Errorf("%s: upstream saw x-condisagg-route %q; want %q", c.path, got, route)
		}
		if got, w := seen.header.Get("x-gateway-destination-endpoint"), want.srv.Listener.Addr().String(); got != w {
			t.Errorf("%s: upstream saw x-gateway-destination-endpoint %q; want %q", c.path, got, w)
		}
		for _, h := range []string{"x-condisagg-decode-host", "x-condisagg-prefill-host", "x-prefiller-host-port", "x-bypass-remote-prefill"} {
			if v := seen.header.Get(h); v != "" {
				t.Errorf("%s: forged %s: %q reached the upstream", c.path, h, v)
			}
		}
		hs := <-proc.headers
		for h := range forged("") {
			if v, ok := hs[strings.ToLower(h)]; ok {
				t.Errorf("%s: forged %s: %q reached ext_proc (the early header mutation must strip it)", c.path, h, v)
			}
		}
	}
	if n := canary.hits.Load() + fallback.hits.Load(); n != 0 {
		t.Errorf("canary/fallback received %d requests; want 0", n)
	}
	expectStats(t, env, map[string]uint64{
		"cluster.decode.original_dst_host_invalid":    0,
		"cluster.prefill.original_dst_host_invalid":   0,
		"http.llm.ext_proc.streams_failed":            0,
		"http.llm.ext_proc.spurious_msgs_received":    0,
		"http.llm.ext_proc.clear_route_cache_ignored": 0,
		"http.llm.ext_proc.streams_closed":            3,
	})
}

func expectStats(t *testing.T, env *Process, want map[string]uint64) {
	t.Helper()
	for stat, w := range want {
		if v, err := env.Counter(context.Background(), stat); err != nil || v != w {
			t.Errorf("stat %s = %d, %v; want %d", stat, v, err, w)
		}
	}
}

// TestEnvoyFailureModes runs the real Envoy with condisagg unreachable (envoy-extproc §4):
// fail-open serves through decode_fallback, fail-closed answers 503 with an OpenAI JSON error
// (the local reply mapping of Envoy's bare 500), and forged destination headers reach neither
// the canary nor any upstream in both cases.
func TestEnvoyFailureModes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		p          Params
		wantStatus int
		served     bool
	}{
		{"buffered_fail_open", testParams(Buffered, FailOpen), http.StatusOK, true},
		{"full_duplex_fail_closed", testParams(FullDuplex, FailClosed), http.StatusServiceUnavailable, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fallback, canary := newUpstream(t, "fallback"), newUpstream(t, "canary")
			c.p.ExtProc = deadEndpoint(t)
			if c.p.FailOpen {
				c.p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
			}
			env := startEnvoy(t, c.p)
			body := chatBody(4 << 10)
			res := send(t, env, http.MethodPost, "/v1/chat/completions", body, forged(canary.srv.Listener.Addr().String()))
			if res.status != c.wantStatus {
				t.Fatalf("status %d body %q; want %d", res.status, res.body, c.wantStatus)
			}
			if !c.served {
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.Unmarshal([]byte(res.body), &e); err != nil || e.Error.Code != "router_unavailable" ||
					e.Error.Type != "service_unavailable_error" || !strings.Contains(e.Error.Message, "ext_proc") {
					t.Fatalf("fail-closed body %q (%v): want an OpenAI JSON error naming the ext_proc failure", res.body, err)
				}
			}
			if c.served {
				seen := expectServed(t, fallback, http.MethodPost, "/v1/chat/completions", body, int64(len(body)))
				for h := range forged("") {
					if v := seen.header.Get(h); v != "" {
						t.Errorf("forged %s: %q reached the fallback upstream", h, v)
					}
				}
				expectStats(t, env, map[string]uint64{"http.llm.ext_proc.failure_mode_allowed": 1})
			} else if n := fallback.hits.Load(); n != 0 {
				t.Errorf("fallback received %d requests; want 0", n)
			}
			if n := canary.hits.Load(); n != 0 {
				t.Errorf("canary received %d requests; want 0", n)
			}
		})
	}
}

// TestStartReportsEnvoyFailure: a bootstrap Envoy rejects makes Start fail with Envoy's message
// instead of waiting for readiness, and leaves no process behind.
func TestStartReportsEnvoyFailure(t *testing.T) {
	t.Parallel()
	bin := envoyBin(t)
	path := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(path, []byte("static_resources: {listeners: [{name: x, nonsense: 1}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	proc, err := Start(ctx, bin, path, StartOptions{})
	if err == nil {
		proc.Stop()
		t.Fatal("Start succeeded on an invalid bootstrap")
	}
	if !strings.Contains(err.Error(), "nonsense") || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("Start error = %v; want Envoy's complaint about the unknown field", err)
	}
}
