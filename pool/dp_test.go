package pool

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/policy"
)

// dpConfig is one decode server with two data-parallel ranks and one plain prefill worker.
func dpConfig() Config {
	return Config{Workers: []WorkerConfig{
		{Name: "d0", Role: RoleDecode, Endpoint: "10.0.0.21:8000", NumGPUBlocks: 1000, DataParallelSize: 2,
			KVEvents: "tcp://10.0.0.21:5557", KVReplay: "tcp://10.0.0.21:5567"},
		{Name: "p0", Role: RolePrefill, Endpoint: "10.0.0.11:8000", MaxNumBatchedTokens: 8192,
			KVEvents: "tcp://10.0.0.11:5557"},
	}}
}

// TestDataParallelRanksAreWorkers checks README "Data-parallel ranks": each rank of a
// data_parallel_size server is its own worker, with vLLM's port offset on both event endpoints.
func TestDataParallelRanksAreWorkers(t *testing.T) {
	f := newFixture(t, dpConfig())
	got := f.p.Workers()
	type row struct {
		ID, Engine         string
		Rank, Size         int
		Endpoint           string
		KVEvents, KVReplay string
	}
	want := []row{
		{"d0", "d0", 0, 2, "10.0.0.21:8000", "tcp://10.0.0.21:5557", "tcp://10.0.0.21:5567"},
		{"d0/dp1", "d0", 1, 2, "10.0.0.21:8000", "tcp://10.0.0.21:5558", "tcp://10.0.0.21:5568"},
		{"p0", "p0", 0, 1, "10.0.0.11:8000", "tcp://10.0.0.11:5557", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("workers = %+v, want %d", got, len(want))
	}
	for i, w := range got {
		r := row{w.ID, w.Engine, w.Rank, w.DataParallelSize, w.Endpoint, w.KVEvents, w.KVReplay}
		if r != want[i] {
			t.Errorf("worker %d = %+v, want %+v", i, r, want[i])
		}
	}
	var snap policy.Snapshot
	f.p.Snapshot(&snap, Request{})
	if len(snap.Decode) != 2 || snap.Decode[1].ID != "d0/dp1" || snap.Decode[1].DPRank != 1 || snap.Decode[1].DPSize != 2 ||
		snap.Decode[0].DPRank != 0 || snap.Decode[0].DPSize != 2 || snap.Decode[1].KVCapacityBlocks != 1000 {
		t.Fatalf("snapshot decode = %+v", snap.Decode)
	}
	if snap.Prefill[0].DPSize != 1 {
		t.Fatalf("prefill without data parallelism has DPSize %d, want 1", snap.Prefill[0].DPSize)
	}
}

// TestDataParallelRanksBookApart: a booking on one rank is load of that rank only.
func TestDataParallelRanksBookApart(t *testing.T) {
	f := newFixture(t, dpConfig())
	if err := f.p.Book(Booking{RequestID: "r1", Mode: ModeBypass, Decode: "d0/dp1", Keys: []uint64{1, 2, 3}, ISL: 48, PrefillTokens: 48}); err != nil {
		t.Fatal(err)
	}
	var snap policy.Snapshot
	f.p.Snapshot(&snap, Request{Keys: []uint64{1, 2, 3}, ISL: 48})
	r0, r1 := snap.Decode[0], snap.Decode[1]
	if r0.ActiveRequests != 0 || r0.ActiveDecodeBlocks != 0 || r0.NewBlocks != 3 {
		t.Errorf("rank 0 load = %+v, want none (3 new blocks)", r0)
	}
	if r1.ActiveRequests != 1 || r1.ActiveDecodeBlocks != 3 || r1.ActivePrefillTokens != 48 || r1.NewBlocks != 0 {
		t.Errorf("rank 1 load = %+v, want the booking", r1)
	}
}

// TestDataParallelDNSRanks: a DNS-named server registers every rank of every address.
func TestDataParallelDNSRanks(t *testing.T) {
	cfg := Config{Workers: []WorkerConfig{{Name: "d", Role: RoleDecode, Endpoint: "decode.svc:8000", DataParallelSize: 2,
		KVEvents: "tcp://decode.svc:5557"}}}
	f := newFixture(t, cfg)
	f.res.set("decode.svc", "10.0.0.2", "10.0.0.1")
	if err := resolve(context.Background(), f.p, f.res); err != nil {
		t.Fatal(err)
	}
	var ids, evs []string
	for _, w := range f.p.Workers() {
		ids, evs = append(ids, w.ID), append(evs, w.KVEvents)
	}
	wantIDs := "d@10.0.0.1:8000 d@10.0.0.1:8000/dp1 d@10.0.0.2:8000 d@10.0.0.2:8000/dp1"
	wantEvs := "tcp://10.0.0.1:5557 tcp://10.0.0.1:5558 tcp://10.0.0.2:5557 tcp://10.0.0.2:5558"
	if strings.Join(ids, " ") != wantIDs || strings.Join(evs, " ") != wantEvs {
		t.Fatalf("ids %v events %v, want %s / %s", ids, evs, wantIDs, wantEvs)
	}
}

func TestRankIDRoundTrip(t *testing.T) {
	for _, c := range []struct {
		id     string
		engine string
		rank   int
	}{
		{"d0", "d0", 0}, {"d0/dp1", "d0", 1}, {"d@10.0.0.1:8000/dp12", "d@10.0.0.1:8000", 12},
		{"d0/dp0", "d0/dp0", 0}, {"d0/dp01", "d0/dp01", 0}, {"d0/dpx", "d0/dpx", 0}, {"d0/dp-1", "d0/dp-1", 0},
	} {
		e, r := SplitRankID(c.id)
		if e != c.engine || r != c.rank {
			t.Errorf("SplitRankID(%q) = %q, %d; want %q, %d", c.id, e, r, c.engine, c.rank)
		}
		if c.rank > 0 && RankID(e, r) != c.id {
			t.Errorf("RankID(%q, %d) = %q, want %q", e, r, RankID(e, r), c.id)
		}
	}
}

// TestParseEngineMetrics: a data-parallel rank reads only its engine's samples (vLLM labels
// every engine's series with engine="<rank>"); without a rank every engine is summed.
func TestParseEngineMetrics(t *testing.T) {
	page := `vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 5
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="64"} 1
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="64"} 1
`
	for _, c := range []struct {
		engine                  int
		running, waiting, usage float64
		blocks                  int64
	}{{-1, 8, 1, 0.5, 128}, {0, 3, 1, 0.25, 64}, {1, 5, 0, 0.5, 64}, {2, 0, 0, -1, -1}} {
		s, err := ParseEngineMetrics(strings.NewReader(page), c.engine)
		if err != nil {
			t.Fatal(err)
		}
		if s.Running != c.running || s.Waiting != c.waiting || s.KVUsage != c.usage || s.NumGPUBlocks != c.blocks {
			t.Errorf("engine %d: %+v, want running %v waiting %v usage %v blocks %d", c.engine, s, c.running, c.waiting, c.usage, c.blocks)
		}
	}
}

// FuzzDataParallelConfig: any worker entry that validates expands into one worker per rank
// whose event endpoints are valid tcp URLs on the configured ports + rank, with no port shared
// between two ranks' PUB and ROUTER on one host (vllm-kv-events.md §1.3).
func FuzzDataParallelConfig(f *testing.F) {
	f.Add("tcp://10.0.0.1:5557", "tcp://10.0.0.1:5567", 2)
	f.Add("tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558", 4)
	f.Add("tcp://[::1]:65534", "", 2)
	f.Add("tcp://h:1", "tcp://h:0", 0)
	f.Add("", "tcp://x:7", 1024)
	f.Fuzz(func(t *testing.T, events, replay string, size int) {
		cfg := Config{Workers: []WorkerConfig{{Name: "d", Role: RoleDecode, Endpoint: "10.0.0.1:8000",
			KVEvents: events, KVReplay: replay, DataParallelSize: size}}}
		if cfg.Validate() != nil {
			return
		}
		p, err := New(cfg, Options{Metrics: NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			t.Fatalf("valid config rejected by New: %v", err)
		}
		ws := p.Workers()
		if len(ws) != max(size, 1) {
			t.Fatalf("%d workers for data_parallel_size %d", len(ws), size)
		}
		used := map[string]string{}
		for r, w := range ws {
			if w.Rank != r || w.ID != RankID("d", r) || w.Engine != "d" {
				t.Fatalf("worker %d = %+v", r, w)
			}
			for _, c := range []struct{ base, got string }{{events, w.KVEvents}, {replay, w.KVReplay}} {
				if c.base == "" {
					if c.got != "" {
						t.Fatalf("rank %d endpoint %q from an empty one", r, c.got)
					}
					continue
				}
				bu, _ := url.Parse(c.base)
				gu, err := url.Parse(c.got)
				if err != nil || gu.Scheme != "tcp" || gu.Hostname() != bu.Hostname() {
					t.Fatalf("rank %d endpoint %q from %q", r, c.got, c.base)
				}
				bp, _ := strconv.Atoi(bu.Port())
				if gp, _ := strconv.Atoi(gu.Port()); gp != bp+r {
					t.Fatalf("rank %d endpoint %q from %q: port %d, want %d", r, c.got, c.base, gp, bp+r)
				}
				key := strings.ToLower(gu.Hostname()) + ":" + gu.Port()
				if prev, dup := used[key]; dup {
					t.Fatalf("rank %d endpoint %q reuses the port of %s", r, c.got, prev)
				}
				used[key] = c.got
			}
		}
	})
}
