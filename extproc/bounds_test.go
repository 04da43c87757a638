package extproc

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestBodyBytesBounded: a full-duplex client that sends body chunks without end (32 MiB
// against a 256 KiB max_body_bytes) gets a 413 once over the limit; the stream never holds
// more than the limit (the held-bytes count after every message), the chunks after the 413
// are drained, not kept, and the process heap does not grow with the bytes sent: the live heap
// after 32 MiB is within 6 MiB of the heap after 8 MiB, though 24 MiB more were sent in between.
// Kept chunks would add all 24 MiB; the slack covers gRPC's buffer pools and flow-control
// windows, which a first run in a fresh process fills (2.1 MiB measured).
func TestBodyBytesBounded(t *testing.T) {
	const limit, chunk, total = 256 << 10, 64 << 10, 32 << 20
	e := newEnv(t, envOptions{settings: func(s *Settings) { s.MaxBodyBytes = limit }})
	var peak atomic.Int64
	steps := make(chan struct{}, total/chunk+2) // one per message the stream processed
	e.server.onHeld = func(n int) {
		for p := peak.Load(); int64(n) > p && !peak.CompareAndSwap(p, int64(n)); p = peak.Load() {
		}
		steps <- struct{}{}
	}
	v := e.open(fullDuplex, fullDuplex)
	v.requestHeaders(false, ":method", "POST", ":path", chatPath)
	got := make(chan *extprocv3.ProcessingResponse, 1)
	go func() { got <- v.recv() }()
	data := append([]byte(`{"model":"m","messages":[{"role":"user","content":"`), make([]byte, chunk)...)
	// heap is the live heap once the stream processed its first n messages.
	processed := 0
	heap := func(n int) uint64 {
		for ; processed < n; processed++ {
			<-steps
		}
		runtime.GC() // twice: the first moves sync.Pool contents to the victim cache
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var at8 uint64
	for i := range total / chunk {
		v.requestBody(data[:chunk], false)
		switch i {
		case 8: // over the limit by now: the 413 is on its way
			expectImmediate(t, <-got, 413, "body_too_large")
		case 8<<20/chunk - 1:
			at8 = heap(1 + i + 1) // the headers and i+1 chunks
		}
	}
	at32 := heap(1 + total/chunk)
	t.Logf("live heap after 8 MiB %d, after 32 MiB %d; peak held %d", at8, at32, peak.Load())
	if at32 > at8+6<<20 {
		t.Errorf("live heap grew from %d to %d bytes between 8 and 32 MiB streamed into a %d-byte limit", at8, at32, limit)
	}
	if p := peak.Load(); p > limit+4096 {
		t.Errorf("stream held %d bytes, limit %d", p, limit)
	}
	if n := testutil.ToFloat64(e.metrics.BufferedBytes); n != 0 {
		t.Errorf("condisagg_extproc_buffered_bytes = %v after the 413, want 0", n)
	}
	v.closeAndDrain()
}

// TestDecidedBodyDropped: once decided, a stream no longer holds its request body, so a long
// generation does not pin max_body_bytes per open request.
func TestDecidedBodyDropped(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, m := range []extprocModePair{{buffered, streamed}, {fullDuplex, fullDuplex}} {
		v := e.open(m.req, m.resp)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		if m.req == buffered {
			v.recv()
		}
		v.requestBody(chatBody(strings.Repeat("a long prompt to hold ", 2000), true), true)
		firstHeaders(v, m.req)
		v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
		v.recv() // the body step was accounted before this answer
		if n := testutil.ToFloat64(e.metrics.BufferedBytes); n != 0 {
			t.Errorf("%v: %v bytes held after the decision", m.req, n)
		}
		v.responseBody([]byte("data: [DONE]\n\n"), true)
		v.recv()
		v.closeAndDrain()
	}
}

// TestAppendBounded: the assembled body's capacity never exceeds the limit.
func TestAppendBounded(t *testing.T) {
	const limit = 1000
	var b []byte
	for range 10 {
		b = appendBounded(b, make([]byte, 99), limit)
		if cap(b) > limit {
			t.Fatalf("len %d cap %d > %d", len(b), cap(b), limit)
		}
	}
	if len(b) != 990 {
		t.Fatalf("len %d", len(b))
	}
}

// TestStreamIdleTimeoutStalledUpload: a real gRPC client sends headers and half a body, then
// nothing: after stream_idle_timeout it gets a 408 and the stream ends (DeadlineExceeded);
// counted, nothing held, nothing booked.
func TestStreamIdleTimeoutStalledUpload(t *testing.T) {
	e := newEnv(t, envOptions{settings: func(s *Settings) { s.StreamIdleTimeout = time.Second }})
	ended := make(chan struct{}, 4)
	e.server.afterStream = func() { ended <- struct{}{} }
	for _, mode := range []extprocModePair{{fullDuplex, fullDuplex}, {buffered, streamed}} {
		v := e.open(mode.req, mode.resp)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		if mode.req == buffered {
			v.recv() // BUFFERED: Envoy holds the body until complete, so the stall is here
		} else {
			body := chatBody("a prompt that never ends", false)
			v.requestBody(body[:len(body)/2], false)
		}
		start := time.Now()
		expectImmediate(t, v.recv(), 408, "stream_idle_timeout")
		if _, err := v.stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("%v: stream ended with %v, want DeadlineExceeded", mode.req, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%v: ended after %v", mode.req, d)
		}
		<-ended
	}
	if got := testutil.ToFloat64(e.metrics.IdleTimeouts); got != 2 {
		t.Fatalf("condisagg_extproc_stream_idle_timeouts_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.Rejected.WithLabelValues("stream_idle_timeout")); got != 2 {
		t.Fatalf("rejected{stream_idle_timeout} = %v", got)
	}
	if testutil.ToFloat64(e.metrics.ActiveStreams) != 0 || testutil.ToFloat64(e.metrics.BufferedBytes) != 0 || e.totalRequests() != 0 {
		t.Fatal("a timed-out stream left a stream, bytes or a booking behind")
	}
}

// fakeStream is a ProcessStream fed from a channel, for tests in a synctest bubble.
type fakeStream struct {
	ctx  context.Context
	in   chan *extprocv3.ProcessingRequest
	mu   sync.Mutex
	sent []*extprocv3.ProcessingResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*extprocv3.ProcessingRequest, error) {
	select {
	case r, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeStream) Send(r *extprocv3.ProcessingResponse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, r)
	return nil
}

func (f *fakeStream) responses() []*extprocv3.ProcessingResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*extprocv3.ProcessingResponse(nil), f.sent...)
}

// TestStreamIdleTimeoutClock (synctest): the idle timer ends a stalled request exactly
// stream_idle_timeout after its last message, is re-armed by each message, and never runs
// while the request is complete (a silent generation keeps its stream and its booking).
func TestStreamIdleTimeoutClock(t *testing.T) {
	const idle = 30 * time.Second
	e := newEnv(t, envOptions{settings: func(s *Settings) { s.StreamIdleTimeout, s.UnansweredBookingTimeout = idle, time.Hour }})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f := &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest)}
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- e.server.process(f) }()
		f.in <- headersMsg(fullDuplex, false)
		time.Sleep(idle - time.Second) // one message re-arms the timer
		f.in <- bodyMsg([]byte(`{"model":"m","messages":[`), false)
		err := <-done
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("stalled upload ended with %v", err)
		}
		if d := time.Since(start); d != 2*idle-time.Second {
			t.Fatalf("ended after %v, want %v", d, 2*idle-time.Second)
		}
		if r := f.responses(); len(r) != 1 || r[0].GetImmediateResponse().GetStatus().GetCode() != 408 {
			t.Fatalf("responses %v, want one 408", r)
		}
		cancel()
		synctest.Wait() // the receive goroutine has exited

		ctx, cancel = context.WithCancel(context.Background())
		f = &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest)}
		go func() { done <- e.server.process(f) }()
		f.in <- headersMsg(buffered, false)
		f.in <- bodyMsg(chatBody("a generation that takes long", true), true)
		time.Sleep(10 * idle)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a complete request's stream ended while waiting for its response: %v", err)
		default:
		}
		if e.totalRequests() != 1 {
			t.Fatalf("bookings %d, want 1", e.totalRequests())
		}
		cancel() // Envoy goes away: the booking is released
		if err := <-done; err != nil {
			t.Fatalf("cancelled stream: %v", err)
		}
		synctest.Wait()
		if e.totalRequests() != 0 {
			t.Fatalf("bookings %d after the stream ended", e.totalRequests())
		}
	})
}

func headersMsg(mode filterv3.ProcessingMode_BodySendMode, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: streamed},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", chatPath), EndOfStream: eos}}}
}

func bodyMsg(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// TestRepeatedRequestHeaders: one stream carries one request. A client that sends a second
// request_headers (and body) on a decided stream gets no second decision: the stream holds one
// booking, the violation is counted, and the booking is released when the stream ends.
func TestRepeatedRequestHeaders(t *testing.T) {
	e := newEnv(t, envOptions{})
	ended := make(chan struct{}, 1)
	e.server.afterStream = func() { ended <- struct{}{} }
	for _, m := range []extprocModePair{{buffered, streamed}, {fullDuplex, fullDuplex}} {
		v := e.open(m.req, m.resp)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		if m.req == buffered {
			v.recv()
		}
		v.requestBody(chatBody("first request", true), true)
		firstHeaders(v, m.req)
		for range 3 {
			v.requestHeaders(false, ":method", "POST", ":path", chatPath)
			v.requestBody(chatBody("another request on the same stream", true), true)
		}
		v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
		v.recv() // answered after the repeated phases: they were processed, unanswered
		if n := e.totalRequests(); n != 1 {
			t.Fatalf("%v: %d bookings on one stream, want 1", m.req, n)
		}
		v.cancel() // the client goes away mid-response
		<-ended
		if n := e.totalRequests(); n != 0 {
			t.Fatalf("%v: %d bookings after the stream ended", m.req, n)
		}
	}
	if got := testutil.ToFloat64(e.metrics.ProtocolErrors.WithLabelValues("repeated_request_headers")); got != 6 {
		t.Fatalf("protocol errors = %v, want 6", got)
	}
}

// TestDecisionQueueTimeout: with every decision slot taken, a decision waits
// decision_queue_timeout and is then routed by --failure-mode (open: failure_open to a decode
// worker; closed: 503 overloaded), counted, instead of waiting for Envoy's message_timeout.
func TestDecisionQueueTimeout(t *testing.T) {
	for _, c := range []struct {
		mode FailureMode
		want string
	}{{FailOpen, "failure_open"}, {FailClosed, "overloaded"}} {
		e := newEnv(t, envOptions{settings: func(s *Settings) {
			s.FailureMode, s.DecisionQueueTimeout = c.mode, 50*time.Millisecond
		}})
		busy := slotKey{id: "busy"}
		for range e.server.slots.size {
			if _, err := e.server.slots.acquire(context.Background(), busy, 0); err != nil { // every slot busy
				t.Fatal(err)
			}
		}
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath)
		v.recv()
		v.requestBody(chatBody("queued", true), true)
		r := v.recv()
		if c.mode == FailClosed {
			expectImmediate(t, r, 503, "overloaded")
		} else if h := setHeaders(r.GetRequestBody().GetResponse()); !strings.Contains(h[HeaderDecision], "reason=failure_open") {
			t.Fatalf("decision %q, want failure_open", h[HeaderDecision])
		}
		if got := testutil.ToFloat64(e.metrics.QueueTimeouts); got != 1 {
			t.Fatalf("%s: queue timeouts %v", c.mode, got)
		}
		v.closeAndDrain()
		for range e.server.slots.size {
			e.server.slots.release(busy)
		}
	}
}

// TestSlotsFIFOAndDeadline: a free slot is taken even past the deadline; a full set of
// slots answers ErrOverloaded after the wait, and the context ends a wait early.
func TestSlotsFIFOAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1)
		k := slotKey{id: "c"}
		if _, err := s.acquire(context.Background(), k, 0); err != nil {
			t.Fatalf("free slot: %v", err)
		}
		start := time.Now()
		if _, err := s.acquire(context.Background(), k, time.Second); !errors.Is(err, ErrOverloaded) || time.Since(start) != time.Second {
			t.Fatalf("full: %v after %v", err, time.Since(start))
		}
		if _, err := s.acquire(context.Background(), k, -time.Second); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("past deadline: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		if _, err := s.acquire(ctx, k, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
		go func() { time.Sleep(time.Millisecond); s.release(k) }()
		if w, err := s.acquire(context.Background(), k, time.Hour); err != nil || w != time.Millisecond {
			t.Fatalf("released: waited %v, %v", w, err)
		}
	})
}
