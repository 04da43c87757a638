package vllmsim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/testport"
	"github.com/condisagg/condisagg/kvevents"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/kvindex"
)

func TestKVEventsForRank(t *testing.T) {
	replay := "tcp://*:5567"
	for _, c := range []struct {
		spec, pub, replay string
		rank              int
		wantPub, wantRep  string
		err               bool
	}{
		{"rank 0 unchanged", "tcp://*:5557", replay, 0, "tcp://*:5557", "tcp://*:5567", false},
		{"tcp port + rank on both", "tcp://*:5557", replay, 3, "tcp://*:5560", "tcp://*:5570", false},
		{"inproc suffix", "inproc://cache", "inproc://replay", 2, "inproc://cache_dp2", "inproc://replay_dp2", false},
		{"ephemeral port stays 0", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 1, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", false},
		{"czmq range shifted", "tcp://127.0.0.1:*[6000-6000]", "tcp://127.0.0.1:*[7000-7010]", 2, "tcp://127.0.0.1:*[6002-6002]", "tcp://127.0.0.1:*[7002-7012]", false},
		{"ipc rejected", "ipc:///tmp/kv", replay, 1, "", "", true},
		{"no port", "tcp://*:*", replay, 1, "", "", true},
	} {
		rp := c.replay
		got, err := KVEventsConfig{Endpoint: c.pub, ReplayEndpoint: &rp}.ForRank(c.rank)
		if (err != nil) != c.err {
			t.Errorf("%s: err %v", c.spec, err)
			continue
		}
		if err == nil && (got.Endpoint != c.wantPub || *got.ReplayEndpoint != c.wantRep) {
			t.Errorf("%s: %s %s, want %s %s", c.spec, got.Endpoint, *got.ReplayEndpoint, c.wantPub, c.wantRep)
		}
	}
}

// TestDataParallelRanksLoopback: a vllm-sim with --data-parallel-size 2 serves both ranks
// behind one HTTP server; each rank publishes its own stream on the ports + rank with its
// data_parallel_rank in every batch, so the router's real subscriber (one stream per rank, with
// the Applier's rank check) indexes a request only under the rank that served it.
func TestDataParallelRanksLoopback(t *testing.T) {
	pubBase, repBase := testport.Block(t, 2), testport.Block(t, 2)
	ti := startInstance(t, instOpts{events: true, format: FormatMap, hashes: HashInt, dp: 2,
		pub: fmt.Sprintf("tcp://*:%d", pubBase), replay: fmt.Sprintf("tcp://*:%d", repBase)})
	if len(ti.Workers) != 2 || len(ti.Publishers) != 2 {
		t.Fatalf("instance has %d workers, %d publishers; want 2, 2", len(ti.Workers), len(ti.Publishers))
	}
	ix, g := routerIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rank := range int64(2) {
		pub, err := kvzmq.OffsetEndpoint(fmt.Sprintf("tcp://127.0.0.1:%d", pubBase), rank)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := kvzmq.OffsetEndpoint(fmt.Sprintf("tcp://127.0.0.1:%d", repBase), rank)
		if err != nil {
			t.Fatal(err)
		}
		addStream(t, g, kvzmq.StreamConfig{Worker: "sim-0", Rank: rank, Endpoint: pub, ReplayEndpoint: rep, Topic: "kv"})
		waitLive(t, ti, g, ix, "qwen3", rank)
	}
	overlap := func(tokens []uint32) map[kvindex.WorkerID]int {
		var o kvindex.Overlaps
		ix.Overlap(kvindex.Keys(tokens, 16, nil), &o)
		m := map[kvindex.WorkerID]int{}
		for _, w := range o.Workers {
			m[w.Worker] = w.GPU
		}
		return m
	}
	// wait re-checks cond whenever rank's stream changes state (it applied a batch).
	wait := func(rank int64, what string, cond func() bool) {
		t.Helper()
		if _, err := g.Subscriber("sim-0", rank).Wait(ctx, func(kvzmq.StreamStatus) bool { return cond() }); err != nil {
			t.Fatalf("%s: %v (status %+v)", what, err, g.Status())
		}
	}
	a, aj := tokenPrompt(100, 1000)
	b, bj := tokenPrompt(40, 5000)
	if code, body := ti.post(t, "/v1/completions", `{"prompt":`+aj+`,"max_tokens":1}`, HeaderDPRank, "1"); code != 200 {
		t.Fatalf("rank 1 request: %d %s", code, body)
	}
	if code, body := ti.post(t, "/v1/completions", `{"prompt":`+bj+`,"max_tokens":1}`, "x-data-parallel-rank", " 0 "); code != 200 {
		t.Fatalf("rank 0 request: %d %s", code, body)
	}
	a1 := kvevents.IndexWorkerID("sim-0", 1)
	wait(1, "A indexed on rank 1", func() bool { return overlap(a)[a1] == 6 })
	wait(0, "B indexed on rank 0", func() bool { return overlap(b)["sim-0"] == 2 })
	if oa, ob := overlap(a), overlap(b); oa["sim-0"] != 0 || ob[a1] != 0 {
		t.Fatalf("a rank holds the other's prompt: A %v, B %v", oa, ob)
	}
	for rank := range int64(2) {
		if st := g.Subscriber("sim-0", rank).Status(); st.Dropped != 0 || st.MalformedClear != 0 {
			t.Fatalf("rank %d stream dropped batches (a wrong data_parallel_rank is dropped): %+v", rank, st)
		}
	}
	// Each engine has its own cache: A again on rank 0 misses, A again on rank 1 hits.
	for _, rank := range []string{"0", "1"} {
		if code, body := ti.post(t, "/v1/completions", `{"prompt":`+aj+`,"max_tokens":1}`, HeaderDPRank, rank); code != 200 {
			t.Fatalf("repeat of A on rank %s: %d %s", rank, code, body)
		}
	}
	if s0, s1 := ti.Workers[0].Stats(), ti.Workers[1].Stats(); s0.PrefixHits != 0 || s1.PrefixHits == 0 {
		t.Fatalf("prefix hit tokens rank 0 %d, rank 1 %d: want a miss on rank 0 and a hit on rank 1", s0.PrefixHits, s1.PrefixHits)
	}

	code, body := ti.post(t, "/v1/completions", `{"prompt":`+bj+`,"max_tokens":1}`, HeaderDPRank, "2")
	if code != http.StatusBadRequest || !strings.Contains(string(body), "data_parallel_rank 2 is out of range [0, 2).") {
		t.Fatalf("out-of-range rank: %d %s, want 400 as vLLM", code, body)
	}
	_, m := ti.get(t, "/metrics")
	for _, want := range []string{`engine="0"`, `engine="1"`, `num_gpu_blocks=`} {
		if !strings.Contains(string(m), want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, m)
		}
	}
}

// TestRankChoice: the header pins the rank (an unparsable one is ignored, as vLLM's int()
// failure is); without it, back-to-back requests alternate and a busy rank is avoided.
func TestRankChoice(t *testing.T) {
	rk := newRanks(make([]*Worker, 3))
	hdr := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set(HeaderDPRank, v)
		}
		return h
	}
	var got []int
	for _, v := range []string{"", "", "", "", "2", "x", "+1"} {
		r, err := rk.pick(hdr(v))
		if err != nil {
			t.Fatal(err)
		}
		rk.done(r)
		got = append(got, r)
	}
	// round robin 0,1,2,0; pinned 2; "x" balances (next after 0 is 1); "+1" pins 1.
	if fmt.Sprint(got) != "[0 1 2 0 2 1 1]" {
		t.Fatalf("ranks %v", got)
	}
	if _, err := rk.pick(hdr("2")); err != nil { // rank 2 stays busy
		t.Fatal(err)
	}
	var spread []int
	for range 3 {
		r, _ := rk.pick(hdr(""))
		spread = append(spread, r)
	}
	// The idle ranks 0 and 1 fill first; then all three tie and the turn continues.
	if fmt.Sprint(spread[:2]) != "[0 1]" && fmt.Sprint(spread[:2]) != "[1 0]" {
		t.Fatalf("with rank 2 busy, picks %v should take ranks 0 and 1 first", spread)
	}
	for _, v := range []string{"-1", "3"} {
		if _, err := rk.pick(hdr(v)); err == nil {
			t.Fatalf("rank %q accepted", v)
		}
	}
}

func FuzzParseRankHeader(f *testing.F) {
	for _, s := range []string{"0", "1", " 2 ", "+1", "-1", "x", "", "99999999999999999999"} {
		f.Add(s)
	}
	rk := newRanks(make([]*Worker, 2))
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set(HeaderDPRank, v)
		r, err := rk.pick(h)
		if err != nil {
			if _, ok := err.(ErrRankOutOfRange); !ok {
				t.Fatalf("pick(%q): %v", v, err)
			}
			return
		}
		rk.done(r)
		if r < 0 || r > 1 {
			t.Fatalf("pick(%q) = %d outside [0, 2)", v, r)
		}
	})
}
