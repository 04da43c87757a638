package kvzmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
)

// batchApplier is what a Subscriber needs from the index side: the stream's Applier.
type batchApplier interface {
	// ApplyPayload applies one batch; errors.Is(err, ErrMalformedBatch) means the stream's state
	// is unknown and must be cleared (§2.4 rule 6); ErrRankMismatch means drop only.
	// The index records seq with the batch's events (kvindex.Position).
	ApplyAt(seq uint64, payload []byte) error
	// Clear drops every index entry of the stream.
	Clear()
	// Position is where the index's entries of the stream end: valid when they were imported
	// from a peer's snapshot (or a previous subscriber of the stream left them).
	Position() kvindex.Position
}

// Config is the subscriber configuration shared by every stream. Zero fields take the defaults.
type Config struct {
	MaxPayloadBytes    int           // larger messages are dropped and counted; default 16 MiB
	PendingMessages    int           // live+replayed messages held during a replay; default 4096
	PendingBytes       int           // payload bytes held during a replay; default 32 MiB
	ReplayIdleTimeout  time.Duration // max silence between replay replies; default 2 s
	ReplayTotalTimeout time.Duration // max duration of one replay; default 60 s
	PollInterval       time.Duration // poll timeout, bounds shutdown latency; default 100 ms
	RcvHWM             int           // SUB receive high-water mark; default 100000 (>= 100000)
	HeartbeatInterval  time.Duration // ZMTP heartbeat on the SUB; default 5 s; negative = off
	Metrics            *Metrics      // required
	Logger             *slog.Logger  // default: discard
}

// Defaults (vllm-kv-events.md §1.4, §1.5).
const (
	DefaultReplayIdleTimeout  = 2 * time.Second
	DefaultReplayTotalTimeout = 60 * time.Second
	DefaultPollInterval       = 100 * time.Millisecond
	DefaultRcvHWM             = 100000
	DefaultHeartbeatInterval  = 5 * time.Second
)

func (c Config) withDefaults() Config {
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = kvevents.DefaultMaxPayloadBytes
	}
	if c.PendingMessages == 0 {
		c.PendingMessages = kvevents.DefaultPendingMessages
	}
	if c.PendingBytes == 0 {
		c.PendingBytes = kvevents.DefaultPendingBytes
	}
	if c.ReplayIdleTimeout == 0 {
		c.ReplayIdleTimeout = DefaultReplayIdleTimeout
	}
	if c.ReplayTotalTimeout == 0 {
		c.ReplayTotalTimeout = DefaultReplayTotalTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RcvHWM == 0 {
		c.RcvHWM = DefaultRcvHWM
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate returns every problem of c (after defaults), joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v any, rule string) {
		errs = append(errs, fmt.Errorf("kvzmq: config %s: %v %s", field, v, rule))
	}
	if c.MaxPayloadBytes < 0 {
		bad("max_payload_bytes", c.MaxPayloadBytes, "must be > 0")
	}
	if c.PendingMessages < 0 {
		bad("pending_messages", c.PendingMessages, "must be > 0")
	}
	if c.PendingBytes < 0 {
		bad("pending_bytes", c.PendingBytes, "must be > 0")
	}
	if c.ReplayIdleTimeout < 0 {
		bad("replay_idle_timeout", c.ReplayIdleTimeout, "must be > 0")
	}
	if c.ReplayTotalTimeout < c.ReplayIdleTimeout && c.ReplayTotalTimeout != 0 {
		bad("replay_total_timeout", c.ReplayTotalTimeout, "must be >= replay_idle_timeout")
	}
	if c.PollInterval < 0 || c.PollInterval > time.Second {
		bad("poll_interval", c.PollInterval, "must be in (0, 1s]")
	}
	if c.RcvHWM != 0 && c.RcvHWM < DefaultRcvHWM {
		bad("rcvhwm", c.RcvHWM, "must be >= 100000 (vLLM's PUB hwm, §1.4)")
	}
	if c.Metrics == nil {
		bad("metrics", "nil", "is required")
	}
	return errors.Join(errs...)
}

// StreamConfig names one event stream: one engine (worker, data-parallel rank).
type StreamConfig struct {
	Worker         string // worker name: the `worker` label and log key
	Rank           int64  // data-parallel rank; batches of another rank are dropped
	Endpoint       string // the engine's PUB endpoint, already offset for Rank (see OffsetEndpoint)
	ReplayEndpoint string // the engine's ROUTER replay endpoint; "" = no replay (every gap clears)
	Topic          string // SUB prefix filter; "" = every message
}

// Validate returns every problem of sc, joined.
func (sc StreamConfig) Validate() error {
	var errs []error
	if sc.Worker == "" {
		errs = append(errs, errors.New("kvzmq: stream worker: \"\" must not be empty"))
	}
	if sc.Endpoint == "" {
		errs = append(errs, fmt.Errorf("kvzmq: stream %s endpoint: \"\" must not be empty", sc.Worker))
	}
	if sc.Rank < 0 {
		errs = append(errs, fmt.Errorf("kvzmq: stream %s rank: %d must be >= 0", sc.Worker, sc.Rank))
	}
	return errors.Join(errs...)
}

// StreamStatus is a snapshot of one stream for the admin API.
type StreamStatus struct {
	Worker               string
	Rank                 int64
	Endpoint             string
	ReplayEndpoint       string
	Connected            bool      // the ZMTP session to the publisher is up (socket monitor)
	Monitored            bool      // the socket monitor runs: transport reconnects are detected
	LastEvent            time.Time // wall clock when the last batch was applied; zero if none
	LastStored           time.Time // wall clock of the last batch with an accepted BlockStored; zero if none
	StoredBatches        uint64    // batches with an accepted BlockStored (each one moves LastStored)
	Dropped              uint64    // messages dropped (frames, seq size, too large)
	MalformedClear       uint64    // clears after a batch-level decode failure
	kvevents.StreamState           // position and counters of the sequence machine
}

// Subscriber ingests one stream: it owns the SUB socket, the replay DEALER and the socket
// monitor (all created, used and destroyed on the goroutine running Run), feeds the sequence
// machine and applies its actions. Status and Wait are safe for concurrent use.
type Subscriber struct {
	cfg     Config
	sc      StreamConfig
	applier batchApplier
	log     *slog.Logger
	ctr     streamCounters

	mu      sync.Mutex    // guards status, changed
	status  StreamStatus  // latest snapshot, published by the Run goroutine
	changed chan struct{} // closed and replaced whenever status changes
	// view is status's RouteView, replaced by publish when it changes; View reads it lock-free.
	view atomic.Pointer[RouteView]
}

// RouteView is the part of a stream's status that the router reads for every worker of every
// decision (the policy's stream signal, conditional-disagg.md §8.3).
type RouteView struct {
	Connected     bool
	LastStored    time.Time
	StoredBatches uint64 // changes exactly when LastStored does
}

// View returns the stream's RouteView as of the last published snapshot, without locking.
func (s *Subscriber) View() RouteView {
	return *s.view.Load()
}

// NewSubscriber validates the configs and returns a subscriber for one stream. It starts
// nothing: the caller runs Run on a goroutine it owns.
func NewSubscriber(cfg Config, sc StreamConfig, a batchApplier) (*Subscriber, error) {
	if err := errors.Join(cfg.Validate(), sc.Validate()); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("kvzmq: new subscriber worker=%s: nil applier", sc.Worker)
	}
	cfg = cfg.withDefaults()
	s := &Subscriber{
		cfg: cfg, sc: sc, applier: a,
		log:     cfg.Logger.With("worker", string(kvevents.IndexWorkerID(sc.Worker, sc.Rank)), "endpoint", sc.Endpoint),
		ctr:     newStreamCounters(cfg.Metrics, string(kvevents.IndexWorkerID(sc.Worker, sc.Rank))),
		changed: make(chan struct{}),
	}
	s.status = StreamStatus{Worker: sc.Worker, Rank: sc.Rank, Endpoint: sc.Endpoint, ReplayEndpoint: sc.ReplayEndpoint}
	s.view.Store(&RouteView{})
	return s, nil
}

// Status returns the latest snapshot of the stream.
func (s *Subscriber) Status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Wait blocks until cond holds for the stream's snapshot or ctx ends, and returns the last
// snapshot it saw.
func (s *Subscriber) Wait(ctx context.Context, cond func(StreamStatus) bool) (StreamStatus, error) {
	for {
		s.mu.Lock()
		st, ch := s.status, s.changed
		s.mu.Unlock()
		if cond(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, fmt.Errorf("kvzmq: wait on stream worker=%s: %w", s.sc.Worker, ctx.Err())
		}
	}
}

// publish stores a new snapshot and wakes the waiters.
func (s *Subscriber) publish(update func(*StreamStatus)) {
	s.mu.Lock()
	update(&s.status)
	close(s.changed)
	s.changed = make(chan struct{})
	if v := (RouteView{Connected: s.status.Connected, LastStored: s.status.LastStored, StoredBatches: s.status.StoredBatches}); v != *s.view.Load() {
		s.view.Store(&v)
	}
	s.mu.Unlock()
}

// Run ingests the stream until ctx ends. It returns nil on cancellation and an error only if
// the SUB socket cannot be set up.
func (s *Subscriber) Run(ctx context.Context) error {
	return s.run(ctx, nil)
}

// run is Run that reports the socket setup result on ready (buffered, may be nil).
func (s *Subscriber) run(ctx context.Context, ready chan<- error) error {
	l, err := newLoop(s)
	if ready != nil {
		ready <- err
	}
	if err != nil {
		return err
	}
	defer l.close()
	// Start warm: continue right after the batch the index already holds (a peer's snapshot),
	// else ask the publisher for the batches it still retains before any arrives live.
	for _, sh := range l.shells {
		if !sh.resume() {
			sh.do(sh.st.Warm())
		}
	}
	return l.run(ctx)
}

// resume continues the stream after the batch the index's entries end at, if the index holds
// a position for it (Stream.Resume), and reports whether it did.
func (sh *streamShell) resume() bool {
	p := sh.s.applier.Position()
	if !p.Valid {
		return false
	}
	sh.s.log.Info("stream resumes from the index", "seq", p.Seq)
	sh.do(sh.st.Resume(p.Seq, p.Digest))
	return true
}
