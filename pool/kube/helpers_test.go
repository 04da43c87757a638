package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/pool"
)

// newPool is a pool with no static worker and probing off (the test addresses serve nothing).
func newPool(t *testing.T) *pool.Pool {
	t.Helper()
	p, err := pool.New(pool.Config{HealthInterval: -1}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitWorkers waits until p's worker ids (sorted) equal want, on the pool's Changed channel,
// for at most d; it fails the test with the last ids otherwise.
func waitWorkers(t *testing.T, p *pool.Pool, d time.Duration, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.After(d)
	for {
		ch := p.Changed()
		var got []string
		for _, w := range p.Workers() {
			got = append(got, w.ID)
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("pool workers = %v after %s; want %v", got, d, want)
		}
	}
}

// runWatcher runs w until the test ends and checks that Run returned nil.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}
