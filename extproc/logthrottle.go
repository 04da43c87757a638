package extproc

import (
	"sync"
	"time"
	"unicode/utf8"
)

// Client strings in logs (request ids, error texts quoting a body) are clipped, and the
// per-request warnings are rate-limited, so a client cannot write the log: a 50 KiB
// x-request-id on every rejected request would otherwise be 50 KiB of log a request.

// maxLoggedBytes bounds one client string in a log line.
const maxLoggedBytes = 128

// maxLoggedErrBytes bounds an error text in a per-request log line.
const maxLoggedErrBytes = 512

// Per-request warnings: at most logBurst per logWindow; the next one let through says how
// many were dropped.
const (
	logBurst  = 10
	logWindow = time.Second
)

// clip returns s cut to maxLoggedBytes (at a character boundary), marked when cut.
func clip(s string) string { return clipTo(s, maxLoggedBytes) }

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(clipped)"
}

// logThrottle is a fixed-window limit on per-request warnings.
type logThrottle struct {
	mu      sync.Mutex // guards the fields below
	window  time.Time  // start of the current window
	n       int        // warnings let through in it
	dropped int        // warnings dropped since the last one let through
}

// allow reports whether a warning may be logged at now and how many were dropped before it.
func (t *logThrottle) allow(now time.Time) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.window) >= logWindow {
		t.window, t.n = now, 0
	}
	if t.n >= logBurst {
		t.dropped++
		return false, 0
	}
	t.n++
	d := t.dropped
	t.dropped = 0
	return true, d
}

// warnRejected logs a rejected request, throttled, with its clipped id and error.
func (x *exchange) warnRejected(reason string, err error) {
	ok, dropped := x.srv.warnLog.allow(time.Now())
	if !ok {
		x.srv.metrics.LogsSuppressed.Inc()
		return
	}
	args := []any{"request_id", x.requestID, "reason", reason}
	if err != nil {
		args = append(args, "err", clipTo(err.Error(), maxLoggedErrBytes))
	}
	if dropped > 0 {
		args = append(args, "suppressed", dropped)
	}
	x.srv.log.Warn("request rejected", args...)
}
