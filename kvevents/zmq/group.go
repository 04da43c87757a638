package kvzmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
)

// Group runs one Subscriber per stream, each on its own goroutine, so a slow or dead worker
// never blocks the others. Streams are added and removed while it runs (discovery). All methods
// are safe for concurrent use.
type Group struct {
	cfg Config
	ix  *kvindex.Index
	lim kvevents.Limits

	mu      sync.Mutex // guards streams, closed
	streams map[streamKey]*member
	closed  bool
	// subs is a copy of streams' subscribers, replaced (never modified) under mu whenever
	// streams changes, so that Subscriber, which the router calls for every worker of every
	// decision, takes no lock.
	subs atomic.Pointer[map[streamKey]*Subscriber]
}

type streamKey struct {
	worker string
	rank   int64
}

type member struct {
	sub    *Subscriber
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream's goroutine has exited
}

// NewGroup returns an empty group whose streams apply their batches to ix.
func NewGroup(cfg Config, ix *kvindex.Index, lim kvevents.Limits) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ix == nil {
		return nil, errors.New("kvzmq: new group: nil index")
	}
	g := &Group{cfg: cfg.withDefaults(), ix: ix, lim: lim, streams: make(map[streamKey]*member)}
	g.subs.Store(&map[streamKey]*Subscriber{})
	return g, nil
}

// publishSubsLocked replaces subs with the subscribers of streams; g.mu is held.
func (g *Group) publishSubsLocked() {
	subs := make(map[streamKey]*Subscriber, len(g.streams))
	for k, m := range g.streams {
		subs[k] = m.sub
	}
	g.subs.Store(&subs)
}

// Add starts ingesting stream sc on a goroutine the group owns. It returns once the stream's
// sockets are set up, with the setup error if any; ctx bounds only that wait (a stream whose
// setup did not finish in time is stopped). The stream then runs until Remove or Close.
func (g *Group) Add(ctx context.Context, sc StreamConfig) error {
	key := streamKey{sc.Worker, sc.Rank}
	applier := kvevents.NewApplier(g.ix, kvevents.IndexWorkerID(sc.Worker, sc.Rank), sc.Rank, g.cfg.Metrics.Metrics, g.lim)
	sub, err := NewSubscriber(g.cfg, sc, applier)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &member{sub: sub, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		cancel()
		return fmt.Errorf("kvzmq: add stream worker=%s rank=%d: group closed", sc.Worker, sc.Rank)
	case g.streams[key] != nil:
		g.mu.Unlock()
		cancel()
		return fmt.Errorf("kvzmq: add stream worker=%s rank=%d: already running", sc.Worker, sc.Rank)
	}
	g.streams[key] = m
	g.publishSubsLocked()
	g.mu.Unlock()

	ready := make(chan error, 1)
	go func() {
		defer close(m.done)
		if err := sub.run(runCtx, ready); err != nil {
			g.cfg.Logger.Error("stream stopped", "worker", sc.Worker, "endpoint", sc.Endpoint, "err", err)
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			g.drop(key, m)
			<-m.done
		}
		return err
	case <-ctx.Done():
		g.drop(key, m)
		<-m.done
		return fmt.Errorf("kvzmq: add stream worker=%s rank=%d: %w", sc.Worker, sc.Rank, ctx.Err())
	}
}

func (g *Group) drop(key streamKey, m *member) {
	g.mu.Lock()
	if g.streams[key] == m {
		delete(g.streams, key)
		g.publishSubsLocked()
	}
	g.mu.Unlock()
	m.cancel()
}

// Remove stops the stream (worker, rank), waits for its goroutine (bounded by ctx), and drops
// its index entries (a worker that leaves discovery, §1.6).
func (g *Group) Remove(ctx context.Context, worker string, rank int64) error {
	key := streamKey{worker, rank}
	g.mu.Lock()
	m := g.streams[key]
	g.mu.Unlock()
	if m == nil {
		return fmt.Errorf("kvzmq: remove stream worker=%s rank=%d: not running", worker, rank)
	}
	g.drop(key, m)
	select {
	case <-m.done:
	case <-ctx.Done():
		return fmt.Errorf("kvzmq: remove stream worker=%s rank=%d: %w", worker, rank, ctx.Err())
	}
	g.ix.RemoveWorker(kvevents.IndexWorkerID(worker, rank))
	g.cfg.Metrics.Clears.WithLabelValues(string(kvevents.IndexWorkerID(worker, rank)), string(kvevents.ClearRemoved)).Inc()
	return nil
}

// Subscriber returns the running subscriber of (worker, rank), or nil. It takes no lock.
func (g *Group) Subscriber(worker string, rank int64) *Subscriber {
	return (*g.subs.Load())[streamKey{worker, rank}]
}

// Status returns a snapshot of every stream, sorted by worker and rank.
func (g *Group) Status() []StreamStatus {
	g.mu.Lock()
	out := make([]StreamStatus, 0, len(g.streams))
	for _, m := range g.streams {
		out = append(out, m.sub.Status())
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b StreamStatus) int {
		if c := strings.Compare(a.Worker, b.Worker); c != 0 {
			return c
		}
		return int(a.Rank - b.Rank)
	})
	return out
}

// Close stops every stream and waits for their goroutines. It may be called more than once.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	ms := make([]*member, 0, len(g.streams))
	for k, m := range g.streams {
		ms = append(ms, m)
		delete(g.streams, k)
	}
	g.publishSubsLocked()
	g.mu.Unlock()
	for _, m := range ms {
		m.cancel()
	}
	for _, m := range ms {
		<-m.done
	}
}
