package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/extproc"
)

// TestSessionSettings: session.* from the file and the flags: affinity off and the three
// clients' headers by default; headers are trimmed and lower-cased; a zero TTL, a table bound
// out of range and a header name Envoy would never pass are startup errors naming the key.
func TestSessionSettings(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	base := "listen: 127.0.0.1:0\nmodel: {tokenizer: " + model + ", block_size: 16}\n" + workersYAML
	c, err := loadArgs(t, "--config", writeFile(t, dir, "a.yaml", base))
	if err != nil {
		t.Fatal(err)
	}
	if c.Session.Affinity || !slices.Equal(c.Settings.SessionHeaders, extproc.DefaultSessionHeaders) ||
		c.Session.TTL != extproc.DefaultSessionTTL || c.Session.MaxSessions != extproc.DefaultMaxSessions {
		t.Fatalf("defaults: %+v headers %q", c.Session, c.Settings.SessionHeaders)
	}
	path := writeFile(t, dir, "b.yaml", base+"session: {ttl: 5m, max_sessions: 10}\n")
	c, err = loadArgs(t, "--config", path, "--session-affinity", "--session-headers", " X-Session-ID , session_id,")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Session.Affinity || c.Session.TTL != 5*time.Minute || c.Session.MaxSessions != 10 ||
		!slices.Equal(c.Settings.SessionHeaders, []string{"x-session-id", "session_id"}) {
		t.Fatalf("set: %+v headers %q", c.Session, c.Settings.SessionHeaders)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"session: {ttl: 0s}\n", "session.ttl: 0s must be > 0"},
		{"session: {max_sessions: 0}\n", "session.max_sessions: 0 is outside [1, 16777216]"},
		{"session: {headers: \"x-ok, bad header\"}\n", `session.headers: "bad header" must be a lower-case header name`},
	} {
		_, err := loadArgs(t, "--config", writeFile(t, dir, "c.yaml", base+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
