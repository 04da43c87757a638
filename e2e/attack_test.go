package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The attacks of issue 23 ("Hardening, round two", items 2 and 3), each reproduced against
// the router behind the real Envoy: a client that denies routing by CPU, a stranger whose
// decided streams hold bookings, and trickle-fed streams that hold buffered bodies. Sizes come
// from CHAOS (short by default, full with `make chaos`); docs/reliability.md has the figures.

// attackBounds are the router's bounds for these scenarios: the engines' context length, a
// short unanswered-booking bound and request phase, and a buffer cap a few bodies fill.
const (
	attackMaxModelLen     = 16384
	attackUnanswered      = 2 * time.Second
	attackRequestTimeout  = 4 * time.Second
	attackMaxBufferedMiB  = 48
	attackBodyChunk       = 1 << 20
	attackTrickleBodyMiB  = 9
	attackWordBytes       = 4 << 20
	attackRequestInterval = time.Second
	// legitPeriod paces each of the two legitimate clients, so that a phase spans several
	// attack requests.
	legitPeriod = 250 * time.Millisecond
)

// attackSize is one size of the attack scenarios.
type attackSize struct {
	legit     int // legitimate requests per phase (quiet, then under attack)
	stranger  int // a stranger's decided streams
	trickling int // trickle-fed streams
}

func attackSizeFor() attackSize {
	if os.Getenv("CHAOS") == "full" {
		return attackSize{legit: 400, stranger: 50, trickling: 100}
	}
	return attackSize{legit: 80, stranger: 50, trickling: 12}
}

// TestAttacks runs each attack against one stack: prefill-0 behind its sidecar and two decode
// workers, the BUFFERED fail-open Envoy (the recommended profile) in front.
func TestAttacks(t *testing.T) {
	size := attackSizeFor()
	s := startStack(t, Config{
		Disagg: mainDisagg, ModelName: "qwen3", MaxModelLen: attackMaxModelLen,
		RouterYAML: fmt.Sprintf("unanswered_booking_timeout: %s\nstream_request_timeout: %s\nmax_buffered_bytes: %d\n",
			attackUnanswered, attackRequestTimeout, attackMaxBufferedMiB<<20),
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	t.Run("cpu_denial_by_fresh_4MiB_words", func(t *testing.T) { testCPUDenial(t, s, size) })
	t.Run("stranger_streams_that_book_and_stay_open", func(t *testing.T) { testStrangerBookings(t, s, size) })
	t.Run("trickle_fed_9MiB_streams", func(t *testing.T) { testTrickle(t, s, size) })
}

// legitPhase sends n fresh short chats (remote_ratio_too_high when the router can decide) from
// two clients and returns each request's time to first token and the reasons counted.
func legitPhase(t *testing.T, ctx context.Context, s *Stack, n int, seed uint64) ([]time.Duration, map[string]int) {
	t.Helper()
	var mu sync.Mutex
	var ttft []time.Duration
	reasons := map[string]int{}
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Go(func() {
			tick := time.NewTicker(legitPeriod)
			defer tick.Stop()
			for i := c; i < n; i += 2 {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				body := ChatBody([]Message{{Role: "user", Content: Words(seed+uint64(i), 300)}}, 4)
				r, err := s.Chat(ctx, body, nil)
				mu.Lock()
				switch {
				case err != nil:
					reasons["error: "+err.Error()]++
				case r.Status != http.StatusOK || !r.Done:
					reasons[fmt.Sprintf("status %d %s %.80s", r.Status, r.Header.Get("x-condisagg-error"), r.Body)]++
				default:
					reasons[r.Decision.Reason]++
					ttft = append(ttft, r.TTFT)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(ttft)
	return ttft, reasons
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// freshWordBody is a chat body whose prompt is a single word of n random letters: no
// pre-token boundary, nothing cached. Built by hand, cheaply: the attacker's CPU is not the
// router's, and on a 2-core test machine it would be.
func freshWordBody(rng *rand.Rand, n int) []byte {
	const head, tail = `{"model":"qwen3","messages":[{"role":"user","content":"`, `"}],"max_tokens":4,"stream":true}`
	b := make([]byte, 0, len(head)+n+len(tail))
	b = append(b, head...)
	for len(b) < len(head)+n {
		x := rng.Uint64()
		for j := 0; j < 8 && len(b) < len(head)+n; j++ {
			b = append(b, 'a'+byte((x>>(8*j))%26))
		}
	}
	return append(b, tail...)
}

// testCPUDenial: two clients upload a fresh 4 MiB single word about once a second each. Before
// the fix each cost seconds of BPE in a decision slot and legitimate decisions timed out in
// the queue (failure_open). Now legitimate requests keep their decisions (no failure_open)
// and their TTFT p99 within 2x of the quiet baseline measured just before.
func testCPUDenial(t *testing.T, s *Stack, size attackSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	a := &attackers{s: s, counts: map[string]int{}}
	for i := range 2 {
		// Each attacker is a client of its own (its own address: Envoy's source.address).
		a.clients = append(a.clients, clientFrom(fmt.Sprintf("127.0.0.%d", 2+i)))
		defer a.clients[i].CloseIdleConnections()
	}
	// Quiet and attacked blocks alternate, so that the load of whatever else runs on the
	// machine falls on both phases alike.
	var quiet, loaded []time.Duration
	quietReasons, loadedReasons := map[string]int{}, map[string]int{}
	var quietDec, loadedDec, quietWait, loadedWait buckets = buckets{}, buckets{}, buckets{}, buckets{}
	per := size.legit / attackBlocks
	for b := range attackBlocks {
		d0 := s.decisionLatency(t, ctx)
		q, qr := legitPhase(t, ctx, s, per, 23_000+uint64(b*per))
		d1 := s.decisionLatency(t, ctx)
		stop := a.start(ctx, uint64(b))
		l, lr := legitPhase(t, ctx, s, per, 24_000+uint64(b*per))
		stop()
		d2 := s.decisionLatency(t, ctx)
		quiet, loaded = append(quiet, q...), append(loaded, l...)
		maps.Copy(quietReasons, addCounts(quietReasons, qr))
		maps.Copy(loadedReasons, addCounts(loadedReasons, lr))
		// Refused attack requests never reach a decision: the decision histogram of an
		// attacked block holds the legitimate requests only. The slot waits hold both.
		quietDec, quietWait = quietDec.add(d1.dec, d0.dec), quietWait.add(d1.wait, d0.wait)
		loadedDec, loadedWait = loadedDec.add(d2.dec, d1.dec), loadedWait.add(d2.wait, d1.wait)
	}
	slices.Sort(quiet)
	slices.Sort(loaded)
	slices.Sort(a.took)
	dq50, dq99, dl50, dl99 := quietDec.q(t, 0.5), quietDec.q(t, 0.99), loadedDec.q(t, 0.5), loadedDec.q(t, 0.99)
	t.Logf("legit decisions (router): quiet p50 %.2f ms p99 %.2f ms; under attack p50 %.2f ms p99 %.2f ms (%.2fx); slot wait p99 quiet %.2f ms, under attack %.2f ms (attack requests included)",
		dq50*1e3, dq99*1e3, dl50*1e3, dl99*1e3, dl99/dq99, quietWait.q(t, 0.99)*1e3, loadedWait.q(t, 0.99)*1e3)
	qp50, qp99, lp50, lp99 := quantile(quiet, 0.5), quantile(quiet, 0.99), quantile(loaded, 0.5), quantile(loaded, 0.99)
	t.Logf("legit TTFT quiet p50 %v p99 %v; under attack p50 %v p99 %v (%.2fx); reasons quiet %v, under attack %v",
		qp50, qp99, lp50, lp99, float64(lp99)/float64(qp99), quietReasons, loadedReasons)
	t.Logf("attack requests %v, answered in p50 %v max %v", a.counts, quantile(a.took, 0.5), quantile(a.took, 1))
	if n := loadedReasons["failure_open"]; n > 0 || len(loaded) != per*attackBlocks || len(quiet) != per*attackBlocks {
		t.Errorf("%d of %d legitimate requests under attack went failure_open; quiet %v, under attack %v",
			n, per*attackBlocks, quietReasons, loadedReasons)
	}
	// What the client sees, as the issue measured it, at the full size (make chaos): 80
	// requests a phase on two cores shared with Envoy, six processes and whatever else runs
	// make p99 one or two requests, and those swing with the machine's load. The router's own
	// decision p99 is logged, not asserted: a decision takes ~0.2 ms, its histogram's buckets
	// double, and one GC cycle or preemption moves its p99 across a bucket.
	if os.Getenv("CHAOS") == "full" && lp99 > 2*qp99 {
		t.Errorf("legitimate TTFT p99 under attack %v is over twice the quiet baseline %v", lp99, qp99)
	}
	if a.counts["400 prompt_too_long"] == 0 {
		t.Errorf("no attack request got vLLM's 400 for a prompt over max_model_len: %v", a.counts)
	}
}

// attackBlocks is how many quiet and attacked blocks testCPUDenial alternates.
const attackBlocks = 4

// attackers upload fresh 4 MiB single words, each from its own client, once a second.
type attackers struct {
	s       *Stack
	clients []*http.Client
	mu      sync.Mutex // guards counts and took
	counts  map[string]int
	took    []time.Duration
}

// start sets every attacker going; the returned func stops them and waits for them.
func (a *attackers) start(ctx context.Context, seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, hc := range a.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				body := freshWordBody(rng, attackWordBytes)
				start := time.Now()
				status, code, err := post(ctx, hc, a.s.URL("/v1/chat/completions"), body)
				a.mu.Lock()
				a.took = append(a.took, time.Since(start))
				if err != nil {
					a.counts["error"]++
				} else {
					a.counts[fmt.Sprintf("%d %s", status, code)]++
				}
				a.mu.Unlock()
				select {
				case <-done:
					return
				case <-time.After(attackRequestInterval - min(time.Since(start), attackRequestInterval)):
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// addCounts returns a + b.
func addCounts(a, b map[string]int) map[string]int {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] += v
	}
	return out
}

// clientFrom is an HTTP client whose connections come from ip (a loopback address).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// post sends a chat body and returns the status and x-condisagg-error of the answer.
func post(ctx context.Context, hc *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header.Get("x-condisagg-error"), err
}

// latency is the router's decision and slot-wait histograms at one moment.
type latency struct{ dec, wait buckets }

func (s *Stack) decisionLatency(t *testing.T, ctx context.Context) latency {
	t.Helper()
	dec, err := s.decisionBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := s.histogram(ctx, "condisagg_extproc_decision_wait_seconds", "")
	if err != nil {
		t.Fatal(err)
	}
	return latency{dec, wait}
}

// sub is b - before, bound by bound.
func (b buckets) sub(before buckets) buckets { return buckets{}.add(b, before) }

// q is the q-quantile of b (0 without observations).
func (b buckets) q(t *testing.T, q float64) float64 {
	v, over, ok := b.quantile(q)
	if over {
		t.Logf("quantile %g in the +Inf bucket", q)
	}
	if !ok {
		return 0
	}
	return v
}

// extProcClient dials the router's ext_proc port directly, as a stranger on the network would.
func extProcClient(t *testing.T, s *Stack) extprocv3.ExternalProcessorClient {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

func chatHeaders(mode filterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	h := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	return &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: filterv3.ProcessingMode_STREAMED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{h(":method", "POST"), h(":path", "/v1/chat/completions"),
				h("content-type", "application/json")}}}}}
}

func bodyChunk(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// activePrefill is the prefill tokens the router has booked on prefill-0.
func activePrefill(ctx context.Context, s *Stack) (int64, error) {
	w, err := s.WorkerStatus(ctx, "prefill-0")
	if err != nil {
		return 0, err
	}
	return w.GetActivePrefillTokens(), nil
}

// testStrangerBookings: a stranger on the ext_proc port opens streams that each get a decision
// for a long fresh prompt (remote prefill: booked on prefill-0) and never go further. Before
// the fix the bookings lasted until booking_ttl (300 s) and flipped every legitimate remote
// prefill to local (prefill busy). Now they are released unanswered_booking_timeout after the
// decision while the streams stay open, and legitimate requests go remote again.
func testStrangerBookings(t *testing.T, s *Stack, size attackSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client := extProcClient(t, s)
	sctx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	decided := time.Now()
	for i := range size.stranger {
		st, err := client.Process(sctx)
		if err != nil {
			t.Fatal(err)
		}
		body := ChatBody([]Message{{Role: "user", Content: Words(77_000+uint64(i), 2200)}}, 4)
		for _, m := range []*extprocv3.ProcessingRequest{chatHeaders(filterv3.ProcessingMode_BUFFERED), bodyChunk(body, true)} {
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatalf("stranger stream %d: %v", i, err)
			}
		}
		decided = time.Now()
	}
	booked, err := activePrefill(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if booked == 0 && time.Since(decided) < attackUnanswered {
		t.Fatal("the stranger's decisions booked nothing: the scenario does not reproduce the attack")
	}
	t.Logf("%d stranger streams decided and open: %d prefill tokens booked on prefill-0", size.stranger, booked)
	// The streams stay open; their bookings must not.
	waitCtx, waitCancel := context.WithTimeout(ctx, attackUnanswered+5*time.Second)
	defer waitCancel()
	err = Poll(waitCtx, func() error {
		n, err := activePrefill(waitCtx, s)
		if err == nil && n != 0 {
			err = fmt.Errorf("%d prefill tokens still booked", n)
		}
		return err
	})
	if err != nil {
		t.Fatalf("%.1f s after the last decision, with the stranger's streams open: %v", time.Since(decided).Seconds(), err)
	}
	t.Logf("bookings released %.1f s after the last decision", time.Since(decided).Seconds())
	_, reasons := legitPhase(t, ctx, s, 10, 78_000)
	if reasons["remote_ratio_too_high"] != 10 {
		t.Fatalf("legitimate fresh prompts with the stranger's streams open: %v; want all remote_ratio_too_high", reasons)
	}
}

// testTrickle: streams on the ext_proc port each send 9 MiB of a full-duplex body and then one
// byte at a time, well inside the idle timeout. Before the fix the bodies stayed buffered as
// long as the trickle went on (no bound on the sum, the idle timer reset by every byte). Now
// the bytes every stream holds stay under max_buffered_bytes (chunks past it get 503), every
// stream ends at stream_request_timeout, and a legitimate request is served afterwards.
func testTrickle(t *testing.T, s *Stack, size attackSize) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client := extProcClient(t, s)
	sctx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	chunk := []byte(`{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("x", attackBodyChunk-64))
	ended := make(chan time.Duration, size.trickling)
	start := time.Now()
	var wg sync.WaitGroup
	for range size.trickling {
		st, err := client.Process(sctx)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { // the router's answer: an immediate response, or the stream's end
			for {
				r, err := st.Recv()
				if err != nil || r.GetImmediateResponse() != nil {
					ended <- time.Since(start)
					return
				}
			}
		})
		wg.Go(func() {
			if st.Send(chatHeaders(filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)) != nil {
				return
			}
			for range attackTrickleBodyMiB {
				if st.Send(bodyChunk(chunk, false)) != nil {
					return
				}
			}
			for {
				select {
				case <-sctx.Done():
					return
				case <-time.After(attackRequestTimeout / 8):
				}
				if st.Send(bodyChunk([]byte("x"), false)) != nil {
					return
				}
			}
		})
	}
	var peak float64
	deadline := time.After(attackRequestTimeout + 3*time.Second)
	done := 0
sample:
	for done < size.trickling {
		select {
		case <-ended:
			done++
		case <-deadline:
			break sample
		case <-time.After(100 * time.Millisecond):
			if v, err := s.RouterMetric(ctx, "condisagg_extproc_buffered_bytes"); err == nil {
				peak = max(peak, v)
			}
		}
	}
	hangUp()
	wg.Wait()
	t.Logf("%d streams of %d MiB trickled: peak buffered %.1f MiB (cap %d MiB), %d ended within %v",
		size.trickling, attackTrickleBodyMiB, peak/(1<<20), attackMaxBufferedMiB, done, attackRequestTimeout+3*time.Second)
	if limit := float64(attackMaxBufferedMiB<<20 + attackBodyChunk); peak > limit {
		t.Errorf("peak buffered bytes %.0f over max_buffered_bytes + one chunk (%.0f)", peak, limit)
	}
	if done != size.trickling {
		t.Errorf("%d of %d trickle-fed streams still open %v after they began (stream_request_timeout %v)",
			size.trickling-done, size.trickling, attackRequestTimeout+3*time.Second, attackRequestTimeout)
	}
	if err := Poll(ctx, func() error {
		v, err := s.RouterMetric(ctx, "condisagg_extproc_buffered_bytes")
		if err == nil && v != 0 {
			err = fmt.Errorf("%.0f bytes still buffered", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, reasons := legitPhase(t, ctx, s, 4, 79_000); reasons["remote_ratio_too_high"] != 4 {
		t.Fatalf("legitimate requests after the trickle: %v", reasons)
	}
}
