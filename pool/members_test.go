package pool

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func member(name, ip string, role Role) Member {
	ep := ip + ":8000"
	return Member{ID: name + "@" + ep, Worker: WorkerConfig{Name: name, Role: role, Endpoint: ep, KVEvents: "tcp://" + ip + ":5557"}}
}

// TestSetMembers checks the discovery-source path (README "Discovery sources"), one rule per
// step: M1 members join through OnChange like resolved addresses; M2 a vanished member leaves
// with its bookings; M3 a changed description under the same id leaves and joins again; M4
// invalid members, ids or endpoints taken by the config or another source are refused and the
// rest applied; M5 Resolve keeps the members and SetMembers keeps the config's workers; M6 nil
// removes the source.
func TestSetMembers(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	f := &fixture{reg: prometheus.NewRegistry(), clock: &fakeClock{now: t0}, res: &fakeResolver{}}
	f.m = NewMetrics(f.reg)
	p, err := New(basic(), Options{Metrics: f.m, Clock: f.clock, OnChange: func(added, removed []WorkerInfo) {
		mu.Lock()
		defer mu.Unlock()
		a, r := ids(added), ids(removed)
		slices.Sort(r)
		changes = append(changes, "+"+strings.Join(a, ",")+" -"+strings.Join(r, ","))
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	set := func(src string, ms ...Member) ([]Member, error) { t.Helper(); return p.SetMembers(src, ms) }

	// M1: two decode servers, one with two data-parallel ranks.
	dp := member("dec", "10.1.0.2", RoleDecode)
	dp.Worker.DataParallelSize = 2
	if acc, err := set("kubernetes", member("dec", "10.1.0.1", RoleDecode), dp); err != nil || len(acc) != 2 {
		t.Fatalf("M1: SetMembers = %d accepted, %v", len(acc), err)
	}
	want := []string{"d0", "dec@10.1.0.1:8000", "dec@10.1.0.2:8000", "dec@10.1.0.2:8000/dp1", "p0"}
	if got := sorted(ids(p.Workers())); !slices.Equal(got, want) {
		t.Fatalf("M1: workers = %v, want %v", got, want)
	}
	if w := f.info(t, "dec@10.1.0.2:8000/dp1"); w.KVEvents != "tcp://10.1.0.2:5558" || w.Engine != "dec@10.1.0.2:8000" || w.Rank != 1 {
		t.Fatalf("M1: rank 1 = %+v, want events on port + 1", w)
	}
	// M2: the first server leaves with its booking.
	if err := p.Book(Booking{RequestID: "r", Mode: ModeBypass, Decode: "dec@10.1.0.1:8000", ISL: 32}); err != nil {
		t.Fatal(err)
	}
	if _, err := set("kubernetes", dp); err != nil {
		t.Fatal(err)
	}
	if err := p.Book(Booking{RequestID: "r2", Mode: ModeBypass, Decode: "dec@10.1.0.1:8000", ISL: 16}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("M2: booking a departed member = %v, want ErrUnknownWorker", err)
	}
	if !p.Release("r") {
		t.Fatal("M2: releasing the departed member's booking")
	}
	// M3: the same id with another event port is replaced.
	dp2 := dp
	dp2.Worker.KVEvents = "tcp://10.1.0.2:6000"
	if _, err := set("kubernetes", dp2); err != nil {
		t.Fatal(err)
	}
	if w := f.info(t, "dec@10.1.0.2:8000"); w.KVEvents != "tcp://10.1.0.2:6000" {
		t.Fatalf("M3: events = %s, want the new port", w.KVEvents)
	}
	// M4: refusals.
	bad := member("x", "10.1.0.9", "both")
	dns := member("dns", "10.1.0.8", RoleDecode)
	dns.Worker.Endpoint = "decode.svc:8000"
	slash := member("y", "10.1.0.7", RoleDecode)
	slash.ID = "y/dp1"
	taken := member("z", "10.0.0.21", RoleDecode) // d0's endpoint
	acc, err := set("kubernetes", dp2, bad, dns, slash, taken)
	if len(acc) != 1 || err == nil {
		t.Fatalf("M4: accepted %d, err %v; want only the valid member", len(acc), err)
	}
	for _, s := range []string{`worker=x@10.1.0.9:8000: role: "both" must be one of prefill, decode`,
		`worker=dns@10.1.0.8:8000: endpoint: "decode.svc:8000" must be a literal ip:port`,
		`worker=y/dp1: id "y/dp1" must be non-empty without '/' or spaces`,
		`worker=z@10.0.0.21:8000: endpoint 10.0.0.21:8000 is already a worker of config worker d0`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("M4: error lacks %q:\n%v", s, err)
		}
	}
	if acc, err := set("other", member("o", "10.1.0.2", RolePrefill)); len(acc) != 0 || err == nil ||
		!strings.Contains(err.Error(), "already a worker of discovery source kubernetes") {
		t.Fatalf("M4: another source on a taken endpoint: %d accepted, %v", len(acc), err)
	}
	// M5: a resolve round keeps the members.
	if err := resolve(context.Background(), p, f.res); err != nil {
		t.Fatal(err)
	}
	want = []string{"d0", "dec@10.1.0.2:8000", "dec@10.1.0.2:8000/dp1", "p0"}
	if got := sorted(ids(p.Workers())); !slices.Equal(got, want) {
		t.Fatalf("M5: workers = %v, want %v", got, want)
	}
	if got := p.Members("kubernetes"); !slices.Equal(got, []string{"dec@10.1.0.2:8000"}) {
		t.Fatalf("M5: Members = %v", got)
	}
	// M6: nil removes the source.
	if _, err := set("kubernetes"); err != nil {
		t.Fatal(err)
	}
	if got := sorted(ids(p.Workers())); !slices.Equal(got, []string{"d0", "p0"}) {
		t.Fatalf("M6: workers = %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	wantChanges := []string{
		"+d0,p0 -",
		"+dec@10.1.0.1:8000,dec@10.1.0.2:8000,dec@10.1.0.2:8000/dp1 -",
		"+ -dec@10.1.0.1:8000",
		"+dec@10.1.0.2:8000,dec@10.1.0.2:8000/dp1 -dec@10.1.0.2:8000,dec@10.1.0.2:8000/dp1",
		"+ -dec@10.1.0.2:8000,dec@10.1.0.2:8000/dp1",
	}
	if !slices.Equal(changes, wantChanges) {
		t.Fatalf("OnChange calls:\n got %q\nwant %q", changes, wantChanges)
	}
}

// TestSetMembersBounded: a source never registers more than maxMembers workers.
func TestSetMembersBounded(t *testing.T) {
	f := newFixture(t, basic())
	var ms []Member
	for i := range maxMembers + 10 {
		ms = append(ms, member("d", "10.2."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), RoleDecode))
	}
	acc, err := f.p.SetMembers("kubernetes", ms)
	if len(acc) != maxMembers || err == nil || !strings.Contains(err.Error(), "over the limit of 4096 workers per source") {
		t.Fatalf("accepted %d of %d, err %v", len(acc), len(ms), err)
	}
	if got := len(f.p.Workers()); got != maxMembers+2 {
		t.Fatalf("workers = %d, want %d", got, maxMembers+2)
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }
