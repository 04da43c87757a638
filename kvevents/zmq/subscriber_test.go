package kvzmq

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/leakcheck"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const testBlockSize = 16

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/kvevents/zmq.") }

// harness is one real index, metrics registry and subscriber group.
type harness struct {
	t   *testing.T
	ix  *kvindex.Index
	m   *Metrics
	g   *Group
	ctx context.Context
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	ix, err := kvindex.New(kvindex.Config{BlockSize: testBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	g, err := NewGroup(cfg, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return &harness{t: t, ix: ix, m: cfg.Metrics, g: g, ctx: ctx}
}

func (h *harness) add(worker string, p *testPublisher) *Subscriber {
	h.t.Helper()
	sc := StreamConfig{Worker: worker, Endpoint: p.PubEndpoint, ReplayEndpoint: p.ReplayEndpoint}
	if err := h.g.Add(h.ctx, sc); err != nil {
		h.t.Fatal(err)
	}
	return h.g.Subscriber(worker, 0)
}

// blocks is the number of leading blocks of c that worker holds on GPU.
func (h *harness) blocks(worker string, c chain) int {
	var out kvindex.Overlaps
	h.ix.Overlap(kvindex.Keys(c.tokens, testBlockSize, nil), &out)
	for _, w := range out.Workers {
		if w.Worker == kvindex.WorkerID(worker) {
			return w.GPU
		}
	}
	return 0
}

// waitFor waits until cond holds for the stream (checked on every state change) or fails.
func (h *harness) waitFor(s *Subscriber, what string, cond func(StreamStatus) bool) StreamStatus {
	h.t.Helper()
	st, err := s.Wait(h.ctx, cond)
	if err != nil {
		h.t.Fatalf("waiting for %s: %v; last status %+v", what, err, st)
	}
	return st
}

// settled reports that the stream applied seq and holds nothing back.
func settled(seq uint64) func(StreamStatus) bool {
	return func(s StreamStatus) bool { return s.HasLast && s.LastSeq == seq && !s.Replaying }
}

func (h *harness) counter(c *prometheus.CounterVec, labels ...string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(labels...))
}

func publishRange(p *testPublisher, c chain, from, to int, dropped ...int) {
	for i := from; i < to; i++ {
		drop := false
		for _, d := range dropped {
			drop = drop || d == i
		}
		if drop {
			p.PublishDropped(c.batch(i))
		} else {
			p.Publish(c.batch(i))
		}
	}
}

// TestSubscriberGapReplayHeals drops batches on the publisher side and checks that the replay
// heals the gap: the index equals a run with no drop, and nothing is cleared (§1.5, §1.6 rule 4).
func TestSubscriberGapReplayHeals(t *testing.T) {
	for _, layout := range []struct {
		name string
		new  bool
	}{{"old_3_frame_layout", false}, {"new_4_frame_layout", true}} {
		t.Run(layout.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			p := startPublisher(t, pubOptions{bufferSteps: 100, newLayout: layout.new, topic: "kv"})
			s := h.add("w", p)
			p.WaitSubscribed(t)
			c := newChain(12, testBlockSize, 1000, 1<<40)
			publishRange(p, c, 0, 12, 4, 5, 9)
			st := h.waitFor(s, "seq 11", settled(11))
			if got := h.blocks("w", c); got != 12 {
				t.Fatalf("index holds %d blocks of the chain, want 12 (as with no drop)", got)
			}
			// The drops make one or two gaps: when the subscriber is slow (a loaded machine), the
			// replay for 4..5 is served after 9 was dropped too and heals both at once.
			if st.Gaps < 1 || st.HistoryLost != 0 || st.Clears != 0 {
				t.Fatalf("gaps=%d history_lost=%d clears=%d, want >=1, 0, 0 (status %+v)", st.Gaps, st.HistoryLost, st.Clears, st)
			}
			if st.LastStored.IsZero() || st.LastStored.After(st.LastEvent) {
				t.Fatalf("LastStored=%v LastEvent=%v: stored batches were applied, so LastStored must be set and not after LastEvent", st.LastStored, st.LastEvent)
			}
			if n := h.counter(h.m.Replays, "w", string(kvevents.ReplaySuccess)); n < float64(st.Gaps) {
				t.Fatalf("successful replays counted %v, want >= %d (one per gap)", n, st.Gaps)
			}
			for _, bad := range []kvevents.ReplayOutcome{kvevents.ReplayLost, kvevents.ReplayMismatch} {
				if n := h.counter(h.m.Replays, "w", string(bad)); n != 0 {
					t.Fatalf("replays counted %s: %v, want 0", bad, n)
				}
			}
		})
	}
}

// TestSubscriberPublisherRestart restarts the publisher (seq back to 0, new engine hashes) and
// checks that the worker's index is cleared and rebuilt from the new process only (§1.6 rule 5).
func TestSubscriberPublisherRestart(t *testing.T) {
	h := newHarness(t, Config{})
	a := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", a)
	a.WaitSubscribed(t)
	old := newChain(6, testBlockSize, 1000, 1<<40)
	publishRange(a, old, 0, 6)
	h.waitFor(s, "seq 5", settled(5))
	a.Stop()

	b := startPublisher(t, pubOptions{bufferSteps: 100, pubPort: port(t, a.PubEndpoint), replayPort: port(t, a.ReplayEndpoint)})
	b.WaitSubscribed(t)
	fresh := newChain(3, testBlockSize, 5000, 2<<40)
	publishRange(b, fresh, 0, 3)
	st := h.waitFor(s, "restart rebuilt", func(st StreamStatus) bool {
		return settled(2)(st) && h.blocks("w", fresh) == 3
	})
	if got := h.blocks("w", old); got != 0 {
		t.Fatalf("old process blocks still indexed: %d", got)
	}
	if st.Clears == 0 {
		t.Fatalf("no clear after the restart: %+v", st)
	}
}

// TestSubscriberFastRestartReconnectCheck restarts the publisher and lets the new process pass
// the old expect before the subscriber reconnects: only the reconnect digest check can tell
// (§1.6 "Reconnect"). The index must hold the new process's chain and nothing of the old one.
func TestSubscriberFastRestartReconnectCheck(t *testing.T) {
	h := newHarness(t, Config{})
	a := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", a)
	a.WaitSubscribed(t)
	old := newChain(4, testBlockSize, 1000, 1<<40)
	publishRange(a, old, 0, 4)
	h.waitFor(s, "seq 3", settled(3))
	a.Stop()

	b := startPublisher(t, pubOptions{bufferSteps: 100, pubPort: port(t, a.PubEndpoint), replayPort: port(t, a.ReplayEndpoint)})
	fresh := newChain(10, testBlockSize, 5000, 2<<40)
	publishRange(b, fresh, 0, 8, 0, 1, 2, 3, 4, 5, 6, 7) // before the subscriber is back: never seen live
	b.WaitSubscribed(t)
	publishRange(b, fresh, 8, 10)
	st := h.waitFor(s, "new chain", func(st StreamStatus) bool {
		return settled(9)(st) && h.blocks("w", fresh) == 10
	})
	if got := h.blocks("w", old); got != 0 {
		t.Fatalf("old process blocks still indexed: %d (status %+v)", got, st)
	}
	if n := h.counter(h.m.Clears, "w", string(kvevents.ClearReconnectMismatch)); n != 1 {
		t.Fatalf("reconnect_mismatch clears = %v, want 1 (status %+v)", n, st)
	}
	if !st.Monitored || st.Reconnects == 0 {
		t.Fatalf("reconnect not detected: %+v", st)
	}
}

// TestSubscriberReconnectSamePublisher drops the connection to a publisher that keeps running:
// the reconnect check finds the same digest at last.seq, and nothing is cleared (§1.6
// "Reconnect", §8 "reconnect to the same publisher").
func TestSubscriberReconnectSamePublisher(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(6, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 4)
	h.waitFor(s, "seq 3", settled(3))
	p.Bounce()
	p.WaitSubscribed(t)
	publishRange(p, c, 4, 6)
	st := h.waitFor(s, "seq 5 after reconnect", func(st StreamStatus) bool { return settled(5)(st) && st.Reconnects > 0 })
	if st.Clears != 0 || st.Restarts != 0 {
		t.Fatalf("reconnect to the same publisher cleared the stream: %+v", st)
	}
	if got := h.blocks("w", c); got != 6 {
		t.Fatalf("index holds %d blocks, want 6", got)
	}
}

// TestSubscriberHistoryLost uses a replay ring too short to cover the gap: the stream is cleared
// and history_lost counted (§1.6 replay outcome "lost").
func TestSubscriberHistoryLost(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 2})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(8, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 8, 3, 4, 5)
	st := h.waitFor(s, "seq 7", settled(7))
	if st.HistoryLost != 1 || st.ReplaysLost != 1 {
		t.Fatalf("history_lost=%d replays_lost=%d, want 1, 1", st.HistoryLost, st.ReplaysLost)
	}
	if n := h.counter(h.m.HistoryLost, "w"); n != 1 {
		t.Fatalf("history_lost metric %v, want 1", n)
	}
	if got := h.blocks("w", c); got != 0 {
		t.Fatalf("cleared stream still matches %d leading blocks", got)
	}
}

// TestSubscriberNoReplayEndpoint: without a replay endpoint a gap clears the stream at once and
// ingestion continues (§1.6, §7).
func TestSubscriberNoReplayEndpoint(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{noReplay: true})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(6, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 6, 2)
	st := h.waitFor(s, "seq 5", settled(5))
	if st.HistoryLost != 1 || st.Replays != 0 {
		t.Fatalf("history_lost=%d replays=%d, want 1, 0", st.HistoryLost, st.Replays)
	}
	if got := h.blocks("w", c); got != 0 {
		t.Fatalf("cleared stream still matches %d leading blocks", got)
	}
}

// TestSubscriberReplayTimeout: a replay endpoint that never answers ends the replay after the
// idle timeout as lost, and the buffered live batches are applied.
func TestSubscriberReplayTimeout(t *testing.T) {
	h := newHarness(t, Config{ReplayIdleTimeout: 150 * time.Millisecond, ReplayTotalTimeout: time.Second})
	p := startPublisher(t, pubOptions{bufferSteps: 100, silentReplay: true})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(5, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 5, 2)
	st := h.waitFor(s, "seq 4", settled(4))
	if st.ReplaysLost != 1 || st.HistoryLost != 1 {
		t.Fatalf("replays_lost=%d history_lost=%d, want 1, 1", st.ReplaysLost, st.HistoryLost)
	}
}

// TestSubscriberMidStreamJoin: the subscriber joins after seq 0..4 were published; it bootstraps
// from 0 through the replay (§1.6 rule 2).
func TestSubscriberMidStreamJoin(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	c := newChain(7, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 5) // nobody subscribed yet: the PUB drops them
	s := h.add("w", p)
	p.WaitSubscribed(t)
	publishRange(p, c, 5, 7)
	st := h.waitFor(s, "seq 6", settled(6))
	if got := h.blocks("w", c); got != 7 {
		t.Fatalf("index holds %d blocks after bootstrap, want 7", got)
	}
	if st.HistoryLost != 0 || st.Replays == 0 {
		t.Fatalf("history_lost=%d replays=%d, want 0, >0", st.HistoryLost, st.Replays)
	}
}

// TestSubscriberSlowJoiner publishes while the subscription is still on its way (PUB/SUB's slow
// joiner, §1.4): whatever was lost is replayed.
func TestSubscriberSlowJoiner(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", p)
	c := newChain(21, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 20)
	p.WaitSubscribed(t)
	publishRange(p, c, 20, 21)
	st := h.waitFor(s, "seq 20", settled(20))
	if got := h.blocks("w", c); got != 21 {
		t.Fatalf("index holds %d blocks, want 21", got)
	}
	if st.HistoryLost != 0 {
		t.Fatalf("history_lost=%d, want 0", st.HistoryLost)
	}
}

// TestGroupDeadPublisher stops one publisher: the other stream carries on, and removing the dead
// worker drops its index entries (§1.6 discovery).
func TestGroupDeadPublisher(t *testing.T) {
	h := newHarness(t, Config{})
	p1 := startPublisher(t, pubOptions{bufferSteps: 100})
	p2 := startPublisher(t, pubOptions{bufferSteps: 100})
	s1, s2 := h.add("w1", p1), h.add("w2", p2)
	p1.WaitSubscribed(t)
	p2.WaitSubscribed(t)
	c1 := newChain(3, testBlockSize, 1000, 1<<40)
	c2 := newChain(10, testBlockSize, 9000, 3<<40)
	publishRange(p1, c1, 0, 3)
	h.waitFor(s1, "w1 seq 2", settled(2))
	p1.Stop()
	publishRange(p2, c2, 0, 10)
	h.waitFor(s2, "w2 seq 9", settled(9))
	if got := h.blocks("w2", c2); got != 10 {
		t.Fatalf("w2 holds %d blocks, want 10", got)
	}
	if got := h.blocks("w1", c1); got != 3 {
		t.Fatalf("dead w1 lost its index before removal: %d blocks, want 3", got)
	}
	if err := h.g.Remove(h.ctx, "w1", 0); err != nil {
		t.Fatal(err)
	}
	if got := h.blocks("w1", c1); got != 0 {
		t.Fatalf("removed w1 still holds %d blocks", got)
	}
	if st := h.g.Status(); len(st) != 1 || st[0].Worker != "w2" {
		t.Fatalf("group status after removal: %+v", st)
	}
}

// TestSubscriberDropsBadMessages sends messages with the wrong frame count, a short seq and an
// oversized payload: each is dropped and counted and does not advance seq (§1.2).
func TestSubscriberDropsBadMessages(t *testing.T) {
	h := newHarness(t, Config{MaxPayloadBytes: 4096})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(2, testBlockSize, 1000, 1<<40)
	p.Publish(c.batch(0))
	p.Raw([][]byte{{}, be8(1)})
	p.Raw([][]byte{{}, be8(1)[:4], c.batch(1)})
	p.Raw([][]byte{{}, be8(1), make([]byte, 4097)})
	p.Publish(c.batch(1))
	st := h.waitFor(s, "seq 1", func(st StreamStatus) bool { return settled(1)(st) && st.Dropped == 3 })
	for _, r := range []kvevents.DropReason{kvevents.DropFrames, kvevents.DropSeqSize, kvevents.DropTooLarge} {
		if n := h.counter(h.m.DroppedFrames, "w", string(r)); n != 1 {
			t.Errorf("dropped{%s} = %v, want 1", r, n)
		}
	}
	if st.Gaps != 0 || h.blocks("w", c) != 2 {
		t.Fatalf("bad messages disturbed the stream: %+v, blocks %d", st, h.blocks("w", c))
	}
}

// TestSubscriberMalformedBatchClears: a payload that is not a batch consumes its seq and clears
// the stream (§2.4 rule 6).
func TestSubscriberMalformedBatchClears(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(3, testBlockSize, 1000, 1<<40)
	p.Publish(c.batch(0))
	p.Publish([]byte{0xc1}) // never-used msgpack byte
	st := h.waitFor(s, "seq 1", settled(1))
	if st.MalformedClear != 1 || h.counter(h.m.Clears, "w", string(kvevents.ClearMalformedBatch)) != 1 {
		t.Fatalf("malformed batch not cleared: %+v", st)
	}
	if got := h.blocks("w", c); got != 0 {
		t.Fatalf("index kept %d blocks after a malformed batch", got)
	}
}

// TestSubscriberRankMismatch: batches of another data-parallel rank are dropped, the stream is
// not cleared (§1.3).
func TestSubscriberRankMismatch(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	sc := StreamConfig{Worker: "w", Rank: 1, Endpoint: p.PubEndpoint, ReplayEndpoint: p.ReplayEndpoint}
	if err := h.g.Add(h.ctx, sc); err != nil {
		t.Fatal(err)
	}
	s := h.g.Subscriber("w", 1)
	p.WaitSubscribed(t)
	c := newChain(2, testBlockSize, 1000, 1<<40) // rank 0 batches
	publishRange(p, c, 0, 2)
	st := h.waitFor(s, "seq 1", settled(1))
	if n := h.counter(h.m.DroppedFrames, "w/dp1", "rank_mismatch"); n != 2 || st.Clears != 0 {
		t.Fatalf("rank_mismatch=%v clears=%d, want 2, 0", n, st.Clears)
	}
}

func TestGroupAddErrors(t *testing.T) {
	h := newHarness(t, Config{})
	err := h.g.Add(h.ctx, StreamConfig{Worker: "w", Endpoint: "bogus://x"})
	if err == nil || !strings.Contains(err.Error(), "bogus://x") {
		t.Fatalf("bad endpoint: err %v, want one naming the endpoint", err)
	}
	if err := h.g.Add(h.ctx, StreamConfig{}); err == nil {
		t.Fatal("empty stream config accepted")
	}
	if err := h.g.Remove(h.ctx, "nobody", 0); err == nil {
		t.Fatal("removing an unknown stream succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{RcvHWM: 1000, PollInterval: -1, ReplayIdleTimeout: 5 * time.Second, ReplayTotalTimeout: time.Second}.Validate()
	for _, want := range []string{"rcvhwm: 1000", "poll_interval", "replay_total_timeout", "metrics"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want a problem naming %q", err, want)
		}
	}
	if err := (Config{Metrics: NewMetrics(prometheus.NewRegistry())}).Validate(); err != nil {
		t.Fatalf("zero config with metrics: %v", err)
	}
}

func TestOffsetEndpoint(t *testing.T) {
	cases := []struct {
		spec, in string
		rank     int64
		want     string
		err      bool
	}{
		{"§1.3 rank 0 unchanged", "tcp://*:5557", 0, "tcp://*:5557", false},
		{"§1.3 tcp port + rank", "tcp://10.0.0.1:5557", 3, "tcp://10.0.0.1:5560", false},
		{"§1.3 ipv6 last colon", "tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"§1.3 inproc suffix", "inproc://kv", 2, "inproc://kv_dp2", false},
		{"§1.3 ipc rank > 0 rejected", "ipc:///tmp/kv", 1, "", true},
		{"§1.3 ipc rank 0 fine", "ipc:///tmp/kv", 0, "ipc:///tmp/kv", false},
		{"bad port", "tcp://host:abc", 1, "", true},
		{"port overflow", "tcp://host:65535", 1, "", true},
		{"no scheme", "host:5557", 1, "", true},
	}
	for _, c := range cases {
		got, err := OffsetEndpoint(c.in, c.rank)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%s: OffsetEndpoint(%q, %d) = %q, %v; want %q, err=%t", c.spec, c.in, c.rank, got, err, c.want, c.err)
		}
	}
}

func port(t *testing.T, endpoint string) int {
	t.Helper()
	var p int
	i := strings.LastIndexByte(endpoint, ':')
	if _, err := fmt.Sscanf(endpoint[i+1:], "%d", &p); err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}

// TestSubscriberRefusesHugeFrames: a frame far over MaxPayloadBytes is refused by libzmq
// (ZMQ_MAXMSGSIZE) before it is allocated: it never reaches the payload check (no too_large
// drop is counted), the publisher's connection is dropped and re-established, and the stream
// carries on with the next batches (replaying what the reconnect lost).
func TestSubscriberRefusesHugeFrames(t *testing.T) {
	h := newHarness(t, Config{MaxPayloadBytes: 4096})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	s := h.add("w", p)
	p.WaitSubscribed(t)
	c := newChain(3, testBlockSize, 1000, 1<<40)
	p.Publish(c.batch(0))
	h.waitFor(s, "seq 0", settled(0))
	p.Raw([][]byte{{}, be8(1), make([]byte, 8<<20)})
	// The subscriber reconnects on its own; keep publishing until the rest is applied.
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; h.blocks("w", c) != 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("stream did not recover after the huge frame: %+v", h.g.Status())
		}
		if i <= 2 {
			p.Publish(c.batch(i))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := h.counter(h.m.DroppedFrames, "w", string(kvevents.DropTooLarge)); n != 0 {
		t.Fatalf("the huge frame reached the payload check (too_large = %v): libzmq did not refuse it", n)
	}
}

// TestSubscriberStartsWarm: a subscriber that starts (or restarts) after its engine has
// published asks for the batches the publisher still retains, so the index holds the engine's
// cache without waiting for the engine to publish again.
func TestSubscriberStartsWarm(t *testing.T) {
	h := newHarness(t, Config{})
	p := startPublisher(t, pubOptions{bufferSteps: 100})
	c := newChain(6, testBlockSize, 1000, 1<<40)
	publishRange(p, c, 0, 6) // nobody listens: only the replay buffer keeps them
	start := time.Now()
	s := h.add("w", p)
	h.waitFor(s, "warm", settled(5))
	if got := h.blocks("w", c); got != 6 {
		t.Fatalf("warm index holds %d blocks, want 6", got)
	}
	t.Logf("index warm %v after the subscriber started", time.Since(start).Round(time.Millisecond))
	if st := s.Status(); st.HistoryLost != 0 || st.Clears != 0 {
		t.Fatalf("warm-up counted lost history: %+v", st.StreamState)
	}
}
