package pool

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func peerBook(replica string, b Booking, lease time.Duration) PeerDelta {
	return PeerDelta{Replica: replica, Kind: PeerBook, Booking: b, Lease: lease}
}

func peerRel(replica, id string, kind PeerKind) PeerDelta {
	return PeerDelta{Replica: replica, Kind: kind, RequestID: id, Lease: 10 * time.Second}
}

// TestPeerBookings is one case per rule of README "Peer bookings".
func TestPeerBookings(t *testing.T) {
	bypass := func(id string, k []uint64, isl int, eff int64) Booking {
		return Booking{RequestID: id, Mode: ModeBypass, Decode: "d0", Keys: k, ISL: isl, PrefillTokens: eff}
	}
	remote := func(id string, isl int, tokens int64) Booking {
		return Booking{RequestID: id, Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: isl, PrefillTokens: tokens}
	}
	const lease = 10 * time.Second
	type step struct {
		d       PeerDelta
		local   *Booking      // a local Book instead of a delta
		advance time.Duration // advance the clock, then ExpirePeers
		want    map[string]load
		peers   int
	}
	tests := []struct {
		spec, name string
		steps      []step
	}{
		{"P1", "peer_bypass_counts_like_a_local_one", []step{
			{d: peerBook("b", bypass("r1", keys(1, 10), 170, 90), lease), want: map[string]load{"d0": {90, 11, 1}, "p0": {}}, peers: 1},
		}},
		{"P1", "peer_remote_counts_on_both_workers", []step{
			{d: peerBook("b", remote("r1", 170, 120), lease), want: map[string]load{"d0": {0, 11, 1}, "p0": {120, 0, 1}}, peers: 1},
			{d: peerRel("b", "r1", PeerReleasePrefill), want: map[string]load{"d0": {0, 11, 1}, "p0": {0, 0, 1}}, peers: 1},
			{d: peerRel("b", "r1", PeerRelease), want: map[string]load{"d0": {}, "p0": {}}, peers: 0},
		}},
		{"P1", "shared_prefix_with_a_local_booking_counts_once", []step{
			{local: ptr(bypass("r1", keys(1, 10), 160, 160))},
			{d: peerBook("b", bypass("r1", keys(1, 12), 200, 40), lease), want: map[string]load{"d0": {200, 13, 2}}, peers: 1},
		}},
		{"P2", "same_request_id_on_two_replicas_is_two_bookings", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: peerBook("c", remote("r1", 32, 32), lease), want: map[string]load{"d0": {0, 4, 2}, "p0": {64, 0, 2}}, peers: 2},
			{d: peerRel("b", "r1", PeerRelease), want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
		}},
		{"P3", "duplicate_book_books_once", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: peerBook("b", remote("r1", 32, 32), lease), want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
		}},
		{"P3", "duplicate_release_is_a_no_op", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: peerBook("b", remote("r2", 32, 32), lease)},
			{d: peerRel("b", "r1", PeerRelease)},
			{d: peerRel("b", "r1", PeerRelease), want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
			{d: peerRel("b", "r1", PeerReleasePrefill), want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
		}},
		{"P3", "resync_without_prefill_drops_the_entry_whose_release_was_lost", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			// The bus's resync re-sends the booking as it stands: its prefill entry released.
			{d: peerBook("b", remote("r1", 32, 0), lease), want: map[string]load{"d0": {0, 2, 1}, "p0": {0, 0, 1}}, peers: 1},
		}},
		{"P4", "release_before_book_holds_nothing", []step{
			{d: peerRel("b", "r1", PeerRelease)},
			{d: peerBook("b", remote("r1", 32, 32), lease), want: map[string]load{"d0": {}, "p0": {}}, peers: 0},
			// The early release was used up: the request id may be booked again.
			{d: peerBook("b", remote("r1", 32, 32), lease), want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
		}},
		{"P5", "silent_peer_is_dropped_when_the_lease_runs_out", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{advance: lease, want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
			{advance: time.Millisecond, want: map[string]load{"d0": {}, "p0": {}}, peers: 0},
		}},
		{"P5", "heartbeat_renews_a_long_request", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{advance: 8 * time.Second, peers: 1},
			{d: PeerDelta{Replica: "b", Kind: PeerRenew, Open: []string{"r1"}, Lease: lease}},
			{advance: 8 * time.Second, want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
			{advance: 3 * time.Second, peers: 0},
		}},
		{"P6", "complete_heartbeat_drops_a_release_the_bus_lost", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: peerBook("b", remote("r2", 32, 32), lease)},
			{d: peerBook("c", remote("r3", 32, 32), lease)},
			{d: PeerDelta{Replica: "b", Kind: PeerRenew, Open: []string{"r2", "r9"}, Complete: true, Lease: lease},
				want: map[string]load{"d0": {0, 4, 2}, "p0": {64, 0, 2}}, peers: 2},
		}},
		{"P6", "partial_heartbeat_drops_nothing", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: PeerDelta{Replica: "b", Kind: PeerRenew, Open: []string{"r2"}, Lease: lease}, peers: 1},
		}},
		{"P7", "gone_peer_loses_everything", []step{
			{d: peerBook("b", remote("r1", 32, 32), lease)},
			{d: peerBook("b", bypass("r2", keys(2, 4), 64, 64), lease)},
			{d: peerBook("c", remote("r3", 32, 32), lease)},
			{d: PeerDelta{Replica: "b", Kind: PeerGone}, want: map[string]load{"d0": {0, 2, 1}, "p0": {32, 0, 1}}, peers: 1},
		}},
		{"P8", "lease_is_clamped", []step{
			{d: peerBook("b", remote("r1", 32, 32), time.Hour)},
			{advance: MaxPeerLease + time.Millisecond, peers: 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			f := newFixture(t, basic())
			for i, s := range tc.steps {
				switch {
				case s.local != nil:
					if err := f.p.Book(*s.local); err != nil {
						t.Fatalf("step %d: Book: %v", i, err)
					}
				case s.advance > 0:
					f.clock.Advance(s.advance)
					f.p.ExpirePeers()
				default:
					if _, err := f.p.ApplyPeer(s.d); err != nil {
						t.Fatalf("step %d: ApplyPeer: %v", i, err)
					}
				}
				for id, want := range s.want {
					if got := f.load(t, id); got != want {
						t.Errorf("step %d: %s load %+v, want %+v", i, id, got, want)
					}
				}
				if s.want != nil || s.peers > 0 || s.advance > 0 {
					if got := f.p.PeerBookings(); got != s.peers {
						t.Errorf("step %d: %d peer bookings, want %d", i, got, s.peers)
					}
					if got := testutil.ToFloat64(f.m.PeerBookings); int(got) != s.peers {
						t.Errorf("step %d: condisagg_peer_bookings %v, want %d", i, got, s.peers)
					}
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestLocalBookingsRebuildTheLoad: a peer that applies LocalBookings as PeerBook deltas (the
// bus's resync) holds exactly the load the bookings put on their own pool, prefill releases
// included, and the list is bounded by max.
func TestLocalBookingsRebuildTheLoad(t *testing.T) {
	src, dst := newFixture(t, basic()), newFixture(t, basic())
	for _, b := range []Booking{
		{RequestID: "by", Mode: ModeBypass, Decode: "d0", Keys: keys(1, 10), ISL: 170, PrefillTokens: 90},
		{RequestID: "by2", Mode: ModeBypass, Decode: "d0", Keys: keys(1, 6), ISL: 96, PrefillTokens: 16},
		{RequestID: "re", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 170, PrefillTokens: 120},
		{RequestID: "re2", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 40, PrefillTokens: 40},
		{RequestID: "pl", Mode: ModePrefillLocal, Prefill: "p0", Keys: keys(7, 3), ISL: 50, PrefillTokens: 50},
	} {
		must(t, src.p.Book(b))
	}
	src.p.ReleasePrefill("re2")
	src.p.ReleasePrefill("by2")
	bs, open := src.p.LocalBookings(100)
	if open != 5 || len(bs) != 5 {
		t.Fatalf("LocalBookings: %d of %d, want 5 of 5", len(bs), open)
	}
	for _, b := range bs {
		if _, err := dst.p.ApplyPeer(peerBook("a", b, time.Minute)); err != nil {
			t.Fatalf("ApplyPeer %+v: %v", b, err)
		}
	}
	for _, id := range []string{"d0", "p0"} {
		if got, want := dst.load(t, id), src.load(t, id); got != want {
			t.Errorf("%s: the peer holds %+v, the booking pool %+v", id, got, want)
		}
	}
	if bs, open := src.p.LocalBookings(2); len(bs) != 2 || open != 5 {
		t.Errorf("LocalBookings(2): %d of %d, want 2 of 5", len(bs), open)
	}
}

// TestPeerLoadTripsTheGuard: the decode-busy guard's commit-time re-check sees peer bookings
// (the reason they exist: two replicas that each book half the load must not both admit).
func TestPeerLoadTripsTheGuard(t *testing.T) {
	f := newFixture(t, basic()) // d0 kvcap 1000
	g := policy.Guard{Threshold: 0.5, Enabled: true}
	local := Booking{RequestID: "mine", Mode: ModeBypass, Decode: "d0", Keys: keys(7, 100), ISL: 1600, PrefillTokens: 1600, Guard: g}
	if _, err := f.p.ApplyPeer(peerBook("b", Booking{RequestID: "theirs", Mode: ModeBypass, Decode: "d0", Keys: keys(1, 450), ISL: 7200}, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Book(local); !errors.Is(err, policy.ErrGuardDenied) {
		t.Fatalf("Book with 450 peer blocks + 100 new on kvcap 1000 at threshold 0.5: %v, want ErrGuardDenied", err)
	}
	if _, err := f.p.ApplyPeer(peerRel("b", "theirs", PeerRelease)); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Book(local); err != nil {
		t.Fatalf("Book after the peer released: %v", err)
	}
}

// TestPeerRefusals: each refusal is an error of its sentinel and a counted reason.
func TestPeerRefusals(t *testing.T) {
	cfg := basic()
	cfg.MaxPeerBookings = 2
	f := newFixture(t, cfg)
	ok := Booking{RequestID: "r", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 32, PrefillTokens: 32}
	cases := []struct {
		name   string
		d      PeerDelta
		want   error
		reason string
	}{
		{"unknown_worker", peerBook("c", Booking{RequestID: "x", Mode: ModeRemote, Decode: "d9", Prefill: "p0", ISL: 32}, time.Minute), ErrUnknownWorker, "unknown_worker"},
		{"wrong_role", peerBook("c", Booking{RequestID: "x", Mode: ModeRemote, Decode: "p0", Prefill: "p0", ISL: 32}, time.Minute), ErrUnknownWorker, "unknown_worker"},
		{"bad_mode", peerBook("c", Booking{RequestID: "x", Mode: 9, Decode: "d0", ISL: 32}, time.Minute), ErrInvalidBooking, "invalid"},
		{"no_replica", PeerDelta{Kind: PeerGone}, ErrInvalidBooking, "invalid"},
		{"bad_kind", PeerDelta{Replica: "b", Kind: 77}, ErrInvalidBooking, "invalid"},
		{"full", peerBook("b", ok, time.Minute), ErrPeerBookingsFull, "full"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := testutil.ToFloat64(f.m.PeerRejected.WithLabelValues(c.reason))
			if c.name == "full" {
				for i, id := range []string{"r1", "r2"} {
					b := ok
					b.RequestID = id
					if _, err := f.p.ApplyPeer(peerBook("b", b, time.Minute)); err != nil {
						t.Fatalf("%d: %v", i, err)
					}
				}
			}
			_, err := f.p.ApplyPeer(c.d)
			if !errors.Is(err, c.want) {
				t.Fatalf("ApplyPeer: %v, want %v", err, c.want)
			}
			if got := testutil.ToFloat64(f.m.PeerRejected.WithLabelValues(c.reason)); got != before+1 {
				t.Errorf("rejected{reason=%s} %v, want %v", c.reason, got, before+1)
			}
		})
	}
	if got := f.p.PeerBookings(); got != 2 {
		t.Errorf("%d peer bookings after the refusals, want 2", got)
	}
}

// TestOnLocalReportsEveryChange: Book, ReleasePrefill, Release and the TTL sweep each report
// their change, in order, and only once.
func TestOnLocalReportsEveryChange(t *testing.T) {
	var got []LocalChange
	clock := &fakeClock{now: t0}
	p, err := New(basic(), Options{Metrics: NewMetrics(prometheus.NewRegistry()), Clock: clock, OnLocal: func(c LocalChange) {
		c.Booking.Keys = nil // valid only during the call
		got = append(got, c)
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := Booking{RequestID: "r1", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 32, PrefillTokens: 32}
	must(t, p.Book(b))
	p.ReleasePrefill("r1")
	p.ReleasePrefill("r1")
	p.Release("r1")
	p.Release("r1")
	b.RequestID = "r2"
	must(t, p.Book(b))
	clock.Advance(DefaultBookingTTL + time.Second)
	p.Expire()
	want := []struct {
		k  LocalKind
		id string
	}{{LocalBook, "r1"}, {LocalReleasePrefill, "r1"}, {LocalRelease, "r1"}, {LocalBook, "r2"}, {LocalRelease, "r2"}}
	if len(got) != len(want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	for i, w := range want {
		if got[i].Kind != w.k || got[i].RequestID != w.id {
			t.Errorf("change %d: %v %s, want %v %s", i, got[i].Kind, got[i].RequestID, w.k, w.id)
		}
	}
	if got[0].Booking.Prefill != "p0" || got[0].Booking.ISL != 32 {
		t.Errorf("book change carries %+v", got[0].Booking)
	}
}

// TestPeerNeverLeaks: random deltas of three peers — duplicated, reordered, some lost —
// followed by every peer's silence leave no load after one lease, and the load is back to what
// the local bookings alone hold.
func TestPeerNeverLeaks(t *testing.T) {
	f := newFixture(t, basic())
	rng := rand.New(rand.NewPCG(1, 2))
	must(t, f.p.Book(Booking{RequestID: "local", Mode: ModeRemote, Decode: "d0", Prefill: "p0", ISL: 48, PrefillTokens: 48}))
	base := map[string]load{"d0": f.load(t, "d0"), "p0": f.load(t, "p0")}
	const lease = 5 * time.Second
	var ds []PeerDelta
	for i := range 300 {
		replica := []string{"a", "b", "c"}[rng.IntN(3)]
		id := string(rune('A' + i%40))
		switch rng.IntN(4) {
		case 0, 1:
			mode := []Mode{ModeBypass, ModeRemote, ModePrefillLocal}[rng.IntN(3)]
			b := Booking{RequestID: id, Mode: mode, Decode: "d0", Prefill: "p0", ISL: 16 * (1 + rng.IntN(8))}
			if mode == ModeBypass {
				b.Prefill = ""
			}
			if mode != ModeRemote {
				b.Keys = keys(uint64(rng.IntN(3)), b.ISL/16)
			}
			if mode == ModePrefillLocal {
				b.Decode = ""
			}
			b.PrefillTokens = int64(rng.IntN(b.ISL + 1))
			ds = append(ds, peerBook(replica, b, lease))
		case 2:
			ds = append(ds, peerRel(replica, id, PeerReleasePrefill))
		default:
			ds = append(ds, peerRel(replica, id, PeerRelease))
		}
	}
	for _, d := range ds {
		switch r := rng.Float64(); {
		case r < 0.1: // lost
			continue
		case r < 0.2: // duplicated
			f.p.ApplyPeer(d)
		}
		if _, err := f.p.ApplyPeer(d); err != nil {
			t.Fatalf("ApplyPeer %+v: %v", d, err)
		}
		f.clock.Advance(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	f.clock.Advance(lease + time.Millisecond)
	f.p.ExpirePeers()
	for id, want := range base {
		if got := f.load(t, id); got != want {
			t.Errorf("%s load %+v after every lease ran out, want the local %+v", id, got, want)
		}
	}
	if n := f.p.PeerBookings(); n != 0 {
		t.Errorf("%d peer bookings left", n)
	}
	if d0 := f.p.byIDForTest("d0"); d0.active.len() != 0 {
		t.Errorf("d0 still holds %d active keys", d0.active.len())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
