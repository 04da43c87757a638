package kvzmq

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWarnThrottled (issue 12 item 11): a publisher that sends a malformed batch on every step
// gets one warning per warnEvery in the log, not one per batch; the next warning logged says
// how many were held back (every batch is still counted in the metrics).
func TestWarnThrottled(t *testing.T) {
	var buf bytes.Buffer
	sh := &streamShell{s: &Subscriber{log: slog.New(slog.NewTextHandler(&buf, nil))}}
	t0 := time.Unix(1000, 0)
	for i := range 100 { // one malformed batch every 10 ms for a second
		sh.warn(t0.Add(time.Duration(i)*10*time.Millisecond), "malformed KV event skipped", "seq", i)
	}
	if n := strings.Count(buf.String(), "malformed KV event skipped"); n != 1 {
		t.Fatalf("%d warnings in the first second, want 1:\n%s", n, buf.String())
	}
	sh.warn(t0.Add(warnEvery), "malformed KV event skipped", "seq", 100)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "seq=100") || !strings.Contains(lines[1], "suppressed=99") {
		t.Fatalf("after warnEvery, want a second warning counting the 99 held back:\n%s", buf.String())
	}
	sh.warn(t0.Add(2*warnEvery+time.Millisecond), "apply batch", "seq", 101)
	if lines = strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 3 || strings.Contains(lines[2], "suppressed") {
		t.Fatalf("a warning after a quiet interval counts nothing held back:\n%s", buf.String())
	}
}
