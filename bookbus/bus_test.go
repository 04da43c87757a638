package bookbus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/internal/natstest"
	"github.com/condisagg/condisagg/pool"
)

const (
	testToken = "s3cret-token"
	model     = "m"
)

func startServer(t *testing.T) *natstest.Server {
	t.Helper()
	s, err := natstest.Start(natstest.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// replica is one router replica's pool and bus.
type replica struct {
	p   *pool.Pool
	bus *Bus
	m   *Metrics
	pm  *pool.Metrics
	// dropRelease, when set, makes OnLocal lose the releases of these requests (a lost delta).
	mu          sync.Mutex // guards dropRelease
	dropRelease map[string]bool
}

type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func workers() pool.Config {
	return pool.Config{Workers: []pool.WorkerConfig{
		{Name: "d0", Role: pool.RoleDecode, Endpoint: "10.0.0.21:8000", NumGPUBlocks: 1000},
		{Name: "p0", Role: pool.RolePrefill, Endpoint: "10.0.0.11:8000", MaxNumBatchedTokens: 8192},
	}}
}

// newReplica builds a replica named id on the server at url and runs its bus until the test
// ends. clk nil is the system clock.
func newReplica(t *testing.T, url, id string, lease time.Duration, clk pool.Clock, token string) *replica {
	t.Helper()
	r := &replica{m: NewMetrics(prometheus.NewRegistry()), pm: pool.NewMetrics(prometheus.NewRegistry()), dropRelease: map[string]bool{}}
	var err error
	r.bus, err = New(Config{URL: url, Replica: id, Lease: lease, Token: token, Metrics: r.m, ReconnectWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	local := r.bus.Local(model)
	r.p, err = pool.New(workers(), pool.Options{Metrics: r.pm, Clock: clk, OnLocal: func(c pool.LocalChange) {
		r.mu.Lock()
		drop := c.Kind == pool.LocalRelease && r.dropRelease[c.RequestID]
		r.mu.Unlock()
		if !drop {
			local(c)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.bus.Attach(model, r.p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.bus.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// waitFor polls cond until it holds or d passes; it returns how long it took. The bus runs on
// real sockets and timers, so its effects are awaited with a deadline.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return time.Since(start)
}

func remote(id string) pool.Booking {
	return pool.Booking{RequestID: id, Mode: pool.ModeRemote, Decode: "d0", Prefill: "p0", ISL: 64, PrefillTokens: 64}
}

func bypass(id string, n int) pool.Booking {
	k := make([]uint64, n)
	for i := range k {
		k[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	return pool.Booking{RequestID: id, Mode: pool.ModeBypass, Decode: "d0", Keys: k, ISL: 16 * n, PrefillTokens: int64(16 * n)}
}

func decodeLoad(p *pool.Pool) (blocks, requests int64) {
	for _, w := range p.Workers() {
		if w.ID == "d0" {
			return w.ActiveDecodeBlocks, w.ActiveRequests
		}
	}
	return -1, -1
}

func connected(rs ...*replica) func() bool {
	return func() bool {
		for _, r := range rs {
			if !r.bus.Connected() {
				return false
			}
		}
		return true
	}
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestDeltasPropagate: a booking and its release on one replica reach the other's pool over a
// real NATS server in milliseconds, with the same load as a local booking (shared prefixes
// counted once across replicas).
func TestDeltasPropagate(t *testing.T) {
	s := startServer(t)
	a := newReplica(t, s.URL(), "a", 5*time.Second, nil, testToken)
	b := newReplica(t, s.URL(), "b", 5*time.Second, nil, testToken)
	waitFor(t, 10*time.Second, "both connected", connected(a, b))
	if got := testutil.ToFloat64(a.m.Connected); got != 1 {
		t.Fatalf("condisagg_bus_connected %v, want 1", got)
	}
	// The same prefix booked on both replicas counts once on d0 in each.
	must(t, a.p.Book(bypass("x", 40)))
	must(t, b.p.Book(bypass("y", 40)))
	waitFor(t, 5*time.Second, "each sees the other's bypass", func() bool {
		_, ra := decodeLoad(a.p)
		_, rb := decodeLoad(b.p)
		return ra == 2 && rb == 2
	})
	for _, r := range []*replica{a, b} {
		if blocks, _ := decodeLoad(r.p); blocks != 40 {
			t.Errorf("d0 holds %d decode blocks, want 40 (one shared prefix)", blocks)
		}
	}
	a.p.Release("x")
	b.p.Release("y")
	waitFor(t, 5*time.Second, "releases", func() bool { return a.p.PeerBookings() == 0 && b.p.PeerBookings() == 0 })

	const n = 300
	var book, release []time.Duration
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		start := time.Now()
		must(t, a.p.Book(remote(id)))
		waitFor(t, 5*time.Second, "book propagates", func() bool { return b.p.PeerBookings() == 1 })
		book = append(book, time.Since(start))
		start = time.Now()
		a.p.Release(id)
		waitFor(t, 5*time.Second, "release propagates", func() bool { return b.p.PeerBookings() == 0 })
		release = append(release, time.Since(start))
	}
	t.Logf("propagation over NATS on 127.0.0.1, %d deltas each: book p50 %v p99 %v, release p50 %v p99 %v",
		n, percentile(book, 0.5), percentile(book, 0.99), percentile(release, 0.5), percentile(release, 0.99))
	// Milliseconds, with room for a loaded 2-core machine running -race.
	if p99 := percentile(book, 0.99); p99 > 250*time.Millisecond {
		t.Errorf("book propagation p99 %v, want <= 250ms", p99)
	}
	if blocks, reqs := decodeLoad(b.p); blocks != 0 || reqs != 0 {
		t.Errorf("b's d0 load %d blocks %d requests after every release, want 0", blocks, reqs)
	}
	if got := testutil.ToFloat64(a.m.Sent); got < 2*n {
		t.Errorf("a sent %v deltas, want >= %d", got, 2*n)
	}
	if got := testutil.ToFloat64(b.m.Received); got < 2*n {
		t.Errorf("b received %v deltas, want >= %d", got, 2*n)
	}
}

// TestLostBusDegradesAndReconnects: when the server goes, each replica reports the bus down,
// books locally (its deltas dropped and counted), and drops the peer's bookings when their
// lease runs out; when the server is back, both reconnect and share again.
func TestLostBusDegradesAndReconnects(t *testing.T) {
	s := startServer(t)
	const lease = 600 * time.Millisecond
	a := newReplica(t, s.URL(), "a", lease, nil, testToken)
	b := newReplica(t, s.URL(), "b", lease, nil, testToken)
	waitFor(t, 10*time.Second, "both connected", connected(a, b))
	must(t, a.p.Book(remote("long")))
	waitFor(t, 5*time.Second, "b sees a's booking", func() bool { return b.p.PeerBookings() == 1 })
	// Heartbeats (every lease/3) keep a request that outlives its lease: wait for six of them.
	sent := testutil.ToFloat64(a.m.Sent)
	waitFor(t, 10*lease, "six heartbeats", func() bool { return testutil.ToFloat64(a.m.Sent) >= sent+6 })
	if n := b.p.PeerBookings(); n != 1 {
		t.Fatalf("a's open booking was dropped after 2 leases despite heartbeats (%d held)", n)
	}

	opts := s.Options()
	s.Stop()
	waitFor(t, 10*time.Second, "a sees the bus down", func() bool { return !a.bus.Connected() })
	if got := testutil.ToFloat64(a.m.Connected); got != 0 {
		t.Errorf("condisagg_bus_connected %v while down, want 0", got)
	}
	before := testutil.ToFloat64(a.m.Dropped.WithLabelValues("disconnected"))
	must(t, a.p.Book(remote("while-down")))
	if got := testutil.ToFloat64(a.m.Dropped.WithLabelValues("disconnected")); got != before+1 {
		t.Errorf("dropped{disconnected} %v, want %v", got, before+1)
	}
	if _, reqs := decodeLoad(a.p); reqs != 2 {
		t.Errorf("a books locally while down: %d requests on d0, want 2", reqs)
	}
	waitFor(t, 10*time.Second, "b drops a's booking after its lease", func() bool { return b.p.PeerBookings() == 0 })

	s2, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Stop)
	took := waitFor(t, 10*time.Second, "both reconnect", connected(a, b))
	t.Logf("reconnected %v after the server came back", took)
	if got := testutil.ToFloat64(a.m.Reconnects); got < 1 {
		t.Errorf("reconnects %v, want >= 1", got)
	}
	must(t, a.p.Book(remote("after")))
	waitFor(t, 5*time.Second, "a booking after the reconnect propagates", func() bool { return b.p.PeerBookings() >= 1 })
}

// TestLostReleaseHealsAtTheNextHeartbeat: a release the bus lost leaves the peer holding the
// booking only until the next complete heartbeat (Lease/3), not for the lease.
func TestLostReleaseHealsAtTheNextHeartbeat(t *testing.T) {
	s := startServer(t)
	const lease = 3 * time.Second
	a := newReplica(t, s.URL(), "a", lease, nil, testToken)
	b := newReplica(t, s.URL(), "b", lease, nil, testToken)
	waitFor(t, 10*time.Second, "both connected", connected(a, b))
	a.mu.Lock()
	a.dropRelease["lost"] = true
	a.mu.Unlock()
	must(t, a.p.Book(remote("lost")))
	must(t, a.p.Book(remote("kept")))
	waitFor(t, 5*time.Second, "b sees both", func() bool { return b.p.PeerBookings() == 2 })
	a.p.Release("lost")
	took := waitFor(t, lease, "b drops the booking whose release was lost", func() bool { return b.p.PeerBookings() == 1 })
	t.Logf("a lost release healed after %v (heartbeat every %v)", took, lease/3)
}

// TestRawPeerDeltas: deltas as another process sends them — duplicated, out of order, from a
// peer that then dies without a word — never leave load behind, on a receiver whose clock is
// an hour off the sender's.
func TestRawPeerDeltas(t *testing.T) {
	s := startServer(t)
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} // far from the sender's wall clock
	b := newReplica(t, s.URL(), "b", time.Second, clk, testToken)
	nc, err := nats.Connect(s.URL(), nats.Token(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitFor(t, 10*time.Second, "b connected", connected(b))
	send := func(d pool.PeerDelta) {
		t.Helper()
		m := message{replica: "ghost", incarnation: 7, model: model, d: d}
		d.Replica = "ghost"
		if err := nc.Publish(DefaultSubject, encode(nil, &m)); err != nil {
			t.Fatal(err)
		}
		must(t, nc.Flush())
	}
	const lease = 10 * time.Second
	book := pool.PeerDelta{Kind: pool.PeerBook, Booking: bypass("r1", 8), Lease: lease}
	send(book)
	send(book)                                                                     // duplicate
	send(pool.PeerDelta{Kind: pool.PeerRelease, RequestID: "r2", Lease: lease})    // release first...
	send(pool.PeerDelta{Kind: pool.PeerBook, Booking: remote("r2"), Lease: lease}) // ...then its booking
	send(pool.PeerDelta{Kind: pool.PeerBook, Booking: remote("r3"), Lease: lease})
	waitFor(t, 5*time.Second, "b applies the ghost's deltas", func() bool { return testutil.ToFloat64(b.m.Received) == 5 })
	if n := b.p.PeerBookings(); n != 2 {
		t.Fatalf("%d peer bookings, want 2 (r1 once, r2 released before it came, r3)", n)
	}
	if blocks, reqs := decodeLoad(b.p); blocks != 8+4 || reqs != 2 {
		t.Errorf("d0 load %d blocks %d requests, want 12 and 2", blocks, reqs)
	}
	// The ghost dies: the lease runs on b's clock, whatever the sender's says.
	clk.Advance(lease - time.Millisecond)
	b.p.ExpirePeers()
	if n := b.p.PeerBookings(); n != 2 {
		t.Fatalf("%d peer bookings before the lease ran out, want 2", n)
	}
	clk.Advance(2 * time.Millisecond)
	b.p.ExpirePeers()
	if blocks, reqs := decodeLoad(b.p); blocks != 0 || reqs != 0 || b.p.PeerBookings() != 0 {
		t.Errorf("after the lease: d0 %d blocks %d requests, %d peer bookings; want none", blocks, reqs, b.p.PeerBookings())
	}

	// A namesake of b (another process with b's id) is ignored and counted.
	m := message{replica: "b", incarnation: 99, model: model, d: pool.PeerDelta{Kind: pool.PeerBook, Booking: remote("n"), Lease: lease}}
	must(t, nc.Publish(DefaultSubject, encode(nil, &m)))
	must(t, nc.Publish(DefaultSubject, []byte("not a delta")))
	m = message{replica: "ghost", incarnation: 7, model: "other-model", d: pool.PeerDelta{Kind: pool.PeerGone}}
	must(t, nc.Publish(DefaultSubject, encode(nil, &m)))
	must(t, nc.Flush())
	waitFor(t, 5*time.Second, "refusals counted", func() bool {
		return testutil.ToFloat64(b.m.Dropped.WithLabelValues("duplicate_replica")) == 1 &&
			testutil.ToFloat64(b.m.Dropped.WithLabelValues("decode_error")) == 1 &&
			testutil.ToFloat64(b.m.Dropped.WithLabelValues("unknown_model")) == 1
	})
	if n := b.p.PeerBookings(); n != 0 {
		t.Errorf("%d peer bookings from refused messages", n)
	}
}

// TestGoneAtStop: a replica that stops tells its peers, which drop its bookings at once.
func TestGoneAtStop(t *testing.T) {
	s := startServer(t)
	b := newReplica(t, s.URL(), "b", time.Minute, nil, testToken)
	am := NewMetrics(prometheus.NewRegistry())
	abus, err := New(Config{URL: s.URL(), Replica: "a", Token: testToken, Metrics: am, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := pool.New(workers(), pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry()), OnLocal: abus.Local(model)})
	if err != nil {
		t.Fatal(err)
	}
	abus.Attach(model, ap)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- abus.Run(ctx) }()
	waitFor(t, 10*time.Second, "connected", func() bool { return abus.Connected() && b.bus.Connected() })
	must(t, ap.Book(remote("r1")))
	waitFor(t, 5*time.Second, "b sees a's booking", func() bool { return b.p.PeerBookings() == 1 })
	cancel()
	must(t, <-done)
	took := waitFor(t, 5*time.Second, "b drops a's bookings when a stops", func() bool { return b.p.PeerBookings() == 0 })
	t.Logf("a's bookings dropped %v after its stop (lease %v)", took, time.Minute)
	if got := testutil.ToFloat64(am.Connected); got != 0 {
		t.Errorf("condisagg_bus_connected %v after Run returned, want 0", got)
	}
}

// TestBusIsNotOpen: the server requires the token; a bus with a wrong one never connects and
// says so, and books locally.
func TestBusIsNotOpen(t *testing.T) {
	s := startServer(t)
	if nc, err := nats.Connect(s.URL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	}
	bad := newReplica(t, s.URL(), "bad", time.Second, nil, "wrong")
	good := newReplica(t, s.URL(), "good", time.Second, nil, testToken)
	waitFor(t, 10*time.Second, "good connects", connected(good))
	if bad.bus.Connected() {
		t.Fatal("a bus with a wrong token is connected")
	}
	must(t, good.p.Book(remote("r1")))
	must(t, bad.p.Book(remote("r2")))
	if _, reqs := decodeLoad(bad.p); reqs != 1 {
		t.Errorf("the cut-off replica holds %d requests, want its own 1", reqs)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Replica: "a", Metrics: m}, "url: empty"},
		{Config{URL: "nats://u:pw@127.0.0.1:4222", Replica: "a", Metrics: m}, "url: nats://127.0.0.1:4222 carries credentials"},
		{Config{URL: "nats://127.0.0.1:4222", Metrics: m}, "replica: empty"},
		{Config{URL: "nats://127.0.0.1:4222", Replica: "a", Lease: time.Hour, Metrics: m}, "lease: 1h0m0s is outside"},
		{Config{URL: "nats://127.0.0.1:4222", Replica: "a", CertFile: "c.pem", Metrics: m}, "cert_file and key_file"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error with %q", c.cfg, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestTLS: over a TLS-only server, a bus that trusts its CA (CAFile) connects and shares; one
// that does not stays down and books locally.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, serverTLS := testCA(t, dir)
	s, err := natstest.Start(natstest.Options{Token: testToken, TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	newTLS := func(id, ca string) *replica {
		r := &replica{m: NewMetrics(prometheus.NewRegistry()), pm: pool.NewMetrics(prometheus.NewRegistry()), dropRelease: map[string]bool{}}
		r.bus, err = New(Config{URL: s.URL(), Replica: id, Token: testToken, CAFile: ca, Metrics: r.m, ReconnectWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		r.p, err = pool.New(workers(), pool.Options{Metrics: r.pm, OnLocal: r.bus.Local(model)})
		if err != nil {
			t.Fatal(err)
		}
		r.bus.Attach(model, r.p)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.bus.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return r
	}
	a, b := newTLS("a", caFile), newTLS("b", caFile)
	untrusting := newTLS("c", "")
	waitFor(t, 10*time.Second, "a and b connect over TLS", connected(a, b))
	must(t, a.p.Book(remote("r1")))
	waitFor(t, 5*time.Second, "b sees a's booking over TLS", func() bool { return b.p.PeerBookings() == 1 })
	// It retries every 50 ms: half a second is ten handshakes refused.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if untrusting.bus.Connected() || untrusting.p.PeerBookings() != 0 {
			t.Fatal("a bus that does not trust the server's CA connected")
		}
	}
}

// testCA writes a fresh CA's certificate to dir and returns its path and a server TLS config
// for 127.0.0.1 signed by it.
func testCA(t *testing.T, dir string) (string, *tls.Config) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bookbus test CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}}
}
