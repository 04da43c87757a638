package route

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// testRouter is a Router over a real pool (2 prefill, 3 decode workers) and index, deciding on
// token-only requests.
func testRouter(t *testing.T, streams EventStreams) (*Router, *pool.Pool) {
	t.Helper()
	return testRouterWith(t, Options{Streams: streams})
}

// testPoolAndIndex builds a pool of ws and an empty index, both at block size 16.
func testPoolAndIndex(t *testing.T, ws []pool.WorkerConfig) (*pool.Pool, *kvindex.Index) {
	t.Helper()
	p, err := pool.New(pool.Config{Workers: ws, BlockSize: 16}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	return p, ix
}

// testRouterWith is testRouter with more Options (Index, Pool, Policy and Seed are its own).
func testRouterWith(t *testing.T, opts Options) (*Router, *pool.Pool) {
	t.Helper()
	var ws []pool.WorkerConfig
	for i := range 2 {
		ws = append(ws, pool.WorkerConfig{Name: "p" + strconv.Itoa(i), Role: pool.RolePrefill,
			Endpoint: "10.0.1." + strconv.Itoa(i+1) + ":8000", MaxNumBatchedTokens: 8192})
	}
	for i := range 3 {
		ws = append(ws, pool.WorkerConfig{Name: "d" + strconv.Itoa(i), Role: pool.RoleDecode,
			Endpoint: "10.0.2." + strconv.Itoa(i+1) + ":8000", NumGPUBlocks: 10000})
	}
	p, ix := testPoolAndIndex(t, ws)
	cfg := enabledConfig()
	opts.Index, opts.Pool, opts.Policy, opts.Seed = ix, p, &cfg, 7
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, p
}

func prompt(n int) []uint32 {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = uint32(1000 + i)
	}
	return toks
}

// TestFallbackSpreadsAndBooks: requests without a decision (passthrough, fail-open) spread over
// the decode pool by load, are booked (so the next one sees them) and released, and honour the
// subset hint.
func TestFallbackSpreadsAndBooks(t *testing.T) {
	r, p := testRouter(t, nil)
	ctx := context.Background()
	var ids []string
	seen := map[string]int{}
	for range 6 {
		out, err := r.Fallback(ctx, nil, policy.ReasonPassthrough)
		if err != nil {
			t.Fatal(err)
		}
		if out.BookingID == "" || out.Route != policy.RouteDecode || out.Reason != "passthrough" {
			t.Fatalf("fallback outcome %+v", out)
		}
		ids = append(ids, out.BookingID)
		seen[out.Decode.ID]++
	}
	for _, w := range []string{"d0", "d1", "d2"} {
		if seen[w] != 2 {
			t.Fatalf("6 open fallbacks spread as %v, want 2 per decode worker", seen)
		}
	}
	for _, id := range ids {
		if !p.Release(id) {
			t.Fatalf("booking %s not held", id)
		}
	}
	for _, w := range p.Workers() {
		if w.ActiveRequests != 0 {
			t.Fatalf("%s still holds %d requests", w.ID, w.ActiveRequests)
		}
	}
	out, err := r.Fallback(ctx, &Request{Subset: []string{"10.0.2.3:8000"}, HasSubset: true}, policy.ReasonFailureOpen)
	if err != nil || out.Decode.ID != "d2" || out.Reason != "failure_open" {
		t.Fatalf("subset fallback: %+v %v", out, err)
	}
	out.Ticket.Cancel()
	if _, err := r.Fallback(ctx, &Request{Subset: []string{"10.9.9.9"}, HasSubset: true}, policy.ReasonPassthrough); !errors.Is(err, ErrSubsetNoMatch) {
		t.Fatalf("unmatched subset: %v", err)
	}
}

// dropOnce marks a worker unhealthy the first time the router reads stream state, which
// happens after the snapshot and before the booking: the chosen worker vanishes in between.
type dropOnce struct {
	once sync.Once
	pool *pool.Pool
	id   string
}

func (d *dropOnce) Stream(_ string, now time.Time) policy.Stream {
	d.once.Do(func() { _ = d.pool.SetHealth(d.id, false) })
	return policy.Stream{Connected: true, LastStored: now}
}
func (*dropOnce) Routed(string) {}

// TestRemoteBookingFailureReselects: a remote decision whose prefill worker vanished before
// the booking is decided again on a fresh snapshot (another prefill worker), not failed open
// to a local prefill.
func TestRemoteBookingFailureReselects(t *testing.T) {
	for _, gone := range []string{"p0", "p1"} {
		d := &dropOnce{id: gone}
		r, p := testRouter(t, d)
		d.pool = p
		// A cold 4,096-token prompt: remote_ratio_too_high under isl_bounding.
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: prompt(4096)})
		if err != nil {
			t.Fatalf("%s gone: %v", gone, err)
		}
		if out.Route != policy.RoutePrefill || out.Prefill.ID == gone || out.Prefill.ID == "" || out.BookingID == "" {
			t.Fatalf("%s gone: route %v on prefill %q (booking %q), want the other prefill worker", gone, out.Route, out.Prefill.ID, out.BookingID)
		}
	}
}

// TestSaltAndAdapterKeys: a request's cache_salt and LoRA adapter (its model name, when it is a
// configured adapter) select the same blocks vLLM's events announce for them: credit only for
// the same salt and the same adapter (vllm-kv-events.md §4.1; block 0 carries the salt).
func TestSaltAndAdapterKeys(t *testing.T) {
	tok, err := tokenizer.Load(repo.TestModel(t, "qwen3"), tokenizer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := testRouter(t, nil)
	r, err := New(Options{Tokenizer: tok, Index: base.Index(), Pool: base.Pool(), Policy: base.Policy(),
		LoRAAdapters: []string{"sql-lora"}, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	toks := prompt(160) // 10 blocks of 16
	store := func(worker string, lora, salt string) {
		hashes := make([]uint64, 10)
		for i := range hashes {
			hashes[i] = uint64(len(worker)*1000+len(lora)*100+len(salt)*10) + uint64(i) + 1
		}
		s := &kvindex.Store{Medium: kvindex.GPU, Hashes: hashes, Tokens: toks, BlockSize: 16, PlainBlocks: 10}
		if lora != "" {
			s.LoRA = []byte(lora)
		}
		if salt != "" {
			s.Salt = []byte(salt)
		}
		if res := r.Index().Store(kvindex.WorkerID(worker), s); res.Skip != kvindex.SkipNone {
			t.Fatal(res.Skip)
		}
	}
	store("d0", "", "tenant-a")
	store("d1", "sql-lora", "")
	ids := fmt.Sprint(toks)
	ids = strings.ReplaceAll(strings.Trim(ids, "[]"), " ", ",")
	for _, c := range []struct {
		model, salt string
		want        map[string]int
	}{
		{"base", "tenant-a", map[string]int{"d0": 10}},
		{"base", "", map[string]int{}},
		{"base", "tenant-b", map[string]int{}},
		{"sql-lora", "", map[string]int{"d1": 10}},
		{"sql-lora", "tenant-a", map[string]int{}},
	} {
		body := `{"model":"` + c.model + `","prompt":[` + ids + `]`
		if c.salt != "" {
			body += `,"cache_salt":"` + c.salt + `"`
		}
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: []byte(body + "}"), DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, o := range out.Overlaps {
			if o.GPU > 0 {
				got[string(o.Worker)] = o.GPU
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("model %s salt %q: overlaps %v, want %v", c.model, c.salt, got, c.want)
		}
	}
}

// TestOverlapOfFindsEveryWorker: a worker's overlap is found by scanning a short overlap list
// and through the index past linearOverlaps entries, for every worker, and a worker without an
// entry has none; the index is rebuilt (not appended to) for the next decision.
func TestOverlapOfFindsEveryWorker(t *testing.T) {
	for _, n := range []int{0, 3, linearOverlaps, linearOverlaps + 1, 40} {
		var sc scratch
		for round := range 2 {
			sc.ov.Workers = sc.ov.Workers[:0]
			for i := range n {
				sc.ov.Workers = append(sc.ov.Workers, kvindex.WorkerOverlap{Worker: kvindex.WorkerID(fmt.Sprintf("w%d-%d", round, i)), GPU: 100*round + i + 1, CPU: i})
			}
			sc.indexOverlaps()
			for i := range n {
				o, ok := sc.overlapOf(fmt.Sprintf("w%d-%d", round, i))
				if !ok || o.GPU != 100*round+i+1 || o.CPU != i {
					t.Fatalf("n=%d round %d: worker %d = %+v, %v", n, round, i, o, ok)
				}
			}
			if _, ok := sc.overlapOf("w9-0"); ok {
				t.Fatalf("n=%d: a worker without an overlap entry was found", n)
			}
			if round == 1 && n > 0 {
				if _, ok := sc.overlapOf("w0-0"); ok {
					t.Fatalf("n=%d: the previous decision's worker is still indexed", n)
				}
			}
		}
	}
}

// TestDecisionSeesOverlapOnLargeFleet: with more overlapping workers than linearOverlaps, the
// decision still credits each decode worker with its own overlap: of 20 decode workers holding
// 1..20 blocks of the prompt's prefix, the one holding the most is previewed with its 20.
func TestDecisionSeesOverlapOnLargeFleet(t *testing.T) {
	var ws []pool.WorkerConfig
	ws = append(ws, pool.WorkerConfig{Name: "p0", Role: pool.RolePrefill, Endpoint: "10.0.1.1:8000", MaxNumBatchedTokens: 8192})
	for i := range 20 {
		ws = append(ws, pool.WorkerConfig{Name: "d" + strconv.Itoa(i), Role: pool.RoleDecode,
			Endpoint: "10.0.2." + strconv.Itoa(i+1) + ":8000", NumGPUBlocks: 10000})
	}
	p, ix := testPoolAndIndex(t, ws)
	toks := prompt(16 * 24)
	for i := range 20 {
		n := i + 1
		hashes := make([]uint64, n)
		for j := range hashes {
			hashes[j] = uint64(i*1000 + j + 1)
		}
		if res := ix.Store(kvindex.WorkerID("d"+strconv.Itoa(i)), &kvindex.Store{Medium: kvindex.GPU, Hashes: hashes,
			Tokens: toks[:16*n], BlockSize: 16, PlainBlocks: n}); res.Stored != n {
			t.Fatalf("store on d%d: %+v", i, res)
		}
	}
	cfg := enabledConfig()
	r, err := New(Options{Index: ix, Pool: p, Policy: &cfg, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: toks, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Overlaps) != 20 {
		t.Fatalf("%d overlapping workers, want 20", len(out.Overlaps))
	}
	// Explain lists them by name whatever order the index found them in.
	if !slices.IsSortedFunc(out.Overlaps, func(a, b kvindex.WorkerOverlap) int { return strings.Compare(string(a.Worker), string(b.Worker)) }) {
		t.Fatalf("overlaps not sorted by worker: %+v", out.Overlaps)
	}
	if rec := out.Record(); rec.Decode != "d19" || rec.Overlap != 20 {
		t.Fatalf("decision previewed %s with overlap %d, want d19 with 20: %+v", rec.Decode, rec.Overlap, rec)
	}
}

// TestPanicAfterBookReleases (issue 12 item 3): a panic after the pool booked the request (here
// in the Observe hook, the last step of Decide and Fallback) is an ErrInternal (Decide) or
// ErrNoEligibleWorker (Fallback) error, and the booking it made is released: no worker keeps a
// request nobody will release.
func TestPanicAfterBookReleases(t *testing.T) {
	observed := 0
	r, p := testRouterWith(t, Options{Observe: func(o *Outcome) {
		observed++
		if o.BookingID == "" {
			t.Errorf("Observe saw an unbooked outcome %+v; the test needs a booking to leak", o)
		}
		panic("observer failed")
	}})
	noBookings := func(what string) {
		t.Helper()
		for _, w := range p.Workers() {
			if w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 {
				t.Fatalf("%s: %s keeps %d requests, %d prefill tokens, %d decode blocks after the panic",
					what, w.ID, w.ActiveRequests, w.ActivePrefillTokens, w.ActiveDecodeBlocks)
			}
		}
	}
	for _, n := range []int{64, 4096} { // a local and a remote prefill
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: prompt(n)})
		if !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "recovered panic: observer failed") || out.BookingID != "" {
			t.Fatalf("Decide %d tokens: %+v, %v; want ErrInternal naming the panic and no booking", n, out, err)
		}
		noBookings(fmt.Sprintf("Decide %d tokens", n))
	}
	out, err := r.Fallback(context.Background(), nil, policy.ReasonPassthrough)
	if !errors.Is(err, ErrNoEligibleWorker) || !strings.Contains(err.Error(), "recovered panic") || out.BookingID != "" {
		t.Fatalf("Fallback: %+v, %v; want ErrNoEligibleWorker naming the panic", out, err)
	}
	noBookings("Fallback")
	if observed != 3 {
		t.Fatalf("Observe ran %d times, want 3", observed)
	}
}
