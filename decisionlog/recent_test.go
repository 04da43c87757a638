package decisionlog

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
)

// t0 is a bucket boundary (10 s buckets).
var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func outcomeOf(r policy.Route, reason policy.Reason, decode, prefill string) *route.Outcome {
	out := &route.Outcome{Route: r, Reason: reason.String(), Decode: route.Worker{ID: decode}, Prefill: route.Worker{ID: prefill},
		Tokens: 100, Keys: 6}
	out.Decision.Route, out.Decision.Reason = r, reason
	out.Decision.Inputs.ISL, out.Decision.Inputs.Eff = 100, 40
	out.Stages = [route.NumStages]time.Duration{time.Millisecond, time.Microsecond, time.Microsecond, time.Microsecond}
	return out
}

func TestRecentOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		o    RecentOptions
		err  string
	}{
		{"zero_takes_defaults", RecentOptions{}, ""},
		{"decisions_over_max", RecentOptions{Decisions: MaxRecentDecisions + 1}, "recent decisions: 65537 is outside [1, 65536]"},
		{"negative_buckets", RecentOptions{Buckets: -1}, "mix buckets: -1 is outside [1, 16384]"},
		{"bucket_under_a_second", RecentOptions{Bucket: time.Millisecond}, "mix bucket: 1ms must be at least 1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRecent(c.o)
			if c.err == "" {
				if err != nil || len(r.slots) != DefaultRecentDecisions || len(r.mix) != DefaultMixBuckets || r.Bucket() != DefaultMixBucket {
					t.Fatalf("%v %+v", err, r)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}

// TestRecentPlacement: the mix's three placements are disjoint and cover every outcome.
func TestRecentPlacement(t *testing.T) {
	for _, c := range []struct {
		name   string
		route  policy.Route
		reason policy.Reason
		want   Placement
	}{
		{"remote_is_prefill", policy.RoutePrefill, policy.ReasonRemoteISLTooLong, PlacementPrefill},
		{"policy_error_demotion_is_prefill", policy.RoutePrefill, policy.ReasonRemotePolicyError, PlacementPrefill},
		{"bypass_is_decode", policy.RouteDecode, policy.ReasonBypassISL, PlacementDecode},
		{"passthrough_is_fallback", policy.RouteDecode, policy.ReasonPassthrough, PlacementFallback},
		{"failure_open_is_fallback", policy.RouteDecode, policy.ReasonFailureOpen, PlacementFallback},
		{"whole_request_on_prefill_is_prefill_local", policy.RoutePrefillLocal, policy.ReasonSLOPrefillLocal, PlacementPrefillLocal},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := PlacementOf(outcomeOf(c.route, c.reason, "d0", "p0")); got != c.want {
				t.Fatalf("%s/%s: %s, want %s", c.route, c.reason, PlacementNames[got], PlacementNames[c.want])
			}
		})
	}
}

// TestRecentLatest: newest first, bounded by the limit and the ring, with the decision's
// record, inputs and summed stage latency.
func TestRecentLatest(t *testing.T) {
	r, err := NewRecent(RecentOptions{Decisions: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Latest(nil, 10); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range 6 {
		out := outcomeOf(policy.RouteDecode, policy.ReasonBypassISL, "d"+strconv.Itoa(i), "")
		r.Add(t0.Add(time.Duration(i)*time.Second), "req-"+strconv.Itoa(i), out)
	}
	got := r.Latest(nil, 10)
	if len(got) != 4 || r.Total() != 6 {
		t.Fatalf("kept %d of %d, want 4 of 6", len(got), r.Total())
	}
	for i, e := range got {
		want := 5 - i
		if e.Seq != uint64(want+1) || e.RequestID != "req-"+strconv.Itoa(want) || e.Record.Decode != "d"+strconv.Itoa(want) ||
			!e.At.Equal(t0.Add(time.Duration(want)*time.Second)) {
			t.Fatalf("entry %d: %+v, want decision %d", i, e, want)
		}
	}
	e := got[0]
	if e.Record.Reason != "bypass_isl" || e.Record.Route != "decode" || e.Inputs.Eff != 40 ||
		e.Latency != time.Millisecond+3*time.Microsecond {
		t.Fatalf("entry %+v", e)
	}
	if got := r.Latest(nil, 2); len(got) != 2 || got[0].Seq != 6 || got[1].Seq != 5 {
		t.Fatalf("limit 2: %+v", got)
	}
	var nilRecent *Recent
	nilRecent.Add(t0, "", outcomeOf(policy.RouteDecode, policy.ReasonBypassISL, "d0", "")) // records nothing, no panic
	if nilRecent.Latest(nil, 1) != nil || nilRecent.Mix(t0) != nil || nilRecent.Total() != 0 {
		t.Fatal("a nil Recent reported decisions")
	}
}

// TestRecentMix: counts land in the bucket of their time; the window ends with now's bucket;
// buckets that left the window are reset when their slot is reused.
func TestRecentMix(t *testing.T) {
	r, err := NewRecent(RecentOptions{Buckets: 3, Bucket: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	add := func(at time.Time, route policy.Route, reason policy.Reason) {
		r.Add(at, "", outcomeOf(route, reason, "d0", "p0"))
	}
	add(t0, policy.RoutePrefill, policy.ReasonRemoteISLTooLong)
	add(t0.Add(9*time.Second), policy.RouteDecode, policy.ReasonBypassISL)
	add(t0.Add(10*time.Second), policy.RouteDecode, policy.ReasonPassthrough)
	add(t0.Add(25*time.Second), policy.RoutePrefill, policy.ReasonRemoteISLTooLong)
	add(t0.Add(25*time.Second), policy.RoutePrefill, policy.ReasonRemoteISLTooLong)
	got := r.Mix(t0.Add(29 * time.Second))
	want := []MixBucket{{Start: t0, Counts: [NumPlacements]int64{1, 1, 0}}, {Start: t0.Add(10 * time.Second), Counts: [NumPlacements]int64{PlacementFallback: 1}},
		{Start: t0.Add(20 * time.Second), Counts: [NumPlacements]int64{2, 0, 0}}}
	assertMix(t, got, want)
	// 30 s later the first bucket's slot holds the new bucket; the old counts are gone.
	add(t0.Add(31*time.Second), policy.RouteDecode, policy.ReasonBypassISL)
	want = []MixBucket{{Start: t0.Add(10 * time.Second), Counts: [NumPlacements]int64{PlacementFallback: 1}},
		{Start: t0.Add(20 * time.Second), Counts: [NumPlacements]int64{2, 0, 0}}, {Start: t0.Add(30 * time.Second), Counts: [NumPlacements]int64{0, 1, 0}}}
	assertMix(t, r.Mix(t0.Add(31*time.Second)), want)
	// A decision older than the ring (the clock stepped back) is not counted anywhere.
	add(t0, policy.RoutePrefill, policy.ReasonRemoteISLTooLong)
	assertMix(t, r.Mix(t0.Add(31*time.Second)), want)
	// Much later every bucket in the window is empty.
	for _, b := range r.Mix(t0.Add(time.Hour)) {
		if b.Counts != [NumPlacements]int64{} {
			t.Fatalf("stale bucket %+v an hour later", b)
		}
	}
}

func assertMix(t *testing.T, got, want []MixBucket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d buckets, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if !got[i].Start.Equal(want[i].Start) || got[i].Counts != want[i].Counts {
			t.Fatalf("bucket %d: %v %v, want %v %v", i, got[i].Start, got[i].Counts, want[i].Start, want[i].Counts)
		}
	}
}

// TestRecentAgainstNaive: random decisions at random (non-decreasing) times give the same
// Latest and Mix as a plain slice of every decision.
func TestRecentAgainstNaive(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		size, buckets := 1+rng.IntN(16), 1+rng.IntN(8)
		r, err := NewRecent(RecentOptions{Decisions: size, Buckets: buckets, Bucket: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		type rec struct {
			at time.Time
			p  Placement
			id string
		}
		var all []rec
		at := t0
		for i := range 200 {
			at = at.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			route, reason := policy.RouteDecode, policy.ReasonBypassISL
			switch rng.IntN(4) {
			case 0:
				route, reason = policy.RoutePrefill, policy.ReasonRemoteISLTooLong
			case 1:
				reason = policy.ReasonPassthrough
			case 2:
				route, reason = policy.RoutePrefillLocal, policy.ReasonSLOPrefillLocal
			}
			id := strconv.Itoa(i)
			out := outcomeOf(route, reason, "d", "p")
			r.Add(at, id, out)
			all = append(all, rec{at, PlacementOf(out), id})
			got := r.Latest(nil, size+1)
			for j, e := range got {
				if want := all[len(all)-1-j]; e.RequestID != want.id {
					t.Fatalf("seed %d step %d: Latest[%d] is %s, want %s", seed, i, j, e.RequestID, want.id)
				}
			}
			if len(got) != min(size, len(all)) {
				t.Fatalf("seed %d step %d: %d entries", seed, i, len(got))
			}
			now := at.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			for _, b := range r.Mix(now) {
				var want [NumPlacements]int64
				for _, d := range all {
					if !d.at.Before(b.Start) && d.at.Before(b.Start.Add(time.Second)) {
						want[d.p]++
					}
				}
				if b.Counts != want {
					t.Fatalf("seed %d step %d: bucket %v counts %v, want %v", seed, i, b.Start, b.Counts, want)
				}
			}
		}
	}
}

// TestRecentConcurrent: writers and readers at once (run with -race); every entry read is a
// whole decision, and every decision is counted in the mix.
func TestRecentConcurrent(t *testing.T) {
	r, err := NewRecent(RecentOptions{Decisions: 8})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, e := range r.Latest(nil, 8) {
				if e.RequestID != "w"+e.Record.Decode {
					t.Errorf("torn entry %+v", e)
					return
				}
			}
			r.Mix(t0)
		}
	})
	for w := range writers {
		wg.Go(func() {
			name := strconv.Itoa(w)
			for range each {
				r.Add(t0, "w"+name, outcomeOf(policy.RouteDecode, policy.ReasonBypassISL, name, ""))
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	mix := r.Mix(t0)
	if n := mix[len(mix)-1].Counts[PlacementDecode]; n != writers*each || r.Total() != writers*each {
		t.Fatalf("counted %d, total %d, want %d", n, r.Total(), writers*each)
	}
}
