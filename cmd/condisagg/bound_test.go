package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/goczmq/v4"

	"github.com/condisagg/condisagg/internal/testport"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// startDialingSim runs an in-process vllm-sim on listen whose publisher dials endpoint (vLLM
// connects a PUB whose endpoint has no '*') with the given topic and no replay endpoint. It
// returns the HTTP address and a stop function (also run at cleanup; safe to call twice).
func startDialingSim(t *testing.T, model, listen, endpoint, topic string) (string, func()) {
	t.Helper()
	return runSim(t, simConfig(t, model, endpoint, topic), listen)
}

// chat posts a chat body straight to the vllm-sim at addr (as Envoy would after routing) and
// fails unless it answers 200.
func chat(t *testing.T, ctx context.Context, addr, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("vllm-sim %s answered %d", addr, resp.StatusCode)
	}
}

// TestServeBoundKVEvents runs serve with router.kv_events_bind: two vllm-sim engines whose
// publishers dial the router's bound socket, told apart by topic. Each prompt is credited to
// the worker whose engine served it; a message of an unmapped topic is counted and dropped; an
// engine restarted on the same topic (its seq back at 0) clears only its own worker.
func TestServeBoundKVEvents(t *testing.T) {
	model := requireModel(t)
	bind := fmt.Sprintf("tcp://127.0.0.1:%d", testport.Block(t, 1))
	addr0, _ := startDialingSim(t, model, "127.0.0.1:0", bind, "kv@decode-0")
	addr1, stop1 := startDialingSim(t, model, "127.0.0.1:0", bind, "kv@decode-1")
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "  kv_events: false\n", fmt.Sprintf(`  kv_events: true
  kv_events_bind: %s
  kv_events_topics:
    - {topic: kv@decode-0, worker: decode-0}
    - {topic: kv@decode-1, worker: decode-1}
`, bind), 1) + fmt.Sprintf(`workers:
  - {name: decode-0, role: decode, endpoint: %s, num_gpu_blocks: 1000}
  - {name: decode-1, role: decode, endpoint: %s, num_gpu_blocks: 1000}
`, addr0, addr1)
	a := startServe(t, cfg)
	admin := adminClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workers := func() map[string]*condisaggv1.Worker {
		// Its own deadline: the failure messages call it after ctx has ended.
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		return workersByID(t, wctx, admin)
	}
	// Polling the Admin state with a deadline: the engines' PUBs dial on their own schedule.
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not reached; workers %v", what, workers())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	overlaps := func(body string) map[string]int64 {
		er, err := admin.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, o := range er.Overlaps {
			m[o.Worker] = o.GpuBlocks
		}
		return m
	}
	prompt := func(text string) string {
		return `{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat(text, 12) + `"}]}`
	}
	// served sends new prompts to the engine at addr until one is credited to worker, and
	// returns it. vLLM's PUB drops what it publishes before the subscriber's session is up (the
	// slow joiner), and a prompt the engine already caches publishes nothing: each attempt is
	// a new prompt.
	served := func(addr, worker, text string) string {
		t.Helper()
		for i := 0; ; i++ {
			body := prompt(fmt.Sprintf("%d. %s", i, text))
			chat(t, ctx, addr, body)
			for range 25 {
				if overlaps(body)[worker] > 0 {
					return body
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s never credited for a prompt its engine served; workers %v", worker, workers())
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	bodyA := served(addr0, "decode-0", "Engines that dial out reach the router's bound socket. ")
	bodyB := served(addr1, "decode-1", "Topics tell the dialing publishers apart. ")
	if o := overlaps(bodyA); o["decode-0"] == 0 || o["decode-1"] != 0 {
		t.Fatalf("prompt A overlaps %v: want decode-0 only", o)
	}
	if o := overlaps(bodyB); o["decode-1"] == 0 || o["decode-0"] != 0 {
		t.Fatalf("prompt B overlaps %v: want decode-1 only", o)
	}
	ws := workers()
	for _, id := range []string{"decode-0", "decode-1"} {
		if ev := ws[id].GetEvents(); !ev.GetConnected() || ev.GetGaps() > 1 {
			t.Fatalf("%s's bound stream: %v", id, ev)
		}
	}

	// A publisher of an unmapped topic: counted under worker="central", never applied.
	stray := goczmq.NewSock(goczmq.Pub, goczmq.SockSetLinger(0))
	defer stray.Destroy()
	if err := stray.Connect(bind); err != nil {
		t.Fatal(err)
	}
	poll("the unknown topic counted", func() bool {
		// A send can fail with EINTR (the Go runtime's preemption signal); the next round retries.
		_ = stray.SendMessage([][]byte{[]byte("kv@nobody"), make([]byte, 8), {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0}})
		return strings.Contains(metrics(t, a.http), `condisagg_kv_messages_dropped_total{reason="unknown_topic",worker="central"}`)
	})

	// decode-1's engine restarts on the same topic: its seq goes back to 0, so its old blocks
	// are cleared (vLLM announces no clear on restart) and its new ones credited; decode-0 keeps its.
	// More batches first, so the restarted engine's first batch that arrives (some may be lost
	// to the slow joiner) has a seq below the stream's next one: without a replay endpoint the
	// sequence is all that tells a restart.
	for i := range 20 {
		chat(t, ctx, addr1, prompt(fmt.Sprintf("%d. Warm-up prompts move the sequence on. ", i)))
	}
	stop1()
	_, _ = startDialingSim(t, model, addr1, bind, "kv@decode-1")
	served(addr1, "decode-1", "A restarted engine numbers its batches again. ")
	if o := overlaps(bodyB); o["decode-1"] != 0 {
		t.Fatalf("prompt B overlaps %v after decode-1 restarted: its old blocks must be cleared", o)
	}
	if o := overlaps(bodyA); o["decode-0"] == 0 {
		t.Fatalf("prompt A overlaps %v: decode-0 lost its blocks when decode-1 restarted", o)
	}
}

// metrics is the admin HTTP /metrics text of the serve at httpAddr.
func metrics(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeBoundKVEventsBindInUse: a bind endpoint another process holds is a startup error
// naming the setting.
func TestServeBoundKVEventsBindInUse(t *testing.T) {
	model := requireModel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "  kv_events: false\n", fmt.Sprintf(`  kv_events: true
  kv_events_bind: tcp://%s
  kv_events_topics: [{topic: kv@decode-0, worker: decode-0}]
`, ln.Addr()), 1) + "workers:\n  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200}\n"
	path := writeFile(t, t.TempDir(), "c.yaml", cfg)
	logs := &syncBuffer{}
	code := runServe(context.Background(), []string{"--config", path}, logs, serveHooks{})
	if code != 1 || !strings.Contains(logs.String(), "router.kv_events_bind: tcp://"+ln.Addr().String()+" cannot be bound") {
		t.Fatalf("exit %d:\n%s", code, logs.String())
	}
}
