package extproc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// Routing errors. Each maps to one immediate response in errors.go.
var (
	// ErrNoEligibleWorker: no routable worker exists for the request (503).
	ErrNoEligibleWorker = errors.New("no eligible worker")
	// ErrSubsetNoMatch: the gateway's subset hint is empty or names no eligible worker (503).
	ErrSubsetNoMatch = errors.New("subset hint matches no eligible worker")
	// ErrBodyTooLarge: the request body is over Settings.MaxBodyBytes (413).
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrInternal wraps every failure inside the pipeline; --failure-mode decides its fate.
	ErrInternal = errors.New("internal routing failure")
	// ErrDecisionDeadline is the policy error of a decision (after tokenization) slower than
	// DecisionDeadline.
	ErrDecisionDeadline = errors.New("extproc: decision deadline exceeded")
)

// DecisionDeadline bounds the decision steps after tokenization (conditional-disagg.md §3).
const DecisionDeadline = 50 * time.Millisecond

// Tokenizer encodes the prompt of an OpenAI body; *tokenizer.Tokenizer satisfies it.
type Tokenizer interface {
	EncodeChat(dst []uint32, body []byte, opts tokenizer.ChatOptions) ([]uint32, error)
	EncodeCompletion(dst []uint32, body []byte) ([]uint32, error)
}

// EventStreams reports a worker's KV event stream state for the silence check; the kvevents
// group behind `condisagg serve` satisfies it through a small adapter. Routed is called once
// per request routed to the worker.
type EventStreams interface {
	Stream(worker string, now time.Time) policy.Stream
	Routed(worker string)
}

// Worker names a chosen worker.
type Worker struct {
	ID       string
	Endpoint string // resolved ip:port
}

// Outcome is a routing decision as the stream machine and Explain see it.
type Outcome struct {
	BookingID string // the pool booking's request id; "" when nothing was booked
	Route     policy.Route
	Reason    string // policy.Reason text, "passthrough" or "failure_open"
	Decode    Worker
	Prefill   Worker // remote route only
	Decision  policy.Decision
	Tokens    int // ISL
	Keys      int // full-block keys
	Overlaps  []kvindex.WorkerOverlap
	Stages    [numStages]time.Duration
}

// Destination is the worker Envoy must dial for this outcome.
func (o *Outcome) Destination() Worker {
	if o.Route == policy.RoutePrefill {
		return o.Prefill
	}
	return o.Decode
}

// Reasons the policy enum does not cover.
const (
	ReasonPassthrough = "passthrough"
	ReasonFailureOpen = "failure_open"
)

// DecideRequest is one request to route.
type DecideRequest struct {
	Endpoint Endpoint
	Body     []byte
	// Subset restricts the decode candidates by IP when HasSubset (envoy-extproc.md §2).
	Subset    []string
	HasSubset bool
	// DryRun decides without booking (Explain) and records the per-worker overlaps.
	DryRun bool
}

// Router runs the decision pipeline of conditional-disagg.md §3 on the live pools. It is
// safe for concurrent use; Settings are swapped atomically by Reload.
type Router struct {
	tok      Tokenizer
	index    *kvindex.Index
	pool     *pool.Pool
	streams  EventStreams
	metrics  *Metrics
	settings atomic.Pointer[Settings]
	seq      atomic.Uint64
	scratch  sync.Pool // *scratch
	now      func() time.Time
}

// RouterOptions are the Router's collaborators. Tokenizer, Index, Pool, Metrics and Settings
// are required.
type RouterOptions struct {
	Tokenizer Tokenizer
	Index     *kvindex.Index
	Pool      *pool.Pool
	Streams   EventStreams // nil: every stream counts as live (no silence detection)
	Metrics   *Metrics
	Settings  *Settings
	Now       func() time.Time // default time.Now
}

// NewRouter checks opts and returns a Router.
func NewRouter(opts RouterOptions) (*Router, error) {
	var errs []error
	if opts.Tokenizer == nil {
		errs = append(errs, errors.New("extproc: router: Tokenizer is required"))
	}
	if opts.Index == nil || opts.Pool == nil || opts.Metrics == nil {
		errs = append(errs, errors.New("extproc: router: Index, Pool and Metrics are required"))
	}
	if opts.Settings == nil {
		errs = append(errs, errors.New("extproc: router: Settings are required"))
	} else if err := opts.Settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &Router{tok: opts.Tokenizer, index: opts.Index, pool: opts.Pool, streams: opts.Streams,
		metrics: opts.Metrics, now: opts.Now}
	if r.now == nil {
		r.now = time.Now
	}
	r.settings.Store(opts.Settings)
	seed := uint64(time.Now().UnixNano())
	var n atomic.Uint64
	r.scratch.New = func() any {
		return &scratch{rng: rand.New(rand.NewPCG(seed, n.Add(1)))}
	}
	return r, nil
}

// Settings returns the settings in force.
func (r *Router) Settings() *Settings { return r.settings.Load() }

// Reload validates s and swaps it in; on error the old settings stay.
func (r *Router) Reload(s *Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	r.settings.Store(s)
	return nil
}

// Pool returns the worker pool (ListWorkers, passthrough).
func (r *Router) Pool() *pool.Pool { return r.pool }

// scratch is one decision's reusable buffers.
type scratch struct {
	tokens  []uint32
	keys    []uint64
	ov      kvindex.Overlaps
	snap    pool.Snapshot
	decode  []policy.Signal
	prefill []policy.Signal
	rng     *rand.Rand
}

// Decide routes one request: tokenize, keys, overlap, snapshot, policy.Decide and (unless
// DryRun) pool.Book. Errors wrap ErrInvalidBody, ErrNoEligibleWorker, ErrSubsetNoMatch or
// ErrInternal.
func (r *Router) Decide(ctx context.Context, req *DecideRequest) (out Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: decide %s: recovered panic: %v", ErrInternal, req.Endpoint, p)
		}
	}()
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("%w: decide %s: %w", ErrInternal, req.Endpoint, err)
	}
	set := r.settings.Load()
	sc := r.scratch.Get().(*scratch)
	defer r.scratch.Put(sc)
	clock := newStageClock(r.now)
	if err := r.tokenize(sc, req); err != nil {
		return out, err
	}
	out.Stages[stageTokenize] = clock.lap()
	sc.keys = kvindex.AppendKeys(sc.keys[:0], 0, sc.tokens, set.Policy.BlockSize, nil)
	r.index.Overlap(sc.keys, &sc.ov)
	out.Stages[stageOverlap] = clock.lap()
	r.pool.Snapshot(&sc.snap, pool.Request{Keys: sc.keys, ISL: len(sc.tokens)})
	if req.HasSubset && !filterSubset(&sc.snap, req.Subset) {
		return out, fmt.Errorf("%w: subset %v", ErrSubsetNoMatch, req.Subset)
	}
	now := clock.last
	in := policy.Input{Now: now, ISL: len(sc.tokens)}
	sc.decode = r.signals(sc.decode[:0], sc.snap.Decode, sc.ov.Workers, now)
	sc.prefill = r.signals(sc.prefill[:0], sc.snap.Prefill, sc.ov.Workers, now)
	in.Decode, in.Prefill = sc.decode, sc.prefill
	dec := policy.Decide(set.Policy, &in, &sc.snap, sc.rng)
	out.Stages[stageDecide] = clock.lap()
	if dec.Route == policy.RouteDecode && dec.Reason != policy.ReasonNoPrefillWorkers &&
		out.Stages[stageOverlap]+out.Stages[stageDecide] > DecisionDeadline {
		// conditional-disagg.md §3 "Errors": a late bypass fails open to disaggregation.
		policy.Demote(set.Policy, &in, &sc.snap, sc.rng, &dec, policy.ReasonRemotePolicyError)
		dec.Inputs.Err = ErrDecisionDeadline
	}
	out.Tokens, out.Keys = len(sc.tokens), len(sc.keys)
	if req.DryRun {
		out.Overlaps = append([]kvindex.WorkerOverlap(nil), sc.ov.Workers...)
	} else if err := r.commit(set, sc, &in, &dec, &out); err != nil {
		return out, err
	}
	out.Stages[stageBook] = clock.lap()
	r.fill(&out, &dec, &sc.snap)
	return out, nil
}

// tokenize fills sc.tokens from the body; tokenizer refusals are 400s.
func (r *Router) tokenize(sc *scratch, req *DecideRequest) error {
	var err error
	switch req.Endpoint {
	case EndpointChat:
		sc.tokens, err = r.tok.EncodeChat(sc.tokens[:0], req.Body, tokenizer.ChatOptions{Now: r.now()})
	case EndpointCompletions:
		sc.tokens, err = r.tok.EncodeCompletion(sc.tokens[:0], req.Body)
	default:
		return fmt.Errorf("%w: decide: endpoint %s has no prompt", ErrInternal, req.Endpoint)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tokenizer.ErrNoChatTemplate), errors.Is(err, tokenizer.ErrUnsupported):
		return fmt.Errorf("%w: tokenize %s: %w", ErrInternal, req.Endpoint, err)
	default:
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
}

// signals describes loads (in snapshot order) from the index overlaps.
func (r *Router) signals(dst []policy.Signal, loads []pool.WorkerLoad, ov []kvindex.WorkerOverlap, now time.Time) []policy.Signal {
	for i := range loads {
		s := policy.Signal{Worker: loads[i].ID, Stream: policy.Stream{Connected: true, LastStored: now}}
		for j := range ov {
			if string(ov[j].Worker) == loads[i].ID {
				s.GPU, s.Host, s.Disk = ov[j].GPU, ov[j].CPU, ov[j].Disk
				break
			}
		}
		if r.streams != nil {
			s.Stream = r.streams.Stream(loads[i].ID, now)
		}
		dst = append(dst, s)
	}
	return dst
}

// commit books dec (conditional-disagg.md §3 step 9), demoting a denied bypass to the remote
// path once.
func (r *Router) commit(set *Settings, sc *scratch, in *policy.Input, dec *policy.Decision, out *Outcome) error {
	if !dec.Routable() {
		return fmt.Errorf("%w: reason %s", ErrNoEligibleWorker, dec.Reason)
	}
	id := "cd-" + strconv.FormatUint(r.seq.Add(1), 36)
	err := r.pool.Book(dec.Booking(id, sc.keys))
	if err != nil && dec.Route == policy.RouteDecode {
		reason := policy.DemoteReason(err)
		policy.Demote(set.Policy, in, &sc.snap, sc.rng, dec, reason)
		if !dec.Routable() {
			return fmt.Errorf("%w: commit demoted to %s: %w", ErrNoEligibleWorker, reason, err)
		}
		err = r.pool.Book(dec.Booking(id, sc.keys))
	}
	if err != nil {
		return fmt.Errorf("%w: book %s on decode=%s prefill=%s: %w", ErrInternal, id, dec.DecodeID, dec.PrefillID, err)
	}
	out.BookingID = id
	if r.streams != nil {
		r.streams.Routed(dec.DecodeID)
	}
	return nil
}

// fill copies the decision's workers into out.
func (r *Router) fill(out *Outcome, dec *policy.Decision, snap *pool.Snapshot) {
	out.Decision, out.Route, out.Reason = *dec, dec.Route, dec.Reason.String()
	if dec.Decode >= 0 && dec.Decode < len(snap.Decode) {
		out.Decode = Worker{ID: dec.DecodeID, Endpoint: snap.Decode[dec.Decode].Endpoint}
	}
	if dec.Route == policy.RoutePrefill && dec.Prefill >= 0 && dec.Prefill < len(snap.Prefill) {
		out.Prefill = Worker{ID: dec.PrefillID, Endpoint: snap.Prefill[dec.Prefill].Endpoint}
	}
}

// Passthrough routes a request that gets no decision (bodyless, other paths, STREAMED body
// mode, fail-open): the decode worker with the fewest active requests, nothing booked.
func (r *Router) Passthrough(reason string) (Outcome, error) {
	w, ok := r.pool.FewestRequests(pool.RoleDecode)
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %s: decode pool is empty", ErrNoEligibleWorker, reason)
	}
	return Outcome{Route: policy.RouteDecode, Reason: reason, Decode: Worker{ID: w.ID, Endpoint: w.Endpoint}}, nil
}

// filterSubset keeps the decode workers whose IP is in subset; false if none is left.
func filterSubset(snap *pool.Snapshot, subset []string) bool {
	kept := snap.Decode[:0]
	for _, w := range snap.Decode {
		if inSubset(w.Endpoint, subset) {
			kept = append(kept, w)
		}
	}
	snap.Decode = kept
	return len(kept) > 0
}

func inSubset(endpoint string, subset []string) bool {
	ip := hostOf(endpoint)
	for _, s := range subset {
		if hostOf(s) == ip {
			return true
		}
	}
	return false
}

func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
