package vllmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/kvevents"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/sim"
	"github.com/go-zeromq/goczmq/v4"
	"github.com/prometheus/client_golang/prometheus"
)

func TestPubBindsRule(t *testing.T) {
	for ep, want := range map[string]bool{
		"tcp://*:5557": true, "tcp://[::]:5557": true, "ipc:///tmp/x": true, "inproc://x": true,
		"tcp://0.0.0.0:5557": false, "tcp://router:5557": false, "tcp://127.0.0.1:5557": false,
	} {
		if got := pubBinds(ep); got != want {
			t.Errorf("vllm-kv-events.md §1.1: pubBinds(%q) = %v, want %v", ep, got, want)
		}
	}
}

func TestParseKVEventsConfig(t *testing.T) {
	c, err := ParseKVEventsConfig(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5567","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.Publisher != "zmq" || c.BufferSteps != 10000 || c.HWM != 100000 || c.MaxQueueSize != 100000 || *c.ReplayEndpoint != "tcp://*:5567" {
		t.Fatalf("§5 defaults: %+v", c)
	}
	if c, _ := ParseKVEventsConfig(""); c.Enabled() || c.Endpoint != "tcp://*:5557" {
		t.Fatalf("empty config: %+v", c)
	}
	for _, bad := range []string{`{"publisher":"kafka"}`, `{"bogus":1}`, `{"max_queue_size":0}`, `[`} {
		if _, err := ParseKVEventsConfig(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzParseKVEventsConfig(f *testing.F) {
	f.Add(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5567","topic":"kv-events","buffer_steps":10000,"hwm":100000,"max_queue_size":100000}`)
	f.Add(`{"replay_endpoint":null}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseKVEventsConfig(s)
		if err == nil && (c.MaxQueueSize < 1 || c.BufferSteps < 0 || (c.Publisher != "zmq" && c.Publisher != "null")) {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	})
}

// waitIndex waits until cond holds for the index, re-checking after every batch the stream
// applies.
func waitIndex(t *testing.T, g *kvzmq.Group, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.Subscriber("sim-0", 0).Wait(ctx, func(kvzmq.StreamStatus) bool { return cond() }); err != nil {
		t.Fatalf("index condition not reached: %v (status %+v)", err, g.Status())
	}
}

// routerIndex is the router's side of an event test: a block-size-16 index and a stream group
// feeding it (closed when the test ends).
func routerIndex(t *testing.T) (*kvindex.Index, *kvzmq.Group) {
	t.Helper()
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	g, err := kvzmq.NewGroup(kvzmq.Config{Metrics: kvzmq.NewMetrics(prometheus.NewRegistry()), PollInterval: 10 * time.Millisecond}, ix, kvevents.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return ix, g
}

// addStream subscribes g to one publisher (a vllm-sim rank).
func addStream(t *testing.T, g *kvzmq.Group, sc kvzmq.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Add(ctx, sc); err != nil {
		t.Fatal(err)
	}
}

// waitLive returns once the router's subscription to ti's publisher of rank provably receives
// live batches. A SUB socket's subscription reaches the PUB some time after it connects
// (ZeroMQ's slow joiner), and the subscriber's warm-start replay runs once, at connect: a batch
// published between the two arrives neither way, and if no later batch follows (a test's last
// request), nothing reveals the gap. So after the warm replay, waitLive sends probe requests
// (pinned to rank with the data-parallel header) until one's blocks are indexed: a batch
// applied after the warm replay came live, or by a gap replay that a live batch started. Probe
// prompts share no block with any test prompt (tokens from 900000).
func waitLive(t *testing.T, ti *testInstance, g *kvzmq.Group, ix *kvindex.Index, model string, rank int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := g.Subscriber("sim-0", rank)
	if _, err := sub.Wait(ctx, func(s kvzmq.StreamStatus) bool { return s.Connected && s.Replays >= 1 && !s.Replaying }); err != nil {
		t.Fatalf("rank %d warm-start replay: %v (status %+v)", rank, err, g.Status())
	}
	worker := kvevents.IndexWorkerID("sim-0", rank)
	for i := 0; ctx.Err() == nil; i++ {
		probe, pj := tokenPrompt(32, 900000+uint32(rank)*10000+uint32(i)*100)
		body := `{"model":"` + model + `","prompt":` + pj + `,"max_tokens":1}`
		if code, b := ti.post(t, "/v1/completions", body, HeaderDPRank, strconv.FormatInt(rank, 10)); code != 200 {
			t.Fatalf("probe request: %d %s", code, b)
		}
		wait, stop := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := sub.Wait(wait, func(kvzmq.StreamStatus) bool { return workerOverlap(ix, probe, worker) == 2 })
		stop()
		if err == nil {
			return
		}
	}
	t.Fatalf("rank %d: no probe batch reached the index: %v (status %+v)", rank, ctx.Err(), g.Status())
}

func workerOverlap(ix *kvindex.Index, tokens []uint32, worker kvindex.WorkerID) int {
	var o kvindex.Overlaps
	ix.Overlap(kvindex.Keys(tokens, 16, nil), &o)
	for _, w := range o.Workers {
		if w.Worker == worker {
			return w.GPU
		}
	}
	return 0
}

func gpuOverlap(ix *kvindex.Index, tokens []uint32) int {
	var o kvindex.Overlaps
	ix.Overlap(kvindex.Keys(tokens, 16, nil), &o)
	for _, w := range o.Workers {
		if w.Worker == "sim-0" {
			return w.GPU
		}
	}
	return 0
}

func tokenPrompt(n int, base uint32) ([]uint32, string) {
	toks := seqTokens(n, base)
	parts := make([]string, n)
	for i, tk := range toks {
		parts[i] = fmt.Sprint(tk)
	}
	return toks, "[" + strings.Join(parts, ",") + "]"
}

// TestKVEventsLoopback reads vllm-sim's events with the project's real subscriber and index:
// after a request, the router credits the worker with the prompt's blocks; after
// /reset_prefix_cache, with none.
func TestKVEventsLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    instOpts
	}{
		{"map_int_new_replay", instOpts{events: true, format: FormatMap, hashes: HashInt}},
		{"array_bytes_old_replay", instOpts{events: true, format: FormatArray, hashes: HashBytes, oldReplay: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ti := startInstance(t, tc.o)
			ix, g := routerIndex(t)
			addStream(t, g, kvzmq.StreamConfig{Worker: "sim-0", Endpoint: ti.pub, ReplayEndpoint: ti.replay, Topic: "kv"})
			waitLive(t, ti, g, ix, "qwen3", 0)
			a, aj := tokenPrompt(100, 1000)
			b, bj := tokenPrompt(40, 5000)
			ti.post(t, "/v1/completions", `{"prompt":`+aj+`,"max_tokens":1}`)
			ti.post(t, "/v1/completions", `{"prompt":`+bj+`,"max_tokens":1}`)
			waitIndex(t, g, func() bool { return gpuOverlap(ix, a) == 6 && gpuOverlap(ix, b) == 2 })

			if code, body := ti.post(t, "/reset_prefix_cache", ""); code != 200 {
				t.Fatalf("reset: %d %s", code, body)
			}
			waitIndex(t, g, func() bool { return gpuOverlap(ix, a) == 0 && gpuOverlap(ix, b) == 0 })
			if st := g.Status()[0]; st.Dropped != 0 || st.MalformedClear != 0 {
				t.Fatalf("stream status %+v", st)
			}
		})
	}
}

func TestResetPrefixCacheFailsWhileInUse(t *testing.T) {
	ti := startInstance(t, instOpts{timeScale: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ti.url+"/v1/completions", strings.NewReader(`{"prompt":"Hello world","max_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the first token: running
		t.Fatal(err)
	}
	if code, b := ti.post(t, "/reset_prefix_cache", ""); code != 400 {
		t.Fatalf("vllm-kv-events.md §3.3: reset with a running request = %d %s, want 400", code, b)
	}
	cancel() // the client goes away: the request is aborted and its blocks freed
	resp.Body.Close()
	// The handler aborts the request when it sees the disconnect; each probe is a round trip
	// through the worker goroutine.
	dl := time.Now().Add(5 * time.Second)
	for idle := false; !idle; {
		if time.Now().After(dl) {
			t.Fatal("aborted request still in the engine")
		}
		if err := ti.Worker.do(context.Background(), func(e *sim.Engine) { idle = e.Idle() }); err != nil {
			t.Fatal(err)
		}
	}
	if code, b := ti.post(t, "/reset_prefix_cache", ""); code != 200 {
		t.Fatalf("reset after abort = %d %s", code, b)
	}
}

func be8(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// recvReply reads the DEALER messages of one replay reply, up to and including the END marker
// (the frame before the last one is the 8-byte END seq in both layouts), and fails the test if
// the marker has not arrived within 10 s.
func recvReply(t *testing.T, d *goczmq.Sock) [][][]byte {
	t.Helper()
	p, err := goczmq.NewPoller(d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy()
	end := be8(replayEnd)
	deadline := time.Now().Add(10 * time.Second)
	var out [][][]byte
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no END marker within 10 s; got %v", out)
		}
		s, err := p.Wait(int(left.Milliseconds()) + 1)
		if err != nil || s == nil {
			continue
		}
		m, err := d.RecvMessage()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		if len(m) >= 2 && bytes.Equal(m[len(m)-2], end) {
			return out
		}
	}
}

// TestReplayLayouts checks the ROUTER's reply in both layouts: the retained batches from the
// requested seq on, then END (vllm-kv-events.md §1.5). Publish only queues a payload for the
// Run goroutine, so the test waits for Flush before it asks: without that, a replay can see
// none, some or all of the three batches depending on how the goroutines were scheduled.
func TestReplayLayouts(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old_layout=%v", old), func(t *testing.T) {
			replay := "tcp://127.0.0.1:*"
			p := NewPublisher(PublisherConfig{KVEventsConfig: KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq",
				Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: &replay, Topic: "t", BufferSteps: 2, HWM: 1000, MaxQueueSize: 10}, OldReplayLayout: old})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			defer func() { cancel(); <-done }()
			_, rep, err := p.Ready(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := p.Publish(ctx, []byte{byte('a' + i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			d := goczmq.NewSock(goczmq.Dealer, goczmq.SockSetLinger(0))
			defer d.Destroy()
			if err := d.Connect(rep); err != nil {
				t.Fatal(err)
			}
			// buffer_steps 2 keeps seqs 1 and 2 of 0..2.
			if err := d.SendMessage([][]byte{{}, be8(0)}); err != nil {
				t.Fatal(err)
			}
			msgs := recvReply(t, d)
			want := [][][]byte{{{}, []byte("t"), be8(1), []byte("b")}, {{}, []byte("t"), be8(2), []byte("c")}, {{}, {}, be8(replayEnd), {}}}
			if old {
				want = [][][]byte{{{}, be8(1), []byte("b")}, {{}, be8(2), []byte("c")}, {{}, be8(replayEnd), {}}}
			}
			if fmt.Sprint(msgs) != fmt.Sprint(want) {
				t.Fatalf("vllm-kv-events.md §1.5 replay reply:\n got %v\nwant %v", msgs, want)
			}
			// A malformed request gets no reply: the ROUTER answers one DEALER in order, so the
			// first reply to arrive must be the one to the valid request that follows it.
			if err := d.SendMessage([][]byte{{}, []byte("x")}); err != nil {
				t.Fatal(err)
			}
			if err := d.SendMessage([][]byte{{}, be8(2)}); err != nil {
				t.Fatal(err)
			}
			msgs = recvReply(t, d)
			if want := fmt.Sprint(want[1:]); fmt.Sprint(msgs) != want {
				t.Fatalf("§1.5 reply after an invalid request:\n got %v\nwant %v", msgs, want)
			}
		})
	}
}

// TestFlushAfterStop: once Run has returned, Flush reports it instead of waiting for a loop
// that will never take its marker.
func TestFlushAfterStop(t *testing.T) {
	p := NewPublisher(PublisherConfig{KVEventsConfig: KVEventsConfig{Endpoint: "tcp://127.0.0.1:*", HWM: 10, MaxQueueSize: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if _, _, err := p.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := p.Flush(context.Background()); !errors.Is(err, ErrPublisherStopped) {
		t.Fatalf("Flush after Run returned: %v, want ErrPublisherStopped", err)
	}
}

// TestPubConnects: an endpoint without '*' makes the PUB connect to a binding SUB
// (vllm-kv-events.md §1.1 centralized topology); frames are [topic, seq 8B BE, payload] from 0.
func TestPubConnects(t *testing.T) {
	sub := goczmq.NewSock(goczmq.Sub, goczmq.SockSetLinger(0), goczmq.SockSetSubscribe(""))
	defer sub.Destroy()
	port, err := sub.Bind("tcp://127.0.0.1:*")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(PublisherConfig{KVEventsConfig: KVEventsConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port), HWM: 1000, MaxQueueSize: 10}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, _, err := p.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	poller, err := goczmq.NewPoller(sub)
	if err != nil {
		t.Fatal(err)
	}
	defer poller.Destroy()
	// Messages sent before the subscription reaches the PUB are dropped: publish until one arrives.
	for i := range 200 {
		if err := p.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if s, _ := poller.Wait(20); s != nil {
			m, err := sub.RecvMessage()
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 3 || len(m[0]) != 0 || len(m[1]) != 8 || binary.BigEndian.Uint64(m[1]) > uint64(i) || string(m[2]) != "x" {
				t.Fatalf("§1.2 frames %q", m)
			}
			return
		}
	}
	t.Fatal("no message reached the binding SUB")
}
