package extproc

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConcurrentStreams: hundreds of simultaneous streams in every mode, each with its own
// prompt, decided, answered and released; afterwards no booking and no goroutine is left.
func TestConcurrentStreams(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("streams", testConcurrentStreams)
	waitGoroutines(t, before) // the bufconn server and every stream handler are gone
}

func testConcurrentStreams(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					errs <- fmt.Errorf("stream %d: %v", i, r)
				}
			}()
			mode := []extprocModePair{{buffered, streamed}, {fullDuplex, fullDuplex}, {buffered, fullDuplex}}[i%3]
			v := e.open(mode.req, mode.resp)
			body := chatBody(fmt.Sprintf("user %d asks question %d about routing", i%7, i), true)
			v.requestHeaders(false, ":method", "POST", ":path", chatPath)
			if mode.req == buffered {
				v.recv()
			}
			v.requestBody(body, true)
			if h := setHeaders(firstHeaders(v, mode.req)); h[HeaderRoute] == "" {
				errs <- fmt.Errorf("stream %d: no route", i)
			}
			v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
			v.recv()
			v.responseBody([]byte(sseToken+"data: [DONE]\n\n"), true)
			v.recv()
			v.closeAndDrain()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if e.totalRequests() != 0 {
		t.Fatalf("%d bookings left", e.totalRequests())
	}
	var decisions float64
	for _, r := range []string{"remote_ratio_too_high", "remote_isl_too_long", "bypass_isl"} {
		decisions += testutil.ToFloat64(e.metrics.Decisions.WithLabelValues("isl_bounding", "prefill", r))
	}
	if decisions != n {
		t.Fatalf("decisions = %v, want %d", decisions, n)
	}
	if testutil.ToFloat64(e.metrics.ActiveStreams) != 0 {
		t.Fatal("active streams gauge not back to 0")
	}
}

type extprocModePair struct {
	req, resp filterv3.ProcessingMode_BodySendMode
}

// firstHeaders returns the response carrying the decision in the request's mode.
func firstHeaders(v *envoy, mode filterv3.ProcessingMode_BodySendMode) *extprocv3.CommonResponse {
	r := v.recv()
	if mode == fullDuplex {
		for {
			c := v.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if c.GetEndOfStream() {
				break
			}
		}
		return r.GetRequestHeaders().GetResponse()
	}
	return r.GetRequestBody().GetResponse()
}

// waitGoroutines waits (bounded) for transient gRPC goroutines to exit.
func waitGoroutines(t *testing.T, limit int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a loaded machine ends goroutines late; a leak never ends
	for runtime.NumGoroutine() > limit {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines %d > %d:\n%s", runtime.NumGoroutine(), limit, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
