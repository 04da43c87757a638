package vllmsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/sim"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	Engine sim.Config
	// TimeScale runs the simulated clock this many times faster than real time (10 = ten times
	// faster); default 1.
	TimeScale float64
	// Encoder writes the KV event payloads; Events must be non-nil for events to be produced.
	Encoder Encoder
	// Events receives each step's KV event batch payload; nil = events off.
	Events func(ctx context.Context, payload []byte) error
}

// Worker runs an Engine in scaled real time: its run goroutine owns the Engine, takes requests
// between steps, sleeps each step's duration divided by TimeScale, then delivers the step's
// tokens to the requests' Streams and publishes its KV events. All methods are safe for
// concurrent use.
type Worker struct {
	cfg   WorkerConfig
	cmds  chan func(*sim.Engine)
	stats atomic.Pointer[sim.Stats]
	done  chan struct{}
	// streams maps RequestID to the *Stream of a request in the engine; the run goroutine
	// stores and deletes entries.
	streams sync.Map
}

// Stream receives the tokens of one request as they are produced.
type Stream struct {
	ID     sim.RequestID
	mu     sync.Mutex // guards toks, fin, done
	toks   []uint32
	fin    sim.Finished
	done   bool
	notify chan struct{} // capacity 1: something new
}

// Next waits until tokens beyond the first `have` tokens have arrived or the request finished, and returns
// the new tokens and, at the end, the Finished record.
func (s *Stream) Next(ctx context.Context, have int) (toks []uint32, fin *sim.Finished, err error) {
	for {
		s.mu.Lock()
		toks = s.toks[have:len(s.toks):len(s.toks)]
		if s.done {
			f := s.fin
			fin = &f
		}
		s.mu.Unlock()
		if len(toks) > 0 || fin != nil {
			return toks, fin, nil
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// push appends tok (when fin is nil or fin.OutputTokens exceeds what the stream holds) and,
// with fin, ends the stream in the same critical section.
func (s *Stream) push(tok uint32, fin *sim.Finished) {
	s.mu.Lock()
	if fin == nil || len(s.toks) < fin.OutputTokens {
		s.toks = append(s.toks, tok)
	}
	if fin != nil {
		s.fin, s.done = *fin, true
		s.fin.BlockIDs = append([]int32(nil), fin.BlockIDs...)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// ErrStopped is returned by Worker calls after Run has returned.
var ErrStopped = errors.New("vllmsim: worker stopped")

// NewWorker validates cfg and returns a worker; nothing runs until Run.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if !(cfg.TimeScale > 0) {
		return nil, fmt.Errorf("vllmsim: time scale %v: must be > 0", cfg.TimeScale)
	}
	cfg.Engine.Events = cfg.Events != nil
	if err := cfg.Engine.Validate(); err != nil {
		return nil, err
	}
	cfg.Engine = cfg.Engine.WithDefaults()
	w := &Worker{cfg: cfg, cmds: make(chan func(*sim.Engine), 1024), done: make(chan struct{})}
	w.stats.Store(&sim.Stats{NumGPUBlocks: cfg.Engine.NumGPUBlocks})
	return w, nil
}

// Config returns the engine configuration with defaults filled in.
func (w *Worker) Config() sim.Config { return w.cfg.Engine }

// Stats returns the engine's stats as of the last step.
func (w *Worker) Stats() sim.Stats { return *w.stats.Load() }

// do runs f on the run goroutine and waits for it.
func (w *Worker) do(ctx context.Context, f func(*sim.Engine)) error {
	ran := make(chan struct{})
	select {
	case w.cmds <- func(e *sim.Engine) { f(e); close(ran) }:
	case <-w.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ran:
		return nil
	case <-w.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Submit queues a request and returns the Stream of its tokens.
func (w *Worker) Submit(ctx context.Context, req sim.Request) (*Stream, error) {
	var st *Stream
	var err error
	if e := w.do(ctx, func(e *sim.Engine) {
		var id sim.RequestID
		id, err = e.Add(req)
		if err == nil {
			st = &Stream{ID: id, notify: make(chan struct{}, 1)}
			w.streams.Store(id, st)
		}
	}); e != nil {
		return nil, e
	}
	return st, err
}

// Abort cancels a request (a client that went away).
func (w *Worker) Abort(ctx context.Context, id sim.RequestID) error {
	var err error
	if e := w.do(ctx, func(e *sim.Engine) { err = e.Abort(id); w.streams.Delete(id) }); e != nil {
		return e
	}
	return err
}

// ResetPrefixCache resets the engine's prefix cache (failing while blocks are in use) and
// publishes the AllBlocksCleared event at once.
func (w *Worker) ResetPrefixCache(ctx context.Context) error {
	var err error
	if e := w.do(ctx, func(e *sim.Engine) { err = e.ResetPrefixCache() }); e != nil {
		return e
	}
	return err
}

// Run drives the engine until ctx ends; it returns an error only when the engine cannot be
// built. Run must be called once.
func (w *Worker) Run(ctx context.Context) error {
	defer close(w.done)
	e, err := sim.New(w.cfg.Engine)
	if err != nil {
		return err
	}
	l := loop{w: w, e: e, streams: &w.streams, start: time.Now()}
	return l.run(ctx)
}

type loop struct {
	w       *Worker
	e       *sim.Engine
	streams *sync.Map
	start   time.Time     // wall clock of virtual time 0
	vnow    time.Duration // virtual time
	payload []byte
}

func (l *loop) virtual(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(l.start)) * l.w.cfg.TimeScale)
}

func (l *loop) wall(v time.Duration) time.Time {
	return l.start.Add(time.Duration(float64(v) / l.w.cfg.TimeScale))
}

func (l *loop) run(ctx context.Context) error {
	resync := true
	for {
		if err := l.publish(ctx, l.e.TakeEvents()); err != nil {
			return nil
		}
		// The virtual clock follows the wall clock only after the engine was idle. While it
		// is busy, steps follow each other back to back in virtual time and a late timer is
		// absorbed by the next step's deadline, instead of every step's wall-clock overhead
		// (timer lateness, the step's own CPU work) being multiplied by the time scale.
		if resync {
			l.vnow = max(l.vnow, l.virtual(time.Now()))
		}
		res := l.e.Step(l.vnow)
		l.publishStats()
		resync = res.Duration == 0
		if res.Duration == 0 {
			l.deliver(res) // a request that ended without a step (a KV load failed under "fail")
			if err := l.publish(ctx, res.Events); err != nil {
				return nil
			}
			if !l.idle(ctx) {
				return nil
			}
			continue
		}
		l.vnow += res.Duration
		if !l.sleepUntil(ctx, l.wall(l.vnow)) {
			return nil
		}
		l.deliver(res)
		if err := l.publish(ctx, res.Events); err != nil {
			return nil
		}
	}
}

// idle waits for a command, the next KV transfer, or the end of ctx; false = stop.
func (l *loop) idle(ctx context.Context) bool {
	var timer <-chan time.Time
	if next, ok := l.e.NextTransfer(); ok {
		t := time.NewTimer(time.Until(l.wall(next)))
		defer t.Stop()
		timer = t.C
	}
	select {
	case f := <-l.w.cmds:
		f(l.e)
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}

// sleepUntil waits until wall time t, running commands meanwhile; false = stop.
func (l *loop) sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case f := <-l.w.cmds:
			f(l.e)
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// deliver hands the step's tokens to their streams; a request's last token and its Finished
// record are delivered together, so a reader sees the finish reason with the last token.
func (l *loop) deliver(res *sim.StepResult) {
	for _, tk := range res.Tokens {
		s, ok := l.streams.Load(tk.ID)
		if !ok {
			continue
		}
		var fin *sim.Finished
		for i := range res.Finished {
			if res.Finished[i].ID == tk.ID {
				fin = &res.Finished[i]
				break
			}
		}
		s.(*Stream).push(tk.Token, fin)
		if fin != nil {
			l.streams.Delete(tk.ID)
		}
	}
	for _, f := range res.Finished { // a finish without a token in this step (a failed KV load)
		if s, ok := l.streams.LoadAndDelete(f.ID); ok {
			s.(*Stream).push(0, &f)
		}
	}
}

func (l *loop) publish(ctx context.Context, events []sim.Event) error {
	if len(events) == 0 || l.w.cfg.Events == nil {
		return nil
	}
	ts := float64(time.Now().UnixNano()) / 1e9
	payload := l.w.cfg.Encoder.AppendBatch(nil, ts, events)
	return l.w.cfg.Events(ctx, payload)
}

func (l *loop) publishStats() {
	s := l.e.Stats()
	l.w.stats.Store(&s)
}
