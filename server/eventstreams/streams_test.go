package eventstreams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvevents"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
)

// startStreams runs a kvzmq group on a real index with one stream per publisher endpoint
// (workers w0, w1, ...) and returns the policy's view of them.
func startStreams(t testing.TB, endpoints []string) (*Streams, *kvzmq.Group) {
	t.Helper()
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	g, err := kvzmq.NewGroup(kvzmq.Config{Metrics: kvzmq.NewMetrics(prometheus.NewRegistry())}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, ep := range endpoints {
		if err := g.Add(ctx, kvzmq.StreamConfig{Worker: fmt.Sprintf("w%d", i), Endpoint: ep}); err != nil {
			t.Fatal(err)
		}
	}
	return New(g, nil), g
}

// TestEventStreamsCountRoutedSinceStored: the routed count of a worker grows with Routed,
// starts again from 0 when the worker's stream accepts a BlockStored, and is per worker; a
// worker without a stream is down. The stream is a real ZMQ publisher (vllm-sim's).
func TestEventStreamsCountRoutedSinceStored(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := vllmsim.NewPublisher(vllmsim.PublisherConfig{KVEventsConfig: vllmsim.KVEventsConfig{
		EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: "tcp://127.0.0.1:*", BufferSteps: 100, HWM: 1000, MaxQueueSize: 100}})
	done := make(chan error, 1)
	go func() { done <- pub.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ep, _, err := pub.Ready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	es, g := startStreams(t, []string{ep, "tcp://127.0.0.1:1"}) // w1: nothing listens there
	if st := es.Stream("nobody", time.Now()); st.Connected || !st.LastStored.IsZero() || st.RoutedSinceStored != 0 {
		t.Fatalf("worker without a stream: %+v, want the zero stream", st)
	}
	for range 3 {
		es.Routed("w0")
	}
	es.Routed("w1")
	if n := es.Stream("w0", time.Now()).RoutedSinceStored; n != 3 {
		t.Fatalf("w0 routed since stored = %d, want 3", n)
	}
	if n := es.Stream("w1", time.Now()).RoutedSinceStored; n != 1 {
		t.Fatalf("w1 routed since stored = %d, want 1", n)
	}

	// One BlockStored from w0's engine: its count starts again, w1's does not.
	sub := g.Subscriber("w0", 0)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := sub.Wait(wctx, func(s kvzmq.StreamStatus) bool { return s.Connected }); err != nil {
		t.Fatal(err)
	}
	enc := vllmsim.Encoder{Format: vllmsim.FormatMap, BlockSize: 16}
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(100 + i)
	}
	// A SUB drops what the PUB sent before the subscription reached it: publish until stored.
	var st kvzmq.StreamStatus
	for h := uint64(1); st.StoredBatches == 0; h++ {
		payload := enc.AppendBatch(nil, 1, []sim.Event{{Kind: sim.EventBlockStored, Hashes: []uint64{h}, Tokens: toks}})
		if err := pub.Publish(ctx, payload); err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(wctx, 100*time.Millisecond)
		st, _ = sub.Wait(pctx, func(s kvzmq.StreamStatus) bool { return s.StoredBatches > 0 })
		pcancel()
		if wctx.Err() != nil {
			t.Fatal("no BlockStored accepted within 10 s")
		}
	}
	got := es.Stream("w0", time.Now())
	if got.RoutedSinceStored != 0 || !got.Connected || !got.LastStored.Equal(st.LastStored) {
		t.Fatalf("w0 after a store = %+v, want connected, routed 0, last stored %v", got, st.LastStored)
	}
	es.Routed("w0")
	if n := es.Stream("w0", time.Now()).RoutedSinceStored; n != 1 {
		t.Fatalf("w0 routed since the store = %d, want 1", n)
	}
	if n := es.Stream("w1", time.Now()).RoutedSinceStored; n != 1 {
		t.Fatalf("w1 routed since stored = %d, want 1 (another worker's store must not reset it)", n)
	}
}

// TestRoutedWordSaturates: the packed count stops at its maximum instead of wrapping into the
// batch number.
func TestRoutedWordSaturates(t *testing.T) {
	w := routedWord(7, routedCountMax)
	if n := routedSince(w, 7); n != routedCountMax {
		t.Fatalf("count = %d, want %d", n, routedCountMax)
	}
	if n := routedSince(w, 8); n != 0 {
		t.Fatalf("count of another batch = %d, want 0", n)
	}
	if n := routedSince(routedWord(1<<41+5, 2), 1<<41+5); n != 2 {
		t.Fatalf("count with a batch number past 40 bits = %d, want 2", n)
	}
}

// BenchmarkEventStreams is the stream signal of one decision on 64 workers: Stream for every
// worker and Routed for the chosen one, GOMAXPROCS decisions in parallel.
func BenchmarkEventStreams(b *testing.B) {
	eps := make([]string, 64)
	for i := range eps {
		eps[i] = "tcp://127.0.0.1:1" // nothing listens: the streams stay down and idle
	}
	es, _ := startStreams(b, eps)
	ids := make([]string, len(eps))
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d", i)
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			for _, id := range ids {
				_ = es.Stream(id, now)
			}
			es.Routed(ids[i%len(ids)])
			i++
		}
	})
}

// TestEventStreamsBound: a worker rank whose publisher dials the bound socket (kvzmq.Central)
// is resolved by its pool id like a dialled one: Has, Stream (connected, last stored) and
// StreamInfo come from the bound stream, and another model's or an unknown worker has none.
// The publisher is vllm-sim's, connecting its PUB as vLLM does when the endpoint has no '*'.
func TestEventStreamsBound(t *testing.T) {
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	m := kvzmq.NewMetrics(prometheus.NewRegistry())
	c, err := kvzmq.NewCentral(kvzmq.Config{Metrics: m, PollInterval: 10 * time.Millisecond}, "tcp://127.0.0.1:*",
		[]kvzmq.StreamConfig{{Worker: "b", Rank: 1, Topic: "kv@b"}}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	defer func() { cancel(); <-runDone }()
	bound, err := c.Endpoint(ctx)
	if err != nil || bound == "" {
		t.Fatalf("bound endpoint %q: %v", bound, err)
	}
	es, _ := startStreams(t, []string{"tcp://127.0.0.1:1"}) // w0: dialled, nothing listens
	es.bound = c
	if !es.Has("b/dp1") || es.Has("b") || !es.Has("w0") || es.Has("nobody") {
		t.Fatalf("Has: b/dp1=%v b=%v w0=%v nobody=%v, want true false true false",
			es.Has("b/dp1"), es.Has("b"), es.Has("w0"), es.Has("nobody"))
	}

	pctx, pcancel := context.WithCancel(ctx)
	pub := vllmsim.NewPublisher(vllmsim.PublisherConfig{KVEventsConfig: vllmsim.KVEventsConfig{
		EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: bound, Topic: "kv@b", BufferSteps: 100, HWM: 1000, MaxQueueSize: 100}})
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.Run(pctx) }()
	defer func() { pcancel(); <-pubDone }()
	es.Routed("b/dp1")
	enc := vllmsim.Encoder{Format: vllmsim.FormatMap, BlockSize: 16, Rank: 1}
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(300 + i)
	}
	sub := c.Subscriber("b", 1)
	var st kvzmq.StreamStatus
	// The PUB drops what it sends before the subscription reached it: publish until stored.
	for h := uint64(1); st.StoredBatches == 0; h++ {
		payload := enc.AppendBatch(nil, 1, []sim.Event{{Kind: sim.EventBlockStored, Hashes: []uint64{h}, Tokens: toks}})
		if err := pub.Publish(ctx, payload); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		st, _ = sub.Wait(wctx, func(s kvzmq.StreamStatus) bool { return s.StoredBatches > 0 })
		wcancel()
		if ctx.Err() != nil {
			t.Fatal("no BlockStored accepted within 10 s")
		}
	}
	got := es.Stream("b/dp1", time.Now())
	if !got.Connected || !got.LastStored.Equal(st.LastStored) || got.RoutedSinceStored != 0 {
		t.Fatalf("b/dp1 after a store = %+v, want connected, last stored %v, routed 0", got, st.LastStored)
	}
	if si, ok := es.StreamInfo("b/dp1"); !ok || !si.HasLastSeq || si.LastEvent.IsZero() {
		t.Fatalf("StreamInfo(b/dp1) = %+v, %v", si, ok)
	}
	var out kvindex.Overlaps
	ix.Overlap(kvindex.Keys(toks, 16, nil), &out)
	if len(out.Workers) != 1 || out.Workers[0].Worker != "b/dp1" || out.Workers[0].GPU != 1 {
		t.Fatalf("index overlaps %+v, want one block on b/dp1", out.Workers)
	}
}
