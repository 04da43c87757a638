package extproc

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClientStringsInLogs: a client cannot write the log (issue 23 item 5): its x-request-id
// is clipped and the per-request warnings are rate-limited, with the drops counted and
// reported by the next warning let through.
func TestClientStringsInLogs(t *testing.T) {
	var out lockedBuffer
	e := newEnv(t, envOptions{logger: slog.New(slog.NewTextHandler(&out, nil))})
	id := strings.Repeat("A", 50<<10)
	const n = 30
	for range n {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-request-id", id)
		v.recv()
		v.requestBody([]byte(`{"model":`), true)
		expectImmediate(t, v.recv(), 400, "invalid_body")
		v.closeAndDrain()
	}
	logged := strings.Count(out.String(), "request rejected")
	suppressed := testutil.ToFloat64(e.metrics.LogsSuppressed)
	if logged > logBurst*2 || logged+int(suppressed) != n {
		t.Fatalf("%d rejections logged and %v suppressed of %d; want at most %d a second, every other one counted", logged, suppressed, n, logBurst)
	}
	if perLine := len(out.String()) / max(logged, 1); perLine > 1024 {
		t.Fatalf("%d bytes of log per rejected request with a 50 KiB request id", perLine)
	}
	if !strings.Contains(out.String(), "…(clipped)") {
		t.Fatal("the request id was not marked clipped")
	}
}
