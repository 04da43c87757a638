package pool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fakeResolver answers LookupHost from a table that tests change between rounds.
type fakeResolver struct {
	mu    sync.Mutex // guards addrs, calls
	addrs map[string][]string
	calls int
}

func (r *fakeResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.addrs == nil {
		r.addrs = map[string][]string{}
	}
	r.addrs[host] = addrs
}

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	a, ok := r.addrs[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return append([]string(nil), a...), nil
}

// resolve performs one round of p's DNS lookups with r and applies it, as the shell
// (pool/probe) does.
func resolve(ctx context.Context, p *Pool, r *fakeResolver) error {
	ls := p.Lookups()
	for i := range ls {
		ls[i].Addrs, ls[i].Err = r.LookupHost(ctx, ls[i].Host)
	}
	return p.ApplyLookups(ls)
}

func (p *Pool) byIDForTest(id string) *worker {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byID[id]
}

type fixture struct {
	p     *Pool
	m     *Metrics
	reg   *prometheus.Registry
	clock *fakeClock
	res   *fakeResolver
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), clock: &fakeClock{now: t0}, res: &fakeResolver{}}
	f.m = NewMetrics(f.reg)
	p, err := New(cfg, Options{Metrics: f.m, Clock: f.clock})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.p = p
	return f
}

// basic is one decode worker d0 (kvcap 1000) and one prefill worker p0.
func basic() Config {
	return Config{Workers: []WorkerConfig{
		{Name: "d0", Role: RoleDecode, Endpoint: "10.0.0.21:8000", NumGPUBlocks: 1000},
		{Name: "p0", Role: RolePrefill, Endpoint: "10.0.0.11:8000", MaxNumBatchedTokens: 8192},
	}}
}

func (f *fixture) info(t *testing.T, id string) WorkerInfo {
	t.Helper()
	for _, w := range f.p.Workers() {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("worker %s not discovered", id)
	return WorkerInfo{}
}

// load is the (apt, adb, requests) triple of a worker.
type load struct{ APT, ADB, Requests int64 }

func (f *fixture) load(t *testing.T, id string) load {
	w := f.info(t, id)
	return load{w.ActivePrefillTokens, w.ActiveDecodeBlocks, w.ActiveRequests}
}

func keys(base uint64, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = base<<32 | uint64(i)
	}
	return k
}
