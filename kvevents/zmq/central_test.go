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
