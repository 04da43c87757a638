package bookbus

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/internal/natstest"
	"github.com/condisagg/condisagg/pool"
)

// load is the booked load of every worker of p: local and peer bookings together. Two
// replicas that each hold the other's open bookings have equal loads.
func load(p *pool.Pool) map[string][3]int64 {
	out := map[string][3]int64{}
	for _, w := range p.Workers() {
		out[w.ID] = [3]int64{w.ActivePrefillTokens, w.ActiveDecodeBlocks, w.ActiveRequests}
	}
	return out
}

func sameLoad(a, b *replica) func() bool {
	return func() bool { return maps.Equal(load(a.p), load(b.p)) }
}

// bookMix books n requests of every mode on r (ids prefix-i), releasing the prefill entry of
// every third: the shapes a resync must rebuild.
func bookMix(t *testing.T, r *replica, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		var b pool.Booking
		switch i % 3 {
		case 0:
			b = bypass(id, 2+i%7)
		case 1:
			b = remote(id)
		default:
			b = pool.Booking{RequestID: id, Mode: pool.ModePrefillLocal, Prefill: "p0", Keys: bypass(id, 3).Keys, ISL: 50, PrefillTokens: 50}
		}
		must(t, r.p.Book(b))
		if i%3 == 1 {
			r.p.ReleasePrefill(id)
		}
	}
}

// TestJoinerSeesOpenBookings: a replica that joins while its peer carries load gets the peer's
// open bookings (made before it existed) within a bound, while the peer keeps booking and
// releasing; then both views are equal, and they stay equal as the peer releases.
func TestJoinerSeesOpenBookings(t *testing.T) {
	s := startServer(t)
	a := newReplica(t, s.URL(), "a", 3*time.Second, nil, testToken)
	waitFor(t, 10*time.Second, "a connected", connected(a))
	const long = 120
	bookMix(t, a, "long", long)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // churn: short requests, at most one open at a time
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("short-%d", i)
			if err := a.p.Book(remote(id)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(500 * time.Microsecond)
			a.p.Release(id)
		}
	}()
	c := newReplica(t, s.URL(), "c", 3*time.Second, nil, testToken)
	waitFor(t, 10*time.Second, "c connected", connected(c))
	// Only a resync can give c the long bookings: heartbeats name ids, not load.
	took := waitFor(t, 2*time.Second, "c holds a's long bookings", func() bool { return c.p.PeerBookings() >= long })
	t.Logf("joiner held the peer's %d open bookings %v after connecting", long, took)
	close(stop)
	wg.Wait()
	waitFor(t, 2*time.Second, "equal views after the churn", sameLoad(a, c))
	// The counters follow the sends (a resync counts itself after its last publish), and c's
	// hello may have found a's resyncer inside its interval (the resync then runs when the
	// interval ends): wait for them rather than read them once.
	var joins, resyncs, resent float64
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		joins, resyncs, resent = testutil.ToFloat64(a.m.Joins), testutil.ToFloat64(a.m.Resyncs.WithLabelValues("peer_join")), testutil.ToFloat64(a.m.ResyncBookings)
		if joins >= 1 && resyncs >= 1 && resent >= long || time.Now().After(deadline) {
			break
		}
	}
	if joins < 1 || resyncs < 1 || resent < long {
		t.Errorf("within 2s a counted %v joins, %v peer_join resyncs and %v re-sent bookings; want >= 1, >= 1, >= %d", joins, resyncs, resent, long)
	}
	for i := range long {
		a.p.Release(fmt.Sprintf("long-%d", i))
	}
	waitFor(t, 2*time.Second, "c drops every released booking", func() bool { return c.p.PeerBookings() == 0 })
	for id, l := range load(c.p) {
		if l != ([3]int64{}) {
			t.Errorf("%s holds %v after every release, want nothing", id, l)
		}
	}
}

// TestBusRestartEndsWithEqualViews: the server stops for longer than the lease (each replica
// drops the other's bookings), both book and release meanwhile (those deltas are lost), and
// when it is back both views are equal again: each replica re-sent its open bookings after its
// reconnect. A second outage then shows that re-sent bookings still expire with their lease.
func TestBusRestartEndsWithEqualViews(t *testing.T) {
	s := startServer(t)
	const lease = 600 * time.Millisecond
	a := newReplica(t, s.URL(), "a", lease, nil, testToken)
	b := newReplica(t, s.URL(), "b", lease, nil, testToken)
	waitFor(t, 10*time.Second, "both connected", connected(a, b))
	bookMix(t, a, "a", 30)
	bookMix(t, b, "b", 30)
	waitFor(t, 5*time.Second, "equal views before the outage", sameLoad(a, b))

	resyncs := func(r *replica) float64 {
		return testutil.ToFloat64(r.m.Resyncs.WithLabelValues("connect")) + testutil.ToFloat64(r.m.Resyncs.WithLabelValues("peer_join"))
	}
	before := map[*replica]float64{a: resyncs(a), b: resyncs(b)}
	opts := s.Options()
	s.Stop()
	waitFor(t, 10*time.Second, "both see the bus down", func() bool { return !a.bus.Connected() && !b.bus.Connected() })
	bookMix(t, a, "a-down", 20)
	bookMix(t, b, "b-down", 10)
	for i := 0; i < 30; i += 2 {
		a.p.Release(fmt.Sprintf("a-%d", i))
	}
	a.p.ReleasePrefill("a-30")
	b.p.Release("b-0")
	waitFor(t, 10*lease, "each drops the other's bookings after the lease", func() bool {
		return a.p.PeerBookings() == 0 && b.p.PeerBookings() == 0
	})

	s2, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Stop)
	start := time.Now()
	waitFor(t, 10*time.Second, "both reconnect", connected(a, b))
	waitFor(t, 5*time.Second, "equal views after the restart", func() bool {
		return sameLoad(a, b)() && a.p.PeerBookings() == len(b.p.OpenBookings()) && b.p.PeerBookings() == len(a.p.OpenBookings())
	})
	t.Logf("views equal %v after the server came back (%d and %d open bookings)", time.Since(start), len(a.p.OpenBookings()), len(b.p.OpenBookings()))
	for _, r := range []*replica{a, b} { // the reconnect's and the peer's hello coalesce into one or two
		if got := resyncs(r) - before[r]; got < 1 || got > 2 {
			t.Errorf("%s: %v resyncs after the restart, want 1 or 2", r.bus.Replica(), got)
		}
	}

	// The re-sent bookings hold by lease like any other: a second outage drops them.
	s2.Stop()
	waitFor(t, 10*lease, "re-sent bookings expire with their lease", func() bool {
		return a.p.PeerBookings() == 0 && b.p.PeerBookings() == 0
	})
	for _, r := range []*replica{a, b} {
		for _, id := range r.p.OpenBookings() {
			r.p.Release(id)
		}
		for id, l := range load(r.p) {
			if l != ([3]int64{}) {
				t.Errorf("%s: %s holds %v after the leases and every local release, want nothing", r.bus.Replica(), id, l)
			}
		}
	}
}

// TestResyncIsRateLimited: a burst of hellos (a flapping or hostile peer) costs one resync at
// once and one when the interval ends, not one each.
func TestResyncIsRateLimited(t *testing.T) {
	s := startServer(t)
	a := newReplica(t, s.URL(), "a", 3*time.Second, nil, testToken)
	waitFor(t, 10*time.Second, "a connected", connected(a))
	bookMix(t, a, "r", 10)
	nc, err := nats.Connect(s.URL(), nats.Token(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const hellos = 50
	for i := range hellos {
		m := message{replica: "ghost", incarnation: uint64(i), d: pool.PeerDelta{Kind: kindHello, Lease: time.Second}}
		must(t, nc.Publish(DefaultSubject, encode(nil, &m)))
	}
	must(t, nc.Flush())
	waitFor(t, 5*time.Second, "every hello counted", func() bool { return testutil.ToFloat64(a.m.Joins) == hellos })
	// The connect resync just ran, so the burst waits for the interval, then costs one.
	waitFor(t, 5*time.Second, "the deferred resync", func() bool {
		return testutil.ToFloat64(a.m.Resyncs.WithLabelValues("peer_join")) >= 1
	})
	time.Sleep(3 * DefaultResyncInterval)
	if got := testutil.ToFloat64(a.m.Resyncs.WithLabelValues("peer_join")); got > 2 {
		t.Errorf("%v resyncs for a burst of %d hellos, want at most 2", got, hellos)
	}
	if got, want := testutil.ToFloat64(a.m.ResyncBookings), testutil.ToFloat64(a.m.Resyncs.WithLabelValues("peer_join"))*10; got != want {
		t.Errorf("%v bookings re-sent, want %v (10 per resync; the connect resync had none)", got, want)
	}
}
