package pool

import (
	"github.com/condisagg/condisagg/policy"

	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAccounting(t *testing.T) {
	type step struct {
		do   string // book, prefill, release
		b    Booking
		id   string
		want map[string]load
	}
	bypass := func(id string, k []uint64, isl int, eff int64) Booking {
		return Booking{RequestID: id, Mode: ModeBypass, Decode: "d0", Keys: k, ISL: isl, PrefillTokens: eff}
	}
	remote := func(id string, isl int, tokens int64) Booking {
		return Booking{RequestID: id, Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: isl, PrefillTokens: tokens}
	}
	tests := []struct {
		spec, name string
		steps      []step
	}{
		{"A1", "bypass_books_eff_and_blocks_on_d_only", []step{
			{do: "book", b: bypass("r1", keys(1, 10), 170, 90), want: map[string]load{"d0": {90, 11, 1}, "p0": {}}},
		}},
		{"A2", "remote_books_tokens_on_p_and_ceil_unique_blocks_on_d", []step{
			{do: "book", b: remote("r1", 170, 120), want: map[string]load{"d0": {0, 11, 1}, "p0": {120, 0, 1}}},
			{do: "book", b: remote("r2", 160, 160), want: map[string]load{"d0": {0, 21, 2}, "p0": {280, 0, 2}}},
		}},
		{"A3", "first_token_releases_prefill_entry_blocks_stay", []step{
			{do: "book", b: bypass("r1", keys(1, 10), 160, 64)},
			{do: "prefill", id: "r1", want: map[string]load{"d0": {0, 10, 1}}},
			{do: "book", b: remote("r2", 32, 32)},
			{do: "prefill", id: "r2", want: map[string]load{"d0": {0, 12, 2}, "p0": {0, 0, 1}}},
		}},
		{"A4", "release_frees_everything_and_is_idempotent", []step{
			{do: "book", b: bypass("r1", keys(1, 10), 160, 64)},
			{do: "book", b: remote("r2", 32, 32)},
			{do: "release", id: "r1", want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}},
			{do: "release", id: "r1", want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}},
			{do: "prefill", id: "r1", want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}},
			{do: "release", id: "r2", want: map[string]load{"d0": {}, "p0": {}}},
		}},
		{"A7", "eff_zero_creates_no_prefill_entry", []step{
			{do: "book", b: bypass("r1", keys(1, 4), 64, 0), want: map[string]load{"d0": {0, 4, 1}}},
			{do: "prefill", id: "r1", want: map[string]load{"d0": {0, 4, 1}}},
		}},
		{"§5.1", "shared_prefix_blocks_count_once", []step{
			{do: "book", b: bypass("r1", keys(1, 10), 160, 160)},
			{do: "book", b: bypass("r2", keys(1, 12), 200, 40), want: map[string]load{"d0": {200, 13, 2}}},
			{do: "release", id: "r1", want: map[string]load{"d0": {40, 13, 1}}},
			{do: "release", id: "r2", want: map[string]load{"d0": {}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			f := newFixture(t, basic())
			for i, s := range tc.steps {
				switch s.do {
				case "book":
					if err := f.p.Book(s.b); err != nil {
						t.Fatalf("step %d: Book: %v", i, err)
					}
				case "prefill":
					f.p.ReleasePrefill(s.id)
				case "release":
					f.p.Release(s.id)
				}
				for id, want := range s.want {
					if got := f.load(t, id); got != want {
						t.Fatalf("step %d (%s): %s load = %+v, want %+v", i, s.do, id, got, want)
					}
				}
			}
		})
	}
}

func TestAccountingMetrics(t *testing.T) {
	f := newFixture(t, basic())
	if err := f.p.Book(Booking{RequestID: "r", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 100, PrefillTokens: 60}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.m.ActivePrefillTokens.WithLabelValues("p0")); got != 60 {
		t.Fatalf("condisagg_active_prefill_tokens{p0} = %v", got)
	}
	if got := testutil.ToFloat64(f.m.ActiveDecodeBlocks.WithLabelValues("d0")); got != 7 {
		t.Fatalf("condisagg_active_decode_blocks{d0} = %v", got)
	}
	if got := testutil.ToFloat64(f.m.KVCapacityBlocks.WithLabelValues("p0")); got != -1 {
		t.Fatalf("condisagg_kv_capacity_blocks{p0} = %v, want -1 (unknown)", got)
	}
	f.p.Release("r")
	if got := testutil.ToFloat64(f.m.ActivePrefillTokens.WithLabelValues("p0")) + testutil.ToFloat64(f.m.Bookings); got != 0 {
		t.Fatalf("after release gauges sum to %v", got)
	}
}

func TestBookGuard(t *testing.T) {
	g := policy.Guard{Threshold: 0.8, Enabled: true}
	tests := []struct {
		spec, name string
		kvcap      int64
		pre        int // unique blocks already booked on d0
		b          Booking
		wantErr    error
	}{
		{"§5.3", "at_budget_books", 1000, 780, Booking{Keys: keys(1, 20), ISL: 320}, nil},
		{"§5.3", "one_over_budget_denied", 1000, 781, Booking{Keys: keys(1, 20), ISL: 320}, policy.ErrGuardDenied},
		{"§5.3", "partial_tail_counts", 1000, 780, Booking{Keys: keys(1, 20), ISL: 321}, policy.ErrGuardDenied},
		{"G5", "capacity_unknown_denied", 0, 0, Booking{Keys: keys(1, 1), ISL: 16}, policy.ErrCapacityUnknown},
		{"G2", "guard_off_books_over_capacity", 1000, 990, Booking{Keys: keys(1, 20), ISL: 320, Guard: policy.Guard{}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			cfg := basic()
			cfg.Workers[0].NumGPUBlocks = tc.kvcap
			f := newFixture(t, cfg)
			if tc.pre > 0 {
				if err := f.p.Book(Booking{RequestID: "bg", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: tc.pre * 16}); err != nil {
					t.Fatal(err)
				}
			}
			b := tc.b
			b.RequestID, b.Mode, b.Decode = "r", ModeBypass, "d0"
			if tc.name != "guard_off_books_over_capacity" {
				b.Guard = g
			}
			before := f.load(t, "d0")
			err := f.p.Book(b)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Book err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && f.load(t, "d0") != before {
				t.Fatalf("denied booking changed the load: %+v -> %+v", before, f.load(t, "d0"))
			}
			wantDenied := 0.0
			if errors.Is(tc.wantErr, policy.ErrGuardDenied) {
				wantDenied = 1
			}
			if got := testutil.ToFloat64(f.m.GuardCommitDenied); got != wantDenied {
				t.Fatalf("guard_commit_denied_total = %v, want %v", got, wantDenied)
			}
		})
	}
}

func TestBookRejects(t *testing.T) {
	f := newFixture(t, basic())
	ok := Booking{RequestID: "r", Mode: ModeBypass, Decode: "d0", ISL: 16}
	if err := f.p.Book(ok); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		b    Booking
		want error
	}{
		{"duplicate_request", ok, ErrDuplicateRequest},
		{"empty_id", Booking{Mode: ModeBypass, Decode: "d0"}, ErrInvalidBooking},
		{"no_mode", Booking{RequestID: "x", Decode: "d0"}, ErrInvalidBooking},
		{"prefill_tokens_above_isl", Booking{RequestID: "x", Mode: ModeBypass, Decode: "d0", ISL: 10, PrefillTokens: 11}, ErrInvalidBooking},
		{"more_keys_than_blocks", Booking{RequestID: "x", Mode: ModeBypass, Decode: "d0", ISL: 31, Keys: keys(1, 2)}, ErrInvalidBooking},
		{"unknown_decode", Booking{RequestID: "x", Mode: ModeBypass, Decode: "d9", ISL: 16}, ErrUnknownWorker},
		{"decode_is_prefill_worker", Booking{RequestID: "x", Mode: ModeBypass, Decode: "p0", ISL: 16}, ErrUnknownWorker},
		{"unknown_prefill", Booking{RequestID: "x", Mode: ModeRemote, Decode: "d0", Prefill: "p9", ISL: 16}, ErrUnknownWorker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.p.Book(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("Book = %v, want %v", err, tc.want)
			}
		})
	}
	if err := f.p.SetHealth("d0", false); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Book(Booking{RequestID: "y", Mode: ModeBypass, Decode: "d0", ISL: 16}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("Book on unhealthy worker = %v, want ErrUnknownWorker", err)
	}
	if err := f.p.SetHealth("nope", true); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("SetHealth(unknown) = %v", err)
	}
}

// TestSweep is A5: bookings older than the TTL are released and counted; younger ones stay.
func TestSweep(t *testing.T) {
	f := newFixture(t, basic())
	book := func(id string) {
		if err := f.p.Book(Booking{RequestID: id, Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 32, PrefillTokens: 32}); err != nil {
			t.Fatal(err)
		}
	}
	book("old")
	f.clock.Advance(200 * time.Second)
	book("young")
	if n := f.p.Sweep(f.clock.Now().Add(100 * time.Second)); n != 0 {
		t.Fatalf("sweep at exactly the TTL expired %d, want 0 (strictly older)", n)
	}
	if n := f.p.Sweep(f.clock.Now().Add(100*time.Second + time.Nanosecond)); n != 1 {
		t.Fatalf("sweep expired %d, want 1", n)
	}
	if got := f.load(t, "p0"); got != (load{32, 0, 1}) {
		t.Fatalf("after expiry p0 = %+v, want only the young booking", got)
	}
	if got := testutil.ToFloat64(f.m.Expired); got != 1 {
		t.Fatalf("condisagg_accounting_expired_total = %v", got)
	}
	if f.p.Release("old") {
		t.Fatal("expired booking still releasable")
	}
}

// TestActivePrefixMatchesNaive checks the binary-searched new-block count against a linear
// scan while random chained bookings come and go.
func TestActivePrefixMatchesNaive(t *testing.T) {
	f := newFixture(t, basic())
	rng := rand.New(rand.NewPCG(1, 2))
	// A conversation tree: request keys are prefixes of one of 4 long chains.
	chains := [][]uint64{keys(1, 300), keys(2, 300), keys(3, 300), keys(4, 300)}
	open := []string{}
	var snap policy.Snapshot
	for i := range 2000 {
		if len(open) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(open))
			f.p.Release(open[j])
			open = append(open[:j], open[j+1:]...)
		} else {
			c := chains[rng.IntN(len(chains))]
			n := rng.IntN(len(c) + 1)
			id := string(rune('a'+i%26)) + string(rune(i))
			if err := f.p.Book(Booking{RequestID: id, Mode: ModeBypass, Decode: "d0", Keys: c[:n], ISL: n * 16}); err != nil {
				t.Fatal(err)
			}
			open = append(open, id)
		}
		q := chains[rng.IntN(len(chains))][:rng.IntN(301)]
		f.p.Snapshot(&snap, Request{Keys: q, ISL: len(q) * 16})
		f.p.mu.RLock()
		naive := 0
		for _, k := range q {
			if f.p.byID["d0"].active.get(k) == 0 {
				naive++
			}
		}
		f.p.mu.RUnlock()
		if got := snap.Decode[0].NewBlocks; got != int64(naive) {
			t.Fatalf("iteration %d: NewBlocks = %d, naive %d", i, got, naive)
		}
	}
}

// TestSnapshotPrefillNewBlocks: a prefill worker's NewBlocks counts the request's blocks not
// active there (what the slo policy prices a whole request on it by), as on decode workers.
func TestSnapshotPrefillNewBlocks(t *testing.T) {
	f := newFixture(t, basic())
	if err := f.p.Book(Booking{RequestID: "r", Mode: ModePrefillLocal, Prefill: "p0", Keys: keys(1, 5), ISL: 90, PrefillTokens: 90}); err != nil {
		t.Fatal(err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, Request{Keys: keys(1, 8), ISL: 128})
	if len(s.Prefill) != 1 || s.Prefill[0].NewBlocks != 3 || s.Prefill[0].ActiveDecodeBlocks != 6 {
		t.Fatalf("prefill = %+v, want NewBlocks 3 (8 keys, 5 active, no partial tail) over 6 active blocks", s.Prefill)
	}
}

func TestSnapshot(t *testing.T) {
	f := newFixture(t, basic())
	if err := f.p.Book(Booking{RequestID: "r", Mode: ModeBypass, Decode: "d0", Keys: keys(1, 5), ISL: 90, PrefillTokens: 50}); err != nil {
		t.Fatal(err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, Request{Keys: keys(1, 8), ISL: 130})
	want := policy.WorkerLoad{ID: "d0", Endpoint: "10.0.0.21:8000", DPSize: 1, KVCapacityBlocks: 1000, ActivePrefillTokens: 50,
		ActiveDecodeBlocks: 6, NewBlocks: 3 + 1, ActiveRequests: 1, DecodeRequests: 1, ReportedKVUsage: -1}
	if len(s.Decode) != 1 || s.Decode[0] != want {
		t.Fatalf("decode = %+v, want %+v", s.Decode, want)
	}
	if got := s.Decode[0].ProjectedDecodeBlocks(); got != 10 {
		t.Fatalf("pdb = %d, want 10", got)
	}
	wantP := policy.WorkerLoad{ID: "p0", Endpoint: "10.0.0.11:8000", DPSize: 1, MaxBatchedTokens: 8192, KVCapacityBlocks: -1, ReportedKVUsage: -1,
		NewBlocks: 8 + 1}
	if len(s.Prefill) != 1 || s.Prefill[0] != wantP {
		t.Fatalf("prefill = %+v, want %+v", s.Prefill, wantP)
	}
	v := s.Version
	if err := f.p.SetHealth("p0", false); err != nil {
		t.Fatal(err)
	}
	f.p.Snapshot(&s, Request{})
	if len(s.Prefill) != 0 || s.Version == v {
		t.Fatalf("unhealthy worker still in snapshot (%d) or version unchanged", len(s.Prefill))
	}
	if _, ok := f.p.FewestRequests(RolePrefill); ok {
		t.Fatal("FewestRequests returned an unhealthy worker")
	}
	if w, ok := f.p.FewestRequests(RoleDecode); !ok || w.ID != "d0" {
		t.Fatalf("FewestRequests(decode) = %+v, %v", w, ok)
	}
}

// TestBookPrefillLocal: the whole request on a prefill worker books its prefill entry, its
// prompt blocks and one decoding request there (the slo policy's DecodeRequests), nothing on a
// decode worker; ReleasePrefill ends the entry, Release the rest. A decode worker named as
// the prefill_local worker is refused.
func TestBookPrefillLocal(t *testing.T) {
	f := newFixture(t, basic())
	b := Booking{RequestID: "r", Mode: ModePrefillLocal, Prefill: "p0", Keys: keys(1, 5), ISL: 90, PrefillTokens: 90}
	if err := f.p.Book(b); err != nil {
		t.Fatal(err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, Request{})
	p, d := s.Prefill[0], s.Decode[0]
	if p.ActivePrefillTokens != 90 || p.ActiveDecodeBlocks != 6 || p.ActiveRequests != 1 || p.DecodeRequests != 1 {
		t.Fatalf("prefill worker %+v", p)
	}
	if d.ActivePrefillTokens != 0 || d.ActiveDecodeBlocks != 0 || d.ActiveRequests != 0 || d.DecodeRequests != 0 {
		t.Fatalf("decode worker touched: %+v", d)
	}
	if !f.p.ReleasePrefill("r") {
		t.Fatal("ReleasePrefill found no entry")
	}
	f.p.Snapshot(&s, Request{})
	if s.Prefill[0].ActivePrefillTokens != 0 || s.Prefill[0].DecodeRequests != 1 {
		t.Fatalf("after the first token: %+v", s.Prefill[0])
	}
	if !f.p.Release("r") {
		t.Fatal("Release found no booking")
	}
	f.p.Snapshot(&s, Request{})
	if s.Prefill[0] != (policy.WorkerLoad{ID: "p0", Endpoint: "10.0.0.11:8000", DPSize: 1, MaxBatchedTokens: 8192, KVCapacityBlocks: s.Prefill[0].KVCapacityBlocks, ReportedKVUsage: -1}) {
		t.Fatalf("after release: %+v", s.Prefill[0])
	}
	b.RequestID, b.Prefill = "r2", "d0"
	if err := f.p.Book(b); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("prefill_local on a decode worker: %v", err)
	}
}

// TestReportedUsageGuard: with decode_busy_source "reported" the commit re-check reads the
// worker's own KV usage from a fresh scrape: over θd denies, under passes, no fresh scrape is
// capacity unknown; the snapshot carries the same value.
func TestReportedUsageGuard(t *testing.T) {
	cfg := basic()
	cfg.ScrapeInterval = time.Second
	f := newFixture(t, cfg)
	g := policy.Guard{Threshold: 0.8, Enabled: true, Reported: true}
	book := func(id string) error {
		return f.p.Book(Booking{RequestID: id, Mode: ModeBypass, Decode: "d0", Keys: keys(1, 2), ISL: 32, Guard: g})
	}
	if err := book("r0"); !errors.Is(err, policy.ErrCapacityUnknown) {
		t.Fatalf("no scrape yet: %v", err)
	}
	w := f.p.byID["d0"]
	f.p.applyScrape(w, Scrape{KVUsage: 0.9, NumGPUBlocks: -1, BlockSize: -1, MaxNumBatchedTokens: -1}, nil)
	if err := book("r1"); !errors.Is(err, policy.ErrGuardDenied) {
		t.Fatalf("usage 0.9 over 0.8: %v", err)
	}
	f.p.applyScrape(w, Scrape{KVUsage: 0.5, NumGPUBlocks: -1, BlockSize: -1, MaxNumBatchedTokens: -1}, nil)
	if err := book("r2"); err != nil {
		t.Fatalf("usage 0.5: %v", err)
	}
	var s policy.Snapshot
	f.p.Snapshot(&s, Request{})
	if s.Decode[0].ReportedKVUsage != 0.5 {
		t.Fatalf("snapshot usage %v", s.Decode[0].ReportedKVUsage)
	}
	f.clock.now = f.clock.now.Add(10 * time.Second) // three intervals: stale
	f.p.Snapshot(&s, Request{})
	if err := book("r3"); !errors.Is(err, policy.ErrCapacityUnknown) || s.Decode[0].ReportedKVUsage != -1 {
		t.Fatalf("stale scrape: %v, snapshot usage %v", err, s.Decode[0].ReportedKVUsage)
	}
}

// TestBookReusesReleasedKeys: a booking takes the key slice a released booking freed, and
// each booking still counts exactly its own keys: releasing one leaves the other's blocks, and
// a caller's later change to the keys it passed changes nothing. The free list stays bounded.
func TestBookReusesReleasedKeys(t *testing.T) {
	f := newFixture(t, basic())
	a, b := keys(1, 10), keys(2, 4)
	if err := f.p.Book(Booking{RequestID: "a", Mode: ModeBypass, Decode: "d0", Keys: a, ISL: 160}); err != nil {
		t.Fatal(err)
	}
	f.p.Release("a")
	if len(f.p.freeKeys) != 1 {
		t.Fatalf("free key slices after one release = %d, want 1", len(f.p.freeKeys))
	}
	if err := f.p.Book(Booking{RequestID: "b", Mode: ModeBypass, Decode: "d0", Keys: b, ISL: 64}); err != nil {
		t.Fatal(err)
	}
	if len(f.p.freeKeys) != 0 {
		t.Fatal("the second booking did not take the freed slice")
	}
	if err := f.p.Book(Booking{RequestID: "c", Mode: ModeBypass, Decode: "d0", Keys: a, ISL: 160}); err != nil {
		t.Fatal(err)
	}
	a[0], b[0] = 99, 99 // the pool holds copies
	if got := f.load(t, "d0").ADB; got != 14 {
		t.Fatalf("active decode blocks with b (4) and c (10) booked = %d, want 14", got)
	}
	f.p.Release("b")
	if got := f.load(t, "d0").ADB; got != 10 {
		t.Fatalf("after releasing b = %d, want c's 10", got)
	}
	f.p.Release("c")
	if got := f.load(t, "d0").ADB; got != 0 {
		t.Fatalf("after releasing everything = %d, want 0", got)
	}
	for i := range maxFreeKeySlices + 10 {
		id := fmt.Sprint("r", i)
		if err := f.p.Book(Booking{RequestID: id, Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 16}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxFreeKeySlices + 10 {
		f.p.freeKeysLocked(make([]uint64, 1))
		f.p.Release(fmt.Sprint("r", i))
	}
	f.p.freeKeysLocked(make([]uint64, maxFreeKeyCap+1))
	if n := len(f.p.freeKeys); n > maxFreeKeySlices {
		t.Fatalf("free key slices = %d, want at most %d", n, maxFreeKeySlices)
	}
	for _, s := range f.p.freeKeys {
		if cap(s) > maxFreeKeyCap {
			t.Fatalf("kept a slice of capacity %d > %d", cap(s), maxFreeKeyCap)
		}
	}
}
