package extproc

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/route"
)

// TestSessionHeaders: the session headers name the request's session in their order of
// precedence, whichever client sent them; a value over 256 bytes or holding anything but
// visible ASCII is ignored and counted and the request is routed all the same, by a header of
// lower precedence if one is usable. The second turn of a session lands on the first turn's
// worker (a hit), which the decision log records.
func TestSessionHeaders(t *testing.T) {
	e := newEnv(t, envOptions{sessions: route.SessionConfig{Enabled: true},
		settings: func(s *Settings) { s.SessionHeaders = DefaultSessionHeaders }})
	send := func(id string, text string, kv ...string) {
		t.Helper()
		v := e.open(buffered, streamed)
		v.requestHeaders(false, append([]string{":method", "POST", ":path", chatPath, "x-request-id", id}, kv...)...)
		v.recv()
		v.requestBody(chatBody(text, false), true)
		if r := v.recv(); r.GetImmediateResponse() != nil {
			t.Fatalf("%s was refused: %v", id, r.GetImmediateResponse())
		}
		// The stream stays open: its booking is held, as while a turn still decodes.
	}
	long := strings.Repeat("s", route.MaxSessionIDBytes+1)
	send("first", "the first turn of a long conversation about caches", "x-claude-code-session-id", "conv-1")
	send("codex", "a different question entirely, routed elsewhere by load", "session_id", "conv-1")
	send("precedence", "a third question with two session headers", "session_id", "other", "x-dynamo-session-id", "conv-1")
	send("oversized", "a question whose session header is too long", "x-dynamo-session-id", long)
	send("invalid", "a question whose session header has a space", "x-dynamo-session-id", "conv 1")
	send("fallback", "an oversized first choice and a usable second", "x-dynamo-session-id", long, "session_id", "conv-1")
	send("none", "no session at all")

	by := map[string]struct{ session, decode string }{}
	for _, en := range e.recent.Latest(nil, 20) {
		by[en.RequestID] = struct{ session, decode string }{en.Record.Session, en.Record.Decode}
	}
	first := by["first"]
	if first.session != "miss" || first.decode == "" {
		t.Fatalf("first turn %+v, want a miss with a decode worker", first)
	}
	for _, id := range []string{"codex", "precedence", "fallback"} {
		if got := by[id]; got.session != "hit" || got.decode != first.decode {
			t.Errorf("%s: %+v, want a hit on %s", id, got, first.decode)
		}
	}
	for _, id := range []string{"oversized", "invalid", "none"} {
		if got := by[id]; got.session != "" || got.decode == "" {
			t.Errorf("%s: %+v, want routed with no session", id, got)
		}
	}
	ignored := e.metrics.SessionHeadersIgnored
	if o, i := testutil.ToFloat64(ignored.WithLabelValues("oversized")), testutil.ToFloat64(ignored.WithLabelValues("invalid")); o != 2 || i != 1 {
		t.Fatalf("ignored oversized=%v invalid=%v, want 2 and 1", o, i)
	}
	aff := e.metrics.SessionAffinity
	if m, h := testutil.ToFloat64(aff.WithLabelValues("miss")), testutil.ToFloat64(aff.WithLabelValues("hit")); m != 1 || h != 3 {
		t.Fatalf("affinity miss=%v hit=%v, want 1 and 3", m, h)
	}
	if st := e.router.SessionStats(); st.Bindings != 1 {
		t.Fatalf("bindings %d, want 1", st.Bindings)
	}
}

// TestSessionHeadersOff: without session headers configured, a session header is not read.
func TestSessionHeadersOff(t *testing.T) {
	e := newEnv(t, envOptions{sessions: route.SessionConfig{Enabled: true}})
	v := e.open(buffered, streamed)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-request-id", "r", "x-dynamo-session-id", "conv-1")
	v.recv()
	v.requestBody(chatBody("hello", false), true)
	v.recv()
	if got := e.recent.Latest(nil, 1); len(got) != 1 || got[0].Record.Session != "" {
		t.Fatalf("recorded %+v, want no session", got)
	}
}

// TestSessionHeadersValidate: session.headers must be a few lower-case header names.
func TestSessionHeadersValidate(t *testing.T) {
	base := func() Settings {
		e := newEnv(t, envOptions{})
		return *e.server.Settings()
	}
	for _, tc := range []struct {
		headers []string
		want    string
	}{
		{[]string{"X-Dynamo-Session-ID"}, `session.headers: "X-Dynamo-Session-ID" must be a lower-case header name`},
		{[]string{""}, `session.headers: "" must be a lower-case header name`},
		{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, "session.headers: 9 headers is more than 8"},
	} {
		s := base()
		s.SessionHeaders = tc.headers
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.headers, err, tc.want)
		}
	}
	s := base()
	s.SessionHeaders = DefaultSessionHeaders
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

// FuzzSessionValue: any header value is either a session id of 1..256 visible ASCII bytes
// (equal to the value) or ignored with a reason; nothing panics.
func FuzzSessionValue(f *testing.F) {
	for _, s := range []string{"conv-1", "", "a b", "é", strings.Repeat("x", 257), "\x00"} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, raw bool) {
		hv := &corev3.HeaderValue{Key: "x-dynamo-session-id", Value: string(b)}
		if raw {
			hv = &corev3.HeaderValue{Key: "x-dynamo-session-id", RawValue: b}
		}
		v, reason := sessionValue(hv)
		switch {
		case reason != "":
			if v != "" || (reason != "oversized" && reason != "invalid") {
				t.Fatalf("%q: value %q reason %q", b, v, reason)
			}
		case v != string(b) || len(v) > route.MaxSessionIDBytes:
			t.Fatalf("%q: kept %q", b, v)
		default:
			for i := 0; i < len(v); i++ {
				if v[i] < 0x21 || v[i] > 0x7e {
					t.Fatalf("%q: kept a byte %#x", b, v[i])
				}
			}
		}
	})
}
