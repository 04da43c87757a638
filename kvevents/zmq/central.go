package kvzmq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
)

// Central ingests several streams through one bound SUB socket: the centralized topology of
// vllm-kv-events.md §1.1, where every engine's PUB connects to condisagg and the streams are
// told apart by their topic (which must be unique per engine). Each topic has its own sequence
// machine, applier and replay endpoint; all sockets belong to the goroutine running Run.
//
// Reconnects cannot be tied to a topic: every new ZMTP session makes each stream with a replay
// endpoint run the reconnect check (which clears nothing when the digest matches); streams
// without replay rely on the seq rules only. The stream set is fixed at construction.
type Central struct {
	cfg      Config
	endpoint string
	subs     []*Subscriber
	byKey    map[streamKey]*Subscriber // fixed at construction: Subscriber reads it lock-free

	mu    sync.Mutex // guards bound
	bound string
	ready chan struct{} // closed once the SUB is bound (or failed to bind)
}

// CentralStream is one stream of a Central that applies to its own index (one per served
// model), with its own metrics (nil: the Central's).
type CentralStream struct {
	StreamConfig
	Index   *kvindex.Index
	Metrics *Metrics
}

// NewCentral validates the configs and returns a centralized subscriber that binds endpoint and
// applies each stream's batches to ix. Every stream needs a unique, non-empty Topic; its
// Endpoint is ignored (set to endpoint).
func NewCentral(cfg Config, endpoint string, streams []StreamConfig, ix *kvindex.Index, lim kvevents.Limits) (*Central, error) {
	cs := make([]CentralStream, len(streams))
	for i, sc := range streams {
		cs[i] = CentralStream{StreamConfig: sc, Index: ix}
	}
	if ix == nil {
		return nil, errors.Join(errors.New("kvzmq: central index: nil is not allowed"), cfg.Validate())
	}
	return NewCentralStreams(cfg, endpoint, cs, lim)
}

// NewCentralStreams is NewCentral with an index (and metrics) per stream: several models'
// engines can publish to one bound endpoint. cfg.Metrics counts the messages of no configured
// topic.
func NewCentralStreams(cfg Config, endpoint string, streams []CentralStream, lim kvevents.Limits) (*Central, error) {
	// The config is checked before any Applier is built: NewApplier needs the metrics.
	cfgErr := cfg.Validate()
	errs := []error{cfgErr}
	if endpoint == "" {
		errs = append(errs, errors.New("kvzmq: central endpoint: \"\" must not be empty"))
	}
	if len(streams) == 0 {
		errs = append(errs, errors.New("kvzmq: central streams: none configured"))
	}
	topics := make(map[string]bool)
	c := &Central{cfg: cfg.withDefaults(), endpoint: endpoint, ready: make(chan struct{}), byKey: make(map[streamKey]*Subscriber)}
	for _, cs := range streams {
		sc := cs.StreamConfig
		sc.Endpoint = endpoint
		if sc.Topic == "" || topics[sc.Topic] {
			errs = append(errs, fmt.Errorf("kvzmq: central stream %s topic: %q must be non-empty and unique", sc.Worker, sc.Topic))
			continue
		}
		topics[sc.Topic] = true
		if cs.Index == nil {
			errs = append(errs, fmt.Errorf("kvzmq: central stream %s index: nil is not allowed", sc.Worker))
			continue
		}
		scfg := cfg
		if cs.Metrics != nil {
			scfg.Metrics = cs.Metrics
		}
		if scfg.Metrics == nil || cfgErr != nil {
			errs = append(errs, sc.Validate())
			continue
		}
		if c.byKey[streamKey{sc.Worker, sc.Rank}] != nil {
			errs = append(errs, fmt.Errorf("kvzmq: central stream %s rank %d: configured twice", sc.Worker, sc.Rank))
			continue
		}
		a := kvevents.NewApplier(cs.Index, kvevents.IndexWorkerID(sc.Worker, sc.Rank), sc.Rank, scfg.Metrics.Metrics, lim)
		s, err := NewSubscriber(scfg, sc, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.subs = append(c.subs, s)
		c.byKey[streamKey{sc.Worker, sc.Rank}] = s
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Run binds the SUB and ingests every stream until ctx ends. It returns nil on cancellation
// and an error if the SUB cannot be bound.
func (c *Central) Run(ctx context.Context) error {
	l, err := c.newLoop()
	c.mu.Lock()
	if l != nil {
		c.bound = l.endpoint
	}
	close(c.ready)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	defer l.close()
	for _, sh := range l.shells {
		sh.resume()
	}
	return l.run(ctx)
}

func (c *Central) newLoop() (*loop, error) {
	runtime.LockOSThread()
	l := &loop{cfg: c.cfg, endpoint: c.endpoint, byTopic: make(map[string]*streamShell),
		unknown: c.cfg.Metrics.DroppedFrames.WithLabelValues("central", string(kvevents.DropUnknownTopic))}
	for _, s := range c.subs {
		sh := newStreamShell(s)
		l.shells = append(l.shells, sh)
		l.byTopic[s.sc.Topic] = sh
	}
	// The SUB takes every topic rather than filtering by the configured ones: a publisher
	// whose topic is misconfigured is then counted (unknown_topic) and logged, where a
	// filter would hide it. Its messages cost no more than the frame bound.
	l.sub, l.mon = newSub(c.cfg, []string{""}, c.cfg.Logger)
	port, err := l.sub.Bind(c.endpoint)
	if err != nil {
		l.close()
		return nil, fmt.Errorf("kvzmq: bind central SUB endpoint=%s: %w", c.endpoint, err)
	}
	if strings.HasSuffix(c.endpoint, ":*") && port > 0 {
		l.endpoint = strings.TrimSuffix(c.endpoint, "*") + strconv.Itoa(port)
	}
	return l, nil
}

// Endpoint waits until Run has bound the SUB and returns the bound endpoint (an ephemeral
// tcp port "*" resolved), or "" if binding failed.
func (c *Central) Endpoint(ctx context.Context) (string, error) {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return "", fmt.Errorf("kvzmq: central endpoint %s: %w", c.endpoint, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bound, nil
}

// Subscriber returns the stream (worker, rank), or nil; use it for Status and Wait.
// It takes no lock (the router calls it for every worker of every decision).
func (c *Central) Subscriber(worker string, rank int64) *Subscriber {
	return c.byKey[streamKey{worker, rank}]
}

// Status returns a snapshot of every stream, sorted by worker and rank.
func (c *Central) Status() []StreamStatus {
	out := make([]StreamStatus, 0, len(c.subs))
	for _, s := range c.subs {
		out = append(out, s.Status())
	}
	slices.SortFunc(out, func(a, b StreamStatus) int {
		if r := strings.Compare(a.Worker, b.Worker); r != 0 {
			return r
		}
		return int(a.Rank - b.Rank)
	})
	return out
}
