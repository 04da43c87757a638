package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/internal/testport"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
	"github.com/condisagg/condisagg/tokenizer"
)

// startDPSim runs an in-process vllm-sim with --data-parallel-size 2, its publishers bound on
// pub..pub+1 and replay..replay+1, and returns its HTTP address.
func startDPSim(t *testing.T, model string, pub, replay int) string {
	t.Helper()
	return startSim(t, model, 2, pub, replay)
}

// startSim runs an in-process vllm-sim with ranks data-parallel engines, their publishers bound
// on pub.. and replay.., and returns its HTTP address.
func startSim(t *testing.T, model string, ranks, pub, replay int) string {
	t.Helper()
	return startSimScaled(t, model, ranks, pub, replay, 100)
}

// startSimScaled is startSim with the simulator's time scale (1: real time).
func startSimScaled(t *testing.T, model string, ranks, pub, replay int, timeScale float64) string {
	t.Helper()
	c := simConfig(t, model, fmt.Sprintf("tcp://*:%d", pub), "kv")
	rep := fmt.Sprintf("tcp://*:%d", replay)
	c.TimeScale, c.DataParallelSize, c.KVEvents.ReplayEndpoint = timeScale, ranks, &rep
	addr, _ := runSim(t, c, "127.0.0.1:0")
	return addr
}

// simConfig is the in-process vllm-sim of these tests: the test model's tokenizer, 1,000 KV
// blocks, time scale 100, KV events published (bound or dialed, as vLLM reads endpoint) under
// topic, a replay buffer of 1,000 batches and no replay endpoint.
func simConfig(t *testing.T, model, endpoint, topic string) vllmsim.InstanceConfig {
	t.Helper()
	tok, err := tokenizer.Load(model, tokenizer.Options{CacheSegments: 1024})
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := vllmsim.NewVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	return vllmsim.InstanceConfig{
		Engine: sim.Config{NumGPUBlocks: 1000, Seed: 7}, TimeScale: 100,
		KVEvents: vllmsim.KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: endpoint,
			Topic: topic, BufferSteps: 1000, HWM: 100000, MaxQueueSize: 1000},
		Server: vllmsim.ServerConfig{ModelNames: []string{"qwen3"}, Tokenizer: tok, Vocab: vocab, MaxModelLen: 40960},
	}
}

// runSim runs a vllm-sim of config c on listen and returns its HTTP address and its stop
// (also run at cleanup; safe to call twice).
func runSim(t *testing.T, c vllmsim.InstanceConfig, listen string) (string, func()) {
	t.Helper()
	in, err := vllmsim.NewInstance(c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	run := in.Start(ln)
	stop := func() {
		if err := run(); err != nil {
			t.Errorf("vllm-sim: %v", err)
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestServeDataParallelRanks runs serve against a vllm-sim with two data-parallel ranks: each
// rank is its own worker with its own event stream (ports + rank), the ext_proc answer pins
// the request to a rank with x-data-parallel-rank, the engine that the header selects indexes
// the prompt under that rank only, and Explain then credits and names that rank.
func TestServeDataParallelRanks(t *testing.T) {
	model := requireModel(t)
	pub, rep := testport.Block(t, 2), testport.Block(t, 2)
	simAddr := startDPSim(t, model, pub, rep)
	a := startServe(t, dpServeConfig(model, simAddr, pub, rep))
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	workers := func() map[string]*condisaggv1.Worker {
		return workersByID(t, ctx, admin)
	}
	// Polling the Admin state with a deadline: the streams connect on their own goroutines.
	waitFor := func(what string, cond func(map[string]*condisaggv1.Worker) bool) map[string]*condisaggv1.Worker {
		t.Helper()
		for {
			ws := workers()
			if cond(ws) {
				return ws
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not reached; workers %v", what, ws)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitFor("both rank streams connected", func(ws map[string]*condisaggv1.Worker) bool {
		return len(ws) == 2 && ws["decode-0"].GetEvents().GetConnected() && ws["decode-0/dp1"].GetEvents().GetConnected()
	})

	body := `{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"` +
		strings.Repeat("Data parallel ranks each keep their own prefix cache. ", 12) + `"}]}`
	h := decideHeaders(t, conn, body)
	rank := h["x-data-parallel-rank"]
	if (rank != "0" && rank != "1") || h["x-condisagg-decode-rank"] != rank || h["x-condisagg-decode-host"] != simAddr {
		t.Fatalf("decision headers %v: want a rank of %s", h, simAddr)
	}
	chosen, other := "decode-0", "decode-0/dp1"
	if rank == "1" {
		chosen, other = other, chosen
	}
	// Envoy forwards the request with the router's headers; vLLM (here vllm-sim) reads the rank.
	chatToRank(t, ctx, simAddr, body, rank)
	ws := waitFor("the prompt indexed under the chosen rank", func(ws map[string]*condisaggv1.Worker) bool {
		return ws[chosen].GetIndexedGpuBlocks() > 0
	})
	if n := ws[other].GetIndexedGpuBlocks(); n != 0 {
		t.Fatalf("rank %s holds %d blocks of a request rank %s served", other, n, chosen)
	}
	er, err := admin.Explain(ctx, &condisaggv1.ExplainRequest{Path: "/v1/chat/completions", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if len(er.Overlaps) != 1 || er.Overlaps[0].Worker != chosen || er.Overlaps[0].GpuBlocks == 0 {
		t.Fatalf("explain overlaps %v: want only %s", er.Overlaps, chosen)
	}
	if er.DecodeWorker != chosen {
		t.Fatalf("explain chose %s, want the rank holding the prefix, %s", er.DecodeWorker, chosen)
	}
}
