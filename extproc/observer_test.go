package extproc

import (
	"errors"
	"github.com/condisagg/condisagg/route"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// cacheOn stores the full blocks of a chat body's prompt in worker's GPU cache, as its KV
// events would, and returns the prompt's token count.
func (e *env) cacheOn(worker string, body []byte) int {
	e.t.Helper()
	n, _ := e.storePrompt(worker, body)
	return n
}

// storePrompt is cacheOn that also returns the engine hashes it stored, for a later Remove.
// Every call takes fresh engine hashes: a parentless store of hashes the worker already holds
// is a re-announcement of cache hits, which the index does not count (kvindex store.go), so
// reusing hashes across calls would store nothing.
func (e *env) storePrompt(worker string, body []byte) (tokens int, hashes []uint64) {
	e.t.Helper()
	toks, err := qwen3(e.t).EncodeChat(nil, body, tokenizer.ChatOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n := len(toks) / 16
	hashes = make([]uint64, n)
	for i := range hashes {
		e.nextHash++
		hashes[i] = e.nextHash
	}
	res := e.index.Store(kvindex.WorkerID(worker), &kvindex.Store{Medium: kvindex.GPU, Hashes: hashes,
		Tokens: toks[:n*16], BlockSize: 16, PlainBlocks: n})
	if res.Skip != kvindex.SkipNone || res.Stored != n {
		e.t.Fatalf("store on %s: %+v", worker, res)
	}
	return len(toks), hashes
}

func (e *env) worker(id string) pool.WorkerInfo {
	e.t.Helper()
	w, ok := e.booked()[id]
	if !ok {
		e.t.Fatalf("no worker %s", id)
	}
	return w
}

// decideBuffered runs request headers + body in BUFFERED mode and returns the decision.
func decideBuffered(t *testing.T, v *envoy, body []byte) map[string]string {
	t.Helper()
	v.requestHeaders(false, ":method", "POST", ":path", chatPath, "x-request-id", "req-1")
	v.recv()
	v.requestBody(body, true)
	return setHeaders(v.recv().GetRequestBody().GetResponse())
}

const sseToken = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"

// TestStreamingReleaseRemote: A2/A3/A4 — the remote booking holds a prefill entry on p until
// the first token event, and everything until [DONE].
func TestStreamingReleaseRemote(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	h := decideBuffered(t, v, chatBody(strings.Repeat("fresh prompt ", 40), true))
	if h[HeaderRoute] != "prefill" {
		t.Fatalf("route %v", h)
	}
	if e.worker("prefill-0").ActivePrefillTokens == 0 {
		t.Fatal("remote booking put no prefill entry on p")
	}
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream; charset=utf-8")
	v.recv()
	v.responseBody([]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assis"), false)
	v.recv()
	if e.worker("prefill-0").ActivePrefillTokens == 0 {
		t.Fatal("prefill released before a complete token event")
	}
	v.responseBody([]byte("tant\"}}]}\n\n"+sseToken), false)
	v.recv()
	if p := e.worker("prefill-0").ActivePrefillTokens; p != 0 || e.totalRequests() != 1 {
		t.Fatalf("after first token: prefill tokens %d, bookings %d; want 0 and 1", p, e.totalRequests())
	}
	v.responseBody([]byte("data: [DONE]\n\n"), false)
	v.recv()
	if e.totalRequests() != 0 {
		t.Fatal("[DONE] did not release the booking")
	}
	v.responseBody(nil, true)
	v.recv()
	v.closeAndDrain()
	if testutil.ToFloat64(e.metrics.Cancelled) != 0 {
		t.Fatal("a completed response counted as cancelled")
	}
}

// TestBypassReleasesPrefillOnDecode: a warm multi-turn request bypasses to the worker that
// holds its prefix; the local prefill entry on d goes at the first token (A1, A3).
func TestBypassReleasesPrefillOnDecode(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := chatBody(strings.Repeat("the same long conversation ", 80), true)
	isl := e.cacheOn("decode-1", body)
	v := e.open(buffered, fullDuplex)
	h := decideBuffered(t, v, body)
	if h[HeaderRoute] != "decode" || h[HeaderDestination] != d1Addr || !strings.Contains(h[HeaderDecision], "reason=bypass_isl") {
		t.Fatalf("warm request: %v (isl %d)", h, isl)
	}
	d := e.worker("decode-1")
	if d.ActivePrefillTokens != int64(isl%16) || d.ActiveDecodeBlocks == 0 {
		t.Fatalf("bypass booking on d: prefill %d blocks %d, want prefill %d", d.ActivePrefillTokens, d.ActiveDecodeBlocks, isl%16)
	}
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
	v.recv()
	stream := sseToken + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":" +
		"64}}}\n\ndata: [DONE]\n\n"
	v.responseBody([]byte(stream[:10]), false)
	if sr := v.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(sr.GetBody()) != stream[:10] {
		t.Fatal("full-duplex response chunk not echoed unchanged")
	}
	v.responseBody([]byte(stream[10:]), true)
	if sr := v.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); !sr.GetEndOfStream() {
		t.Fatal("echo lost end_of_stream")
	}
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.UsageTokens.WithLabelValues("decode", "cached")) != 64 {
		t.Fatal("bypass not released or usage not counted")
	}
	v.closeAndDrain()
}

// TestNonStreamingRelease: prefill entry at the response headers, the rest at the end.
func TestNonStreamingRelease(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("a question", false))
	v.responseHeaders(false, ":status", "200", "content-type", "application/json")
	v.recv()
	if e.worker("prefill-0").ActivePrefillTokens != 0 || e.totalRequests() != 1 {
		t.Fatal("non-streaming headers did not release exactly the prefill entry")
	}
	body := readFixture(t, "vllm_chat_response.json")
	v.responseBody(body[:50], false)
	v.recv()
	v.responseBody(body[50:], true)
	v.recv()
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.UsageTokens.WithLabelValues("prefill", "completion")) != 2 {
		t.Fatal("end of a non-streaming answer did not release or count usage")
	}
	v.closeAndDrain()
}

// TestUpstreamErrorsRelease: a 5xx status or an error event releases everything once.
func TestUpstreamErrorsRelease(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("q1", true))
	v.responseHeaders(false, ":status", "503")
	v.recv()
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("prefill", "503")) != 1 {
		t.Fatal("5xx did not release or was not counted")
	}
	v.responseBody([]byte("upstream error"), true)
	v.recv()
	v.closeAndDrain()

	v = e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("q2", true))
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
	v.recv()
	v.responseBody([]byte("data: {\"error\":{\"message\":\"engine died\"}}\n\n"), false)
	v.recv()
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("prefill", "stream_error")) != 1 {
		t.Fatal("error event did not release")
	}
	v.closeAndDrain()
	if testutil.ToFloat64(e.metrics.Cancelled) != 0 {
		t.Fatal("errors counted as cancels")
	}
}

// TestCancelReleases: the client goes away mid-stream (context cancel) or Envoy closes the
// stream before the response ended: everything is released exactly once and counted.
func TestCancelReleases(t *testing.T) {
	e := newEnv(t, envOptions{})
	var ended sync.WaitGroup
	e.server.afterStream = ended.Done
	ended.Add(1)
	v := e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("will be cancelled", true))
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
	v.recv()
	v.responseBody([]byte(sseToken), false)
	v.recv()
	v.cancel()
	ended.Wait()
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.Cancelled) != 1 {
		t.Fatalf("after cancel: bookings %d cancelled %v", e.totalRequests(), testutil.ToFloat64(e.metrics.Cancelled))
	}

	ended.Add(1)
	v = e.open(buffered, streamed)
	decideBuffered(t, v, chatBody("eof before the end", true))
	v.closeAndDrain()
	ended.Wait()
	if e.totalRequests() != 0 || testutil.ToFloat64(e.metrics.Cancelled) != 2 {
		t.Fatal("EOF before the response end did not release")
	}
}

// TestDecisionDeadline: a bypass whose decision steps took longer than route.DecisionDeadline fails
// open to remote prefill with reason remote_policy_error (conditional-disagg.md §3 Errors).
func TestDecisionDeadline(t *testing.T) {
	var mu sync.Mutex
	slow := false
	now := time.Unix(1000, 0)
	e := newEnv(t, envOptions{now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if !slow {
			return time.Now()
		}
		now = now.Add(30 * time.Millisecond) // every reading is 30 ms after the previous one
		return now
	}})
	body := chatBody(strings.Repeat("a slow but warm conversation ", 60), false)
	e.cacheOn("decode-0", body)
	mu.Lock()
	slow = true
	mu.Unlock()
	out, err := e.router.Decide(t.Context(), &route.Request{Endpoint: route.EndpointChat, Body: body, DryRun: true})
	if err != nil || out.Reason != "remote_policy_error" || !errors.Is(out.Decision.Inputs.Err, route.ErrDecisionDeadline) {
		t.Fatalf("late bypass: %v %v %v", out.Reason, out.Decision.Inputs.Err, err)
	}
	mu.Lock()
	slow = false
	mu.Unlock()
	if out, err := e.router.Decide(t.Context(), &route.Request{Endpoint: route.EndpointChat, Body: body, DryRun: true}); err != nil || out.Reason != "bypass_isl" {
		t.Fatalf("in time: %v %v", out.Reason, err)
	}
}

// TestPrefillLegEndReleasesPrefill: the sidecar's x-condisagg-prefill-ms on the response
// headers ends the remote booking's prefill entry there (the prefill worker is done), before
// any token; the decode side stays booked until [DONE]. A bypass ignores the header.
func TestPrefillLegEndReleasesPrefill(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.open(buffered, streamed)
	h := decideBuffered(t, v, chatBody(strings.Repeat("another fresh prompt ", 40), true))
	if h[HeaderRoute] != "prefill" {
		t.Fatalf("route %v", h)
	}
	if e.worker("prefill-0").ActivePrefillTokens == 0 {
		t.Fatal("remote booking put no prefill entry on p")
	}
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream", "x-condisagg-prefill-ms", "250")
	v.recv()
	if p := e.worker("prefill-0").ActivePrefillTokens; p != 0 || e.totalRequests() != 1 {
		t.Fatalf("after the prefill leg ended: prefill tokens %d, bookings %d; want 0 and 1", p, e.totalRequests())
	}
	if n := testutil.CollectAndCount(e.metrics.PrefillLegSecs); n != 1 {
		t.Fatalf("prefill leg histogram has %d series", n)
	}
	v.responseBody([]byte(sseToken+"data: [DONE]\n\n"), true)
	v.recv()
	v.closeAndDrain()
	if e.totalRequests() != 0 {
		t.Fatal("[DONE] did not release the booking")
	}
	if n := testutil.CollectAndCount(e.metrics.FirstTokenSecs); n != 1 {
		t.Fatalf("first token still observed once per request: %d series", n)
	}
}
