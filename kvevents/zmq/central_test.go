package kvzmq

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCentralTracksSeqPerTopic runs the centralized topology (§1.1): one bound SUB, two engines
// connecting with their own topic, both starting at seq 0 and both with gaps. Each topic keeps
// its own sequence (§8 "centralized mode tracks seq per topic"): both chains are healed by their
// own replay endpoint, and an engine connecting later clears nothing on the other stream.
func TestCentralTracksSeqPerTopic(t *testing.T) {
	ix, err := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	p1 := startPublisher(t, pubOptions{bufferSteps: 100, topic: "kv@w1", connectLater: true, newLayout: true})
	p2 := startPublisher(t, pubOptions{bufferSteps: 100, topic: "kv@w2", connectLater: true})
	c, err := NewCentral(Config{Metrics: m, PollInterval: 10 * time.Millisecond}, "tcp://127.0.0.1:*", []StreamConfig{
		{Worker: "w1", Topic: "kv@w1", ReplayEndpoint: p1.ReplayEndpoint},
		{Worker: "w2", Topic: "kv@w2", ReplayEndpoint: p2.ReplayEndpoint},
	}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	ep, err := c.Endpoint(ctx)
	if err != nil || ep == "" {
		t.Fatalf("central endpoint %q: %v", ep, err)
	}
	h := &harness{t: t, ix: ix, m: m, ctx: ctx}

	c1 := newChain(8, testBlockSize, 1000, 1<<40)
	c2 := newChain(6, testBlockSize, 7000, 1<<40) // same engine hashes as w1: streams are separate
	p1.ConnectPub(ep)
	p1.WaitSubscribed(t)
	publishRange(p1, c1, 0, 4, 2)
	h.waitFor(c.Subscriber("w1", 0), "w1 seq 3", settled(3))

	p2.ConnectPub(ep) // a new session: w1 runs the reconnect check
	p2.WaitSubscribed(t)
	publishRange(p2, c2, 0, 6, 1, 4)
	publishRange(p1, c1, 4, 7, 6)
	p1.Raw([][]byte{[]byte("kv@w1x"), be8(0), c1.batch(0)}) // nobody's topic (w1's is a prefix)
	publishRange(p1, c1, 7, 8)
	st1 := h.waitFor(c.Subscriber("w1", 0), "w1 seq 7", settled(7))
	st2 := h.waitFor(c.Subscriber("w2", 0), "w2 seq 5", settled(5))
	if b1, b2 := h.blocks("w1", c1), h.blocks("w2", c2); b1 != 8 || b2 != 6 {
		t.Fatalf("blocks w1=%d w2=%d, want 8 and 6", b1, b2)
	}
	if st1.Clears != 0 || st2.Clears != 0 || st1.HistoryLost+st2.HistoryLost != 0 {
		t.Fatalf("a stream was cleared: %+v / %+v", st1, st2)
	}
	if st1.Reconnects == 0 {
		t.Fatalf("w1 did not run the reconnect check when w2 connected: %+v", st1)
	}
	if n := h.counter(m.DroppedFrames, "central", "unknown_topic"); n != 1 {
		t.Fatalf("unknown_topic drops = %v, want 1", n)
	}
	if got := len(c.Status()); got != 2 {
		t.Fatalf("status has %d streams, want 2", got)
	}
}

func TestNewCentralValidates(t *testing.T) {
	ix, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	cfg := Config{Metrics: NewMetrics(prometheus.NewRegistry())}
	_, err := NewCentral(cfg, "tcp://127.0.0.1:*", []StreamConfig{
		{Worker: "a", Topic: "t"}, {Worker: "b", Topic: "t"}, {Worker: "c"},
	}, ix, kvevents.Limits{})
	if err == nil {
		t.Fatal("duplicate and empty topics accepted")
	}
}

// TestNewCentralRejectsConfig checks that a bad shared config is an error naming the field, not
// a panic while the appliers are built (STYLE §2.4: all problems at once).
func TestNewCentralRejectsConfig(t *testing.T) {
	ix, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	_, err := NewCentral(Config{}, "tcp://127.0.0.1:*", []StreamConfig{{Topic: "t"}}, ix, kvevents.Limits{})
	if err == nil || !strings.Contains(err.Error(), "metrics") || !strings.Contains(err.Error(), "stream worker") {
		t.Fatalf("NewCentral without metrics and with an unnamed stream: err = %v, want both problems", err)
	}
}

// rawBatches publishes batches from..to-1 of c with sequence numbers seq0, seq0+1, ... on
// topic, as a publisher with its own numbering does (llm-d's inference simulator starts at 1).
func rawBatches(p *testPublisher, topic string, c chain, from, to int, seq0 uint64) {
	for i := from; i < to; i++ {
		p.Raw([][]byte{[]byte(topic), be8(seq0 + uint64(i-from)), c.batch(i)})
	}
}

// TestCentralDialingPublishersFromSeq1: publishers that dial the bound socket and number their
// batches from 1 without a replay endpoint (llm-d's inference simulator), one per model index.
// Each topic is credited to its own worker in its own index; the first batch at seq 1 costs no
// clear; a message of another topic is counted and dropped; a publisher restart (seq back to 1,
// new hashes) costs exactly one clear of that worker and leaves the other alone.
func TestCentralDialingPublishersFromSeq1(t *testing.T) {
	ixA, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	ixB, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	central, mA, mB := NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry())
	pA := startPublisher(t, pubOptions{noReplay: true, connectLater: true})
	pB := startPublisher(t, pubOptions{noReplay: true, connectLater: true})
	c, err := NewCentralStreams(Config{Metrics: central, PollInterval: 10 * time.Millisecond}, "tcp://127.0.0.1:*", []CentralStream{
		{StreamConfig: StreamConfig{Worker: "a", Topic: "kv@10.0.0.1@m"}, Index: ixA, Metrics: mA},
		{StreamConfig: StreamConfig{Worker: "b", Topic: "kv@10.0.0.2@n"}, Index: ixB, Metrics: mB},
	}, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	ep, err := c.Endpoint(ctx)
	if err != nil || ep == "" {
		t.Fatalf("central endpoint %q: %v", ep, err)
	}
	hA := &harness{t: t, ix: ixA, m: mA, ctx: ctx}
	hB := &harness{t: t, ix: ixB, m: mB, ctx: ctx}
	pA.ConnectPub(ep)
	pB.ConnectPub(ep)
	pA.WaitSubscribed(t)
	pB.WaitSubscribed(t)

	cA, cB := newChain(4, testBlockSize, 100, 1<<40), newChain(3, testBlockSize, 5000, 1<<41)
	// Nobody's topic, published first: a's batches behind it on the same connection settle
	// only after it was read. The SUB takes every topic, so it is counted, not filtered.
	pA.Raw([][]byte{[]byte("kv@10.0.0.3@m"), be8(1), cA.batch(0)})
	rawBatches(pA, "kv@10.0.0.1@m", cA, 0, 4, 1)
	rawBatches(pB, "kv@10.0.0.2@n", cB, 0, 3, 1)
	stA := hA.waitFor(c.Subscriber("a", 0), "a seq 4", settled(4))
	stB := hB.waitFor(c.Subscriber("b", 0), "b seq 3", settled(3))
	if a, b := hA.blocks("a", cA), hB.blocks("b", cB); a != 4 || b != 3 {
		t.Fatalf("blocks a=%d b=%d, want 4 and 3", a, b)
	}
	if hA.blocks("b", cB) != 0 || hB.blocks("a", cA) != 0 {
		t.Fatal("a stream applied to the other model's index")
	}
	if stA.Clears+stB.Clears != 0 || hA.counter(mA.Clears, "a", "history_lost")+hB.counter(mB.Clears, "b", "history_lost") != 0 {
		t.Fatalf("a first batch at seq 1 cleared: %+v / %+v", stA, stB)
	}
	if n := testutil.ToFloat64(central.DroppedFrames.WithLabelValues("central", "unknown_topic")); n != 1 {
		t.Fatalf("unknown_topic drops = %v, want 1", n)
	}

	// The publisher of a restarts: seq back to 1, another process's hashes and tokens.
	cA2 := newChain(2, testBlockSize, 9000, 1<<42)
	rawBatches(pA, "kv@10.0.0.1@m", cA2, 0, 2, 1)
	stA = hA.waitFor(c.Subscriber("a", 0), "a restarted, seq 2", func(s StreamStatus) bool { return s.Restarts == 1 && settled(2)(s) })
	if stA.Clears != 1 || hA.counter(mA.Clears, "a", "restart") != 1 || hA.counter(mA.Clears, "a", "history_lost") != 0 {
		t.Fatalf("restart: %+v, want exactly one clear (restart)", stA)
	}
	if old, cur := hA.blocks("a", cA), hA.blocks("a", cA2); old != 0 || cur != 2 {
		t.Fatalf("after the restart a holds %d blocks of the old chain and %d of the new, want 0 and 2", old, cur)
	}
	if b := hB.blocks("b", cB); b != 3 || c.Subscriber("b", 0).Status().Clears != 0 {
		t.Fatalf("b was touched by a's restart: %d blocks, %+v", b, c.Subscriber("b", 0).Status())
	}
}

// TestCentralBindInUse: a second Central on a bound endpoint fails Run with the bind error,
// and Endpoint reports "" (serve turns it into a startup error).
func TestCentralBindInUse(t *testing.T) {
	ix, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	cfg := Config{Metrics: NewMetrics(prometheus.NewRegistry()), PollInterval: 10 * time.Millisecond}
	first, err := NewCentral(cfg, "tcp://127.0.0.1:*", []StreamConfig{{Worker: "a", Topic: "t"}}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { _ = first.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	ep, err := first.Endpoint(ctx)
	if err != nil || ep == "" {
		t.Fatalf("first endpoint %q: %v", ep, err)
	}
	second, err := NewCentral(Config{Metrics: NewMetrics(prometheus.NewRegistry())}, ep, []StreamConfig{{Worker: "a", Topic: "t"}}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	runErr := second.Run(ctx)
	if runErr == nil || !strings.Contains(runErr.Error(), "bind central SUB endpoint="+ep) {
		t.Fatalf("second Run on %s: %v, want the bind error", ep, runErr)
	}
	if got, err := second.Endpoint(ctx); got != "" || err != nil {
		t.Fatalf("second Endpoint = %q, %v; want \"\"", got, err)
	}
}

// TestNewCentralStreamsValidates: a stream without an index, or a (worker, rank) twice.
func TestNewCentralStreamsValidates(t *testing.T) {
	ix, _ := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	_, err := NewCentralStreams(Config{Metrics: NewMetrics(prometheus.NewRegistry())}, "tcp://127.0.0.1:*", []CentralStream{
		{StreamConfig: StreamConfig{Worker: "a", Topic: "t1"}},
		{StreamConfig: StreamConfig{Worker: "b", Topic: "t2"}, Index: ix},
		{StreamConfig: StreamConfig{Worker: "b", Topic: "t3"}, Index: ix},
	}, kvevents.Limits{})
	if err == nil || !strings.Contains(err.Error(), "stream a index: nil") || !strings.Contains(err.Error(), "stream b rank 0: configured twice") {
		t.Fatalf("err = %v", err)
	}
}
