package pool

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"valid", basic(), nil},
		{"every_worker_problem", Config{Workers: []WorkerConfig{
			{Name: "", Role: "both", Endpoint: "10.0.0.1", KVEvents: "http://x:1", NumGPUBlocks: -1, MaxNumBatchedTokens: -2},
			{Name: "a@b", Role: RoleDecode, Endpoint: "h:0"},
			{Name: "x", Role: RoleDecode, Endpoint: "h:1"},
			{Name: "x", Role: RolePrefill, Endpoint: ":1", KVReplay: "tcp://"},
		}}, []string{
			`pool config: workers[0].name: "" must not be empty`,
			`pool config: workers[0].role: "both" must be one of prefill, decode`,
			`pool config: workers[0].endpoint: "10.0.0.1" must be host:port`,
			`pool config: workers[0].kv_events: "http://x:1" must be tcp://host:port`,
			`pool config: workers[0].num_gpu_blocks: -1 must be >= 0`,
			`pool config: workers[0].max_num_batched_tokens: -2 must be >= 0`,
			`pool config: workers[1].name: "a@b" must not contain '@', '/' or spaces ('/dp<rank>' names data-parallel ranks)`,
			`pool config: workers[1].endpoint: "h:0" must be host:port`,
			`pool config: workers[3].name: "x" is a duplicate`,
			`pool config: workers[3].endpoint: ":1" must be host:port`,
			`pool config: workers[3].kv_replay: "tcp://" must be tcp://host:port`,
		}},
		{"data_parallel", Config{Workers: []WorkerConfig{
			{Name: "d0", Role: RoleDecode, Endpoint: "10.0.0.1:8000", DataParallelSize: -1},
			{Name: "d1", Role: RoleDecode, Endpoint: "10.0.0.1:8001", DataParallelSize: 1025},
			{Name: "d2", Role: RoleDecode, Endpoint: "10.0.0.1:8002", DataParallelSize: 4,
				KVEvents: "tcp://10.0.0.1:5557", KVReplay: "tcp://10.0.0.1:5558"},
			{Name: "d3", Role: RoleDecode, Endpoint: "10.0.0.1:8003", DataParallelSize: 2,
				KVEvents: "tcp://10.0.0.1:65535", KVReplay: "tcp://10.0.0.1:0"},
			{Name: "d4/dp1", Role: RoleDecode, Endpoint: "10.0.0.1:8004"},
			// Fine: replay ports 5567-5570 clear events 5557-5560; other hosts never collide.
			{Name: "d5", Role: RoleDecode, Endpoint: "10.0.0.1:8005", DataParallelSize: 4,
				KVEvents: "tcp://10.0.0.1:5557", KVReplay: "tcp://10.0.0.1:5567"},
			{Name: "d6", Role: RoleDecode, Endpoint: "10.0.0.1:8006", DataParallelSize: 4,
				KVEvents: "tcp://10.0.0.1:5557", KVReplay: "tcp://10.0.0.2:5558"},
			{Name: "d7", Role: RoleDecode, Endpoint: "10.0.0.1:8007", KVEvents: "tcp://h:5557", KVReplay: "tcp://H:5557"},
		}}, []string{
			"pool config: workers[0].data_parallel_size: -1 must be in [1, 1024] (vLLM --data-parallel-size; 0 means 1)",
			"pool config: workers[1].data_parallel_size: 1025 must be in [1, 1024] (vLLM --data-parallel-size; 0 means 1)",
			`pool config: workers[2].kv_replay: "tcp://10.0.0.1:5558" ports 5558-5561 overlap kv_events ports 5557-5560: vLLM offsets both by the data-parallel rank, so use a replay port >= 5561 (or <= 5553)`,
			`pool config: workers[3].kv_events: "tcp://10.0.0.1:65535" port + data_parallel_size-1 = 65536 exceeds 65535 (rank r uses port + r)`,
			`pool config: workers[3].kv_replay: "tcp://10.0.0.1:0" must be tcp://host:port with a port in [1, 65535]`,
			`pool config: workers[4].name: "d4/dp1" must not contain '@', '/' or spaces ('/dp<rank>' names data-parallel ranks)`,
			`pool config: workers[7].kv_replay: "tcp://H:5557" uses the kv_events port: the PUB and the replay ROUTER cannot share a port`,
		}},
		{"engines", Config{Workers: []WorkerConfig{
			{Name: "d0", Role: RoleDecode, Endpoint: "10.0.0.1:8000", Engine: "tgi"},
			{Name: "p0", Role: RolePrefill, Endpoint: "10.0.0.2:8000", Engine: EngineSGLang},
			{Name: "d1", Role: RoleDecode, Endpoint: "10.0.0.3:8000", Engine: EngineTRTLLMDynamo, DataParallelSize: 2},
			// Fine: SGLang and TRT-LLM decode workers, vLLM named or by default in either role.
			{Name: "d2", Role: RoleDecode, Endpoint: "10.0.0.4:8000", Engine: EngineSGLang},
			{Name: "d3", Role: RoleDecode, Endpoint: "10.0.0.5:8000", Engine: EngineTRTLLMDynamo},
			{Name: "p1", Role: RolePrefill, Endpoint: "10.0.0.6:8000", Engine: EngineVLLM, DataParallelSize: 2},
			// SGLang's OpenAI routes read X-Data-Parallel-Rank (serving_base.py
			// extract_routed_dp_rank_from_header) and its publishers offset the ports by the rank.
			{Name: "d4", Role: RoleDecode, Endpoint: "10.0.0.7:8000", Engine: EngineSGLang, DataParallelSize: 2,
				KVEvents: "tcp://10.0.0.7:5557", KVReplay: "tcp://10.0.0.7:5567"},
		}}, []string{
			`pool config: workers[0].engine: "tgi" must be one of vllm, sglang, trtllm-dynamo`,
			"pool config: workers[1].engine: sglang cannot serve role prefill yet: remote prefill speaks vLLM's NixlConnector only; " +
				"run this engine as a decode worker (it then prefills locally) or use vLLM for the prefill pool",
			"pool config: workers[2].engine: trtllm-dynamo does not take data_parallel_size yet: X-Data-Parallel-Rank is read by vLLM and SGLang only; list each rank as its own worker",
		}},
		{"pool_knobs", Config{BlockSize: -1, BookingTTL: -1, ScrapeInterval: -1, MetricsPath: "metrics"}, []string{
			"pool config: block_size: -1 must be >= 1",
			"pool config: booking_ttl: -1ns must be > 0",
			"pool config: scrape_interval: -1ns must be >= 0",
			`pool config: metrics_path: "metrics" must start with /`,
		}},
		{"health_knobs", Config{HealthTimeout: -1, HealthPath: "health", HealthFailures: -1, HealthSuccesses: 17,
			HealthBackoffMax: -1, UpstreamFailures: -2}, []string{
			"pool config: health_timeout: -1ns must be > 0",
			`pool config: health_path: "health" must start with /`,
			"pool config: health_failures: -1 must be >= 1",
			"pool config: health_successes: 17 must be in [1, 16]",
			"pool config: health_backoff_max: -1ns must be > 0",
			"pool config: upstream_failures: -2 must be >= 1",
		}},
		{"health_backoff_below_interval", Config{HealthInterval: 2 * time.Second, HealthBackoffMax: time.Second}, []string{
			"pool config: health_backoff_max: 1s must be >= health_interval 2s",
		}},
		{"probing_off_ignores_the_backoff_cap", Config{HealthInterval: -1, HealthBackoffMax: time.Millisecond}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != strings.Join(tc.want, "\n") {
				t.Fatalf("Validate:\n got  %v\n want %s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
	if _, err := New(Config{Workers: []WorkerConfig{{Name: "x"}}}, Options{Metrics: NewMetrics(prometheus.NewRegistry())}); err == nil {
		t.Fatal("New accepted an invalid config")
	}
	if _, err := New(basic(), Options{}); err == nil {
		t.Fatal("New accepted nil metrics")
	}
}

func ids(ws []WorkerInfo) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func TestResolve(t *testing.T) {
	cfg := Config{Workers: []WorkerConfig{
		{Name: "decode", Role: RoleDecode, Endpoint: "decode.svc:8000", KVEvents: "tcp://decode.svc:5557", KVReplay: "tcp://10.9.9.9:5567", NumGPUBlocks: 100},
		{Name: "p0", Role: RolePrefill, Endpoint: "10.0.0.11:8000"},
	}}
	var mu sync.Mutex
	var changes []string
	f := &fixture{reg: prometheus.NewRegistry(), clock: &fakeClock{now: t0}, res: &fakeResolver{}}
	f.m = NewMetrics(f.reg)
	p, err := New(cfg, Options{Metrics: f.m, Clock: f.clock, OnChange: func(added, removed []WorkerInfo) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, "+"+strings.Join(ids(added), ",")+" -"+strings.Join(ids(removed), ","))
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	if got := ids(p.Workers()); !slices.Equal(got, []string{"p0"}) {
		t.Fatalf("before Resolve: %v, want only the literal-IP worker", got)
	}
	ctx := context.Background()
	f.res.set("decode.svc", "10.0.0.22", "10.0.0.21", "10.0.0.21", "not-an-ip")
	if err := resolve(ctx, p, f.res); err != nil {
		t.Fatal(err)
	}
	if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "decode@10.0.0.22:8000", "p0"}) {
		t.Fatalf("after Resolve: %v", got)
	}
	w := f.info(t, "decode@10.0.0.22:8000")
	if w.Endpoint != "10.0.0.22:8000" || w.KVEvents != "tcp://10.0.0.22:5557" || w.KVReplay != "tcp://10.9.9.9:5567" || w.KVCapacityBlocks != 100 {
		t.Fatalf("resolved worker = %+v", w)
	}
	// A6: a booking on the address that disappears is dropped with it; the rest stays.
	if err := p.Book(Booking{RequestID: "r", Mode: ModeRemote, Decode: "decode@10.0.0.22:8000", Prefill: "p0", ISL: 64, PrefillTokens: 64}); err != nil {
		t.Fatal(err)
	}
	f.res.set("decode.svc", "10.0.0.21")
	if err := resolve(ctx, p, f.res); err != nil {
		t.Fatal(err)
	}
	if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "p0"}) {
		t.Fatalf("after scale-down: %v", got)
	}
	if err := p.Book(Booking{RequestID: "r2", Mode: ModeBypass, Decode: "decode@10.0.0.22:8000", ISL: 16}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("booking a removed worker = %v, want ErrUnknownWorker", err)
	}
	if got := f.load(t, "p0"); got != (load{64, 0, 1}) {
		t.Fatalf("p0 = %+v: its half of the booking must stay", got)
	}
	if !p.Release("r") || f.load(t, "p0") != (load{}) {
		t.Fatalf("release after removal: p0 = %+v", f.load(t, "p0"))
	}
	for name, c := range map[string]prometheus.Collector{"active_decode_blocks": f.m.ActiveDecodeBlocks, "worker_healthy": f.m.Healthy} {
		if n := testutil.CollectAndCount(c); n != 2 {
			t.Fatalf("%s series = %d, want 2 (removed worker's labels deleted)", name, n)
		}
	}
	// A failed lookup keeps the previous addresses.
	f.res.set("decode.svc")
	if err := resolve(ctx, p, f.res); err == nil || !strings.Contains(err.Error(), "worker=decode host=decode.svc") {
		t.Fatalf("Resolve with no addresses = %v", err)
	}
	if got := ids(p.Workers()); !slices.Equal(got, []string{"decode@10.0.0.21:8000", "p0"}) {
		t.Fatalf("after failed lookup: %v", got)
	}
	if got := testutil.ToFloat64(f.m.ResolveErrors.WithLabelValues("decode")); got != 1 {
		t.Fatalf("resolve errors = %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"+decode@10.0.0.21:8000,decode@10.0.0.22:8000 -", "+ -decode@10.0.0.22:8000"}
	if !slices.Equal(changes[1:], want) || changes[0] != "+p0 -" {
		t.Fatalf("OnChange calls = %q", changes)
	}
}
