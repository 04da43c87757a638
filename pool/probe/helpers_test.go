package probe

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/pool"
)

// run starts the shell of p under a context derived from ctx and returns the function that
// cancels it and waits until Run has returned (safe to call more than once).
func run(ctx context.Context, p *pool.Pool, opts Options) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		New(p, opts).Run(ctx)
		close(done)
	}()
	return func() { cancel(); <-done }
}

// resolverFunc answers LookupHost with a function.
type resolverFunc func(host string) ([]string, error)

func (f resolverFunc) LookupHost(_ context.Context, host string) ([]string, error) { return f(host) }

// info returns what p says of worker id, and fails t if p has no such worker.
func info(t *testing.T, p *pool.Pool, id string) pool.WorkerInfo {
	t.Helper()
	for _, w := range p.Workers() {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("worker %s not discovered", id)
	return pool.WorkerInfo{}
}

func ids(ws []pool.WorkerInfo) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}
