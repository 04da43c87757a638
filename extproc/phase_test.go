package extproc

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPhaseBounds (synctest) checks the absolute bounds of a stream's phases (bounds.go
// nextBound, README "Resource bounds"), each with its own stream.
func TestPhaseBounds(t *testing.T) {
	const idle, whole, unanswered = 30 * time.Second, 60 * time.Second, 5 * time.Second
	// One server per bubble: a server's stream WaitGroup belongs to one bubble.
	env := func(t *testing.T) *env {
		return newEnv(t, envOptions{settings: func(s *Settings) {
			s.StreamIdleTimeout, s.StreamRequestTimeout, s.UnansweredBookingTimeout = idle, whole, unanswered
		}})
	}
	t.Run("a_trickle_cannot_outlive_stream_request_timeout", func(t *testing.T) {
		e := env(t)
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest)}
			done := make(chan error, 1)
			start := time.Now()
			var took time.Duration
			go func() { err := e.server.process(f); took = time.Since(start); done <- err }()
			f.in <- headersMsg(fullDuplex, false)
			f.in <- bodyMsg([]byte(`{"model":"m","messages":[`), false)
			var err error
		trickle: // one byte well inside the idle timeout, forever
			for {
				select {
				case f.in <- bodyMsg([]byte(" "), false):
					time.Sleep(idle / 3)
				case err = <-done:
					break trickle
				}
			}
			if status.Code(err) != codes.DeadlineExceeded || took != whole {
				t.Fatalf("trickled stream ended with %v after %v, want DeadlineExceeded after %v", err, took, whole)
			}
			if r := f.responses(); len(r) != 1 || r[0].GetImmediateResponse().GetStatus().GetCode() != 408 {
				t.Fatalf("responses %v, want one 408", r)
			}
			cancel()
			synctest.Wait()
		})
		if got := testutil.ToFloat64(e.metrics.Rejected.WithLabelValues("stream_request_timeout")); got != 1 {
			t.Fatalf("rejected{stream_request_timeout} = %v", got)
		}
	})
	t.Run("a_decided_stream_without_response_releases_its_booking", func(t *testing.T) {
		e := env(t)
		synctest.Test(t, func(t *testing.T) {
			_, done, stop := decidedStream(e, "decided, then never answered", true)
			defer stop()
			synctest.Wait()
			if e.totalRequests() != 1 {
				t.Fatalf("bookings %d after the decision, want 1", e.totalRequests())
			}
			time.Sleep(unanswered - time.Millisecond)
			synctest.Wait()
			if e.totalRequests() != 1 {
				t.Fatal("booking released early")
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if e.totalRequests() != 0 {
				t.Fatalf("bookings %d after unanswered_booking_timeout, want 0", e.totalRequests())
			}
			select {
			case err := <-done:
				t.Fatalf("the stream ended (%v); it must stay open for a late answer", err)
			default:
			}
			stop()
		})
		if got := testutil.ToFloat64(e.metrics.UnansweredReleases); got != 1 {
			t.Fatalf("unanswered releases %v, want 1", got)
		}
	})
	t.Run("a_late_answer_is_still_classified", func(t *testing.T) {
		// A non-streamed remote answer sends its headers only when it is complete: one slower
		// than unanswered_booking_timeout loses its booking, not its transfer truth.
		e := newEnv(t, envOptions{workers: defaultWorkers()[1:], settings: func(s *Settings) {
			s.StreamIdleTimeout, s.StreamRequestTimeout, s.UnansweredBookingTimeout = idle, whole, unanswered
		}})
		synctest.Test(t, func(t *testing.T) {
			f, _, stop := decidedStream(e, "a slow remote answer", false)
			defer stop()
			time.Sleep(2 * unanswered)
			synctest.Wait()
			if e.totalRequests() != 0 {
				t.Fatalf("bookings %d after unanswered_booking_timeout, want 0", e.totalRequests())
			}
			f.in <- &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrs(":status", "200", "content-type", "application/json", "x-condisagg-kv-transfer", "pulled")}}}
			f.in <- &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
				Body: []byte(`{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":40}}}`), EndOfStream: true}}}
			synctest.Wait()
			stop()
		})
		if got := e.server.RecentTransfers(1); len(got) != 1 || got[0].Outcome != TransferTransferred {
			t.Fatalf("late answer classified as %+v, want transferred", got)
		}
	})
	t.Run("response_headers_stop_the_unanswered_bound", func(t *testing.T) {
		e := env(t)
		synctest.Test(t, func(t *testing.T) {
			f, _, stop := decidedStream(e, "answered in time", true)
			defer stop()
			f.in <- &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrs(":status", "200", "content-type", "text/event-stream")}}}
			time.Sleep(10 * unanswered)
			synctest.Wait()
			if e.totalRequests() != 1 {
				t.Fatalf("bookings %d while the answer streams, want 1", e.totalRequests())
			}
			stop()
		})
	})
}

// decidedStream opens a stream on e's server (inside a synctest bubble) and sends it a BUFFERED
// chat request, which is decided; stop ends the stream and waits for the server to return (once:
// callers defer it for the failure paths).
func decidedStream(e *env, question string, stream bool) (f *fakeStream, done <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	f = &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest)}
	ended := make(chan error, 1)
	go func() { ended <- e.server.process(f) }()
	f.in <- headersMsg(buffered, false)
	f.in <- bodyMsg(chatBody(question, stream), true)
	return f, ended, sync.OnceFunc(func() {
		cancel()
		<-ended
		synctest.Wait()
	})
}
