package route

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"

	"github.com/condisagg/condisagg/pool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newPool builds a real pool with one decode worker (kvcap blocks) and one prefill worker.
func newPool(t *testing.T, kvcap int64) (*pool.Pool, *pool.Metrics) {
	t.Helper()
	m := pool.NewMetrics(prometheus.NewRegistry())
	p, err := pool.New(pool.Config{Workers: []pool.WorkerConfig{
		{Name: "d0", Role: pool.RoleDecode, Endpoint: "127.0.0.1:8001", NumGPUBlocks: kvcap},
		{Name: "p0", Role: pool.RolePrefill, Endpoint: "127.0.0.1:8002", MaxNumBatchedTokens: 8192},
	}}, pool.Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

func chain(base uint64, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = base<<32 | uint64(i)
	}
	return k
}

// TestCommitSharedPrefixGuard is G8 end to end: a 100-block request whose first 90 blocks are
// active on d ⇒ pdb = 7900 + 10 = 7910 ≤ 8000 ⇒ bypass, booked.
func TestCommitSharedPrefixGuard(t *testing.T) {
	p, _ := newPool(t, 10000)
	// 7810 unique remote blocks + a 90-block bypass chain = adb 7900.
	if err := p.Book(pool.Booking{RequestID: "bg", Mode: pool.ModeRemote, Decode: "d0", Prefill: "p0", ISL: 7810 * 16}); err != nil {
		t.Fatal(err)
	}
	keys := chain(7, 100)
	if err := p.Book(pool.Booking{RequestID: "prefix", Mode: pool.ModeBypass, Decode: "d0", Keys: keys[:90], ISL: 90 * 16}); err != nil {
		t.Fatal(err)
	}
	cfg := enabledConfig()
	cfg.Disagg.DecodeBusyThreshold = policy.Set(0.8)
	var snap policy.Snapshot
	p.Snapshot(&snap, pool.Request{Keys: keys, ISL: 1600})
	if got := snap.Decode[0].ProjectedDecodeBlocks(); got != 7910 {
		t.Fatalf("G8 pdb = %d, want 7910", got)
	}
	in := &policy.Input{Now: testNow, ISL: 1600, Decode: []policy.Signal{{Worker: "d0", GPU: 90, Stream: live()}}}
	dec := policy.Decide(&cfg, in, &snap, newRand(1))
	if dec.Reason != policy.ReasonBypassISL || dec.Gate != policy.GateAllowedDecodeNotBusy {
		t.Fatalf("G8: %v / %v, want bypass_isl allowed", dec.Reason, dec.Gate)
	}
	if err := p.Book(Booking(&dec, "r", keys)); err != nil {
		t.Fatalf("G8 commit: %v", err)
	}
}

// TestCommitConcurrentBypassRace is G10: kvcap=1000, adb=700, θd=0.8, 8 concurrent 20-block
// bypasses that all previewed the same state ⇒ exactly 5 booked, 3 remote_decode_busy,
// commit-denied counter 3.
func TestCommitConcurrentBypassRace(t *testing.T) {
	p, m := newPool(t, 1000)
	if err := p.Book(pool.Booking{RequestID: "bg", Mode: pool.ModeRemote, Decode: "d0", Prefill: "p0", ISL: 700 * 16}); err != nil {
		t.Fatal(err)
	}
	cfg := enabledConfig()
	cfg.Disagg.DecodeBusyThreshold = policy.Set(0.8)
	const n = 8
	var previewed, start sync.WaitGroup
	previewed.Add(n)
	start.Add(1)
	reasons := make([]policy.Reason, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			keys := chain(uint64(100+i), 20)
			var snap policy.Snapshot
			p.Snapshot(&snap, pool.Request{Keys: keys, ISL: 320})
			in := &policy.Input{Now: testNow, ISL: 320, Decode: []policy.Signal{{Worker: "d0", GPU: 10, Stream: live()}}}
			rng := newRand(uint64(i))
			dec := policy.Decide(&cfg, in, &snap, rng)
			previewed.Done()
			start.Wait() // every preview saw adb = 700 before any commit
			if dec.Reason == policy.ReasonBypassISL {
				if err := p.Book(Booking(&dec, fmt.Sprint("r", i), keys)); errors.Is(err, policy.ErrGuardDenied) {
					policy.Demote(&cfg, in, &snap, rng, &dec, policy.ReasonRemoteDecodeBusy)
				} else if err != nil {
					t.Errorf("book %d: %v", i, err)
				}
			}
			reasons[i] = dec.Reason
		})
	}
	previewed.Wait()
	start.Done()
	wg.Wait()
	count := map[policy.Reason]int{}
	for _, r := range reasons {
		count[r]++
	}
	if count[policy.ReasonBypassISL] != 5 || count[policy.ReasonRemoteDecodeBusy] != 3 {
		t.Fatalf("G10 outcomes = %v, want 5 bypass_isl and 3 remote_decode_busy", count)
	}
	if got := testutil.ToFloat64(m.GuardCommitDenied); got != 3 {
		t.Fatalf("G10 condisagg_guard_commit_denied_total = %v, want 3", got)
	}
	if w := p.Workers()[0]; w.ActiveDecodeBlocks != 800 {
		t.Fatalf("G10 adb = %d, want 800 (never above θd·kvcap)", w.ActiveDecodeBlocks)
	}
}

// TestCommitConcurrentDecideBookRelease runs many goroutines deciding, booking and releasing
// on one pool (under -race); every total returns to zero.
func TestCommitConcurrentDecideBookRelease(t *testing.T) {
	m := pool.NewMetrics(prometheus.NewRegistry())
	var wcs []pool.WorkerConfig
	for i := range 4 {
		wcs = append(wcs, pool.WorkerConfig{Name: fmt.Sprint("d", i), Role: pool.RoleDecode, Endpoint: fmt.Sprintf("127.0.0.1:%d", 9000+i), NumGPUBlocks: 5000},
			pool.WorkerConfig{Name: fmt.Sprint("p", i), Role: pool.RolePrefill, Endpoint: fmt.Sprintf("127.0.0.1:%d", 9100+i), MaxNumBatchedTokens: 4096})
	}
	p, err := pool.New(pool.Config{Workers: wcs}, pool.Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	cfg := enabledConfig()
	cfg.Disagg.Policy, cfg.Disagg.PrefillBusyThreshold, cfg.Disagg.DecodeBusyThreshold = policy.ISLOrLoad, policy.Set(1), policy.Set(0.5)
	const goroutines, perG = 16, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	routes := map[policy.Route]int{}
	for g := range goroutines {
		wg.Go(func() {
			rng := newRand(uint64(g))
			var snap policy.Snapshot
			in := &policy.Input{Now: testNow}
			for j := range perG {
				isl := 1 + rng.IntN(3000)
				keys := chain(uint64(rng.IntN(5)), isl/16) // five shared conversation prefixes
				p.Snapshot(&snap, pool.Request{Keys: keys, ISL: isl})
				in.ISL = isl
				in.Decode = in.Decode[:0]
				for _, w := range snap.Decode {
					in.Decode = append(in.Decode, policy.Signal{Worker: w.ID, GPU: rng.IntN(isl/16 + 1), Stream: live()})
				}
				dec := policy.Decide(&cfg, in, &snap, rng)
				id := fmt.Sprintf("g%d-%d", g, j)
				err := p.Book(Booking(&dec, id, keys))
				if errors.Is(err, policy.ErrGuardDenied) || errors.Is(err, policy.ErrCapacityUnknown) {
					policy.Demote(&cfg, in, &snap, rng, &dec, policy.ReasonRemoteDecodeBusy)
					err = p.Book(Booking(&dec, id, keys))
				}
				if err != nil {
					t.Errorf("book %s (%v): %v", id, dec.Reason, err)
					return
				}
				mu.Lock()
				routes[dec.Route]++
				mu.Unlock()
				p.ReleasePrefill(id)
				if j%3 == 0 {
					p.ReleasePrefill(id) // idempotent
				}
				p.Release(id)
				p.Release(id)
			}
		})
	}
	wg.Wait()
	if routes[policy.RouteDecode] == 0 || routes[policy.RoutePrefill] == 0 {
		t.Fatalf("routes %v: the workload should exercise both paths", routes)
	}
	for _, w := range p.Workers() {
		if w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 || w.ActiveRequests != 0 {
			t.Errorf("worker %s not back to zero: %+v", w.ID, w)
		}
	}
	if got := testutil.ToFloat64(m.Bookings); got != 0 {
		t.Errorf("open bookings gauge = %v", got)
	}
}

// TestDecideBooksNothing is R8 at this layer: a decision (what Explain shows) leaves the pool
// untouched; only Book changes it.
func TestDecideBooksNothing(t *testing.T) {
	p, _ := newPool(t, 10000)
	before := p.Workers()
	var snap policy.Snapshot
	keys := chain(1, 100)
	p.Snapshot(&snap, pool.Request{Keys: keys, ISL: 1600})
	cfg := enabledConfig()
	in := &policy.Input{Now: testNow, ISL: 1600, Decode: []policy.Signal{{Worker: "d0", GPU: 90, Stream: live()}}}
	for range 10 {
		if dec := policy.Decide(&cfg, in, &snap, newRand(1)); dec.Reason != policy.ReasonBypassISL {
			t.Fatalf("setup: %v", dec.Reason)
		}
	}
	after := p.Workers()
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("Decide changed the pool: %+v -> %+v", before[i], after[i])
		}
	}
}

func TestDemoteReasonMapsBookingErrors(t *testing.T) {
	cases := []struct {
		spec string
		err  error
		want policy.Reason
	}{
		{"§3 step 9: guard re-check denies the bypass", fmt.Errorf("book: %w", policy.ErrGuardDenied), policy.ReasonRemoteDecodeBusy},
		{"§4.2: capacity unknown with the guard on", fmt.Errorf("book: %w", policy.ErrCapacityUnknown), policy.ReasonRemoteCapacityUnknown},
		{"R7: decode worker vanished", errors.New("pool: unknown worker decode-9"), policy.ReasonRemotePolicyError},
	}
	for _, c := range cases {
		if got := policy.DemoteReason(c.err); got != c.want {
			t.Errorf("%s: policy.DemoteReason(%v) = %s, want %s", c.spec, c.err, got, c.want)
		}
	}
}

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func enabledConfig() policy.Config {
	c := policy.DefaultConfig()
	c.Enabled, c.DisaggGiven, c.KVEvents, c.DistinctPools = true, true, true, true
	return c
}

func live() policy.Stream { return policy.Stream{Connected: true, LastStored: testNow} }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }
