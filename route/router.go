package route

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// Routing errors. extproc maps each to one immediate response; the simulator records them.
var (
	// ErrNoEligibleWorker: no routable worker exists for the request (503).
	ErrNoEligibleWorker = errors.New("no eligible worker")
	// ErrSubsetNoMatch: the gateway's subset hint is empty or names no eligible worker (503).
	ErrSubsetNoMatch = errors.New("subset hint matches no eligible worker")
	// ErrInternal wraps every failure inside the pipeline; --failure-mode decides its fate.
	ErrInternal = errors.New("internal routing failure")
	// ErrDecisionDeadline is the policy error of a decision (after tokenization) slower than
	// DecisionDeadline.
	ErrDecisionDeadline = errors.New("route: decision deadline exceeded")
	// ErrCancelled: the request's context ended during the decision (the client went away);
	// nothing was booked.
	ErrCancelled = errors.New("request cancelled during the decision")
	// ErrPromptTooLong is matched by the refusal of a prompt over its model's max_model_len
	// (vLLM's own 400; the error's Param method names vLLM's parameter).
	ErrPromptTooLong = tokenizer.ErrPromptTooLong
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

// Learner is what decisions read and tickets teach: the slo policy's corrections and the
// observed mix (package feedback; *feedback.Learner satisfies it).
type Learner interface {
	Corrections() [policy.NumRoutes]policy.Correction
	ObserveLatency(rt policy.Route, m feedback.Metric, forecastMS, observedMS, objectiveMS, bound float64)
	ObserveRouted(isl int, prefillTokens int64)
	ObserveOutput(tokens int)
}

// Request is one request to route. A server request carries the OpenAI Body, which Decide
// checks and tokenizes; the simulator, which has no text, carries the prompt's Tokens and no
// Body. Everything after tokenization is the same for both.
type Request struct {
	Endpoint Endpoint
	Body     []byte
	Tokens   []uint32 // the prompt's token ids when Body is nil (read, not kept)
	// Subset restricts the decode candidates by IP when HasSubset (envoy-extproc.md §2).
	Subset    []string
	HasSubset bool
	// DryRun decides without booking (Explain) and records the per-worker overlaps.
	DryRun bool
	// Model names the model of a request without a Body (the simulator) and the model a
	// Fallback routes to; "" is the first model. A Body's own `model` field wins.
	Model string
	// SLO is the request's own latency objective for the slo policy (x-slo-ttft-ms,
	// x-slo-tpot-ms); zero fields take the configured one.
	SLO policy.SLO
	// Session is the request's session id (extproc's session headers; the simulator's
	// conversation); "" : none. With Options.Sessions on, the session prefers the worker of its
	// last booked turn (session.go).
	Session string
}

// Router runs the decision pipeline of conditional-disagg.md §3 on the live pools: it is the
// one place a routing decision is made, for `condisagg serve` (through extproc), for Explain
// and for the cluster simulator. It is safe for concurrent use; the policy config is swapped
// atomically by SetPolicy.
type Router struct {
	models   []*model          // in configuration order; models[0] takes unnamed fallbacks
	names    map[string]target // request model name -> model and adapter
	unknown  UnknownModel
	policy   atomic.Pointer[policy.Config] // as given; each model holds its block-size copy
	seq      atomic.Uint64
	seed     uint64
	scratch  sync.Pool // *scratch
	shadow   shadowState
	learner  Learner
	now      func() time.Time
	observe  func(*Outcome)
	maxWord  int       // Options.MaxPretokenBytes
	sessions *sessions // nil: session affinity off
}

// Options are the Router's collaborators. Policy is required, and either Models or the
// single-model fields (Index and Pool required).
type Options struct {
	Tokenizer Tokenizer      // nil: only requests that carry Tokens can be routed
	Index     *kvindex.Index // the prefix index the event path fills
	Pool      *pool.Pool
	Streams   EventStreams   // nil: every stream counts as live (no silence detection)
	Policy    *policy.Config // validated or validatable; Validate runs here
	Now       func() time.Time
	// Seed fixes the tie-break randomness: decision n draws from PCG(Seed, n), so the same
	// request sequence gives the same decisions however requests land on goroutines. 0 seeds
	// from the clock.
	Seed uint64
	// LoRAAdapters are the request `model` names that are LoRA adapters: their blocks are keyed
	// with the adapter's identity, as vLLM keys them (vllm-kv-events.md §4.1). Other names are
	// the base model.
	LoRAAdapters []string
	// Models are the served models, each with its own tokenizer, index, pool and streams;
	// a request's `model` field selects one (a LoRA adapter name selects its base model plus
	// the adapter's key identity). Exclusive with the single-model fields above, which make
	// one catch-all model.
	Models []Model
	// UnknownModel is what happens to a request for a name no model serves (never with the
	// single-model fields, whose model takes every name).
	UnknownModel UnknownModel
	// Observe, if set, sees every finished decision (booked or dry-run) before Decide returns,
	// on the deciding goroutine. Tests and the simulator's report use it.
	Observe func(*Outcome)
	// Learner learns from the answers (route.Ticket) what the slo policy's corrections and the
	// role advice need; nil: a private feedback.New() nobody reads. Whoever reports its state
	// (metrics, the simulator's report) makes it and hands it in.
	Learner Learner
	// MaxPretokenBytes bounds one pre-token of a prompt (0: none): a prompt holding a longer
	// one is not tokenized but routed by load, reason long_pretoken (its BPE would take CPU
	// out of proportion: a fresh 4 MiB word is seconds).
	MaxPretokenBytes int
	// Sessions is soft session affinity (off in the zero value).
	Sessions SessionConfig
}

// New checks opts and returns a Router.
func New(opts Options) (*Router, error) {
	var errs []error
	models, names, err := buildModels(&opts)
	errs = append(errs, err)
	if opts.Policy == nil {
		errs = append(errs, errors.New("route: Policy is required"))
	} else if err := opts.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.MaxPretokenBytes < 0 {
		return nil, fmt.Errorf("route: MaxPretokenBytes %d must be >= 0", opts.MaxPretokenBytes)
	}
	if opts.Sessions.TTL < 0 || opts.Sessions.Max < 0 {
		return nil, fmt.Errorf("route: Sessions TTL %s and Max %d must be >= 0 (0: the default)", opts.Sessions.TTL, opts.Sessions.Max)
	}
	r := &Router{models: models, names: names, unknown: opts.UnknownModel,
		now: opts.Now, seed: opts.Seed, observe: opts.Observe, maxWord: opts.MaxPretokenBytes, learner: opts.Learner,
		sessions: newSessions(opts.Sessions)}
	if r.learner == nil {
		r.learner = feedback.New()
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.seed == 0 {
		r.seed = uint64(time.Now().UnixNano())
	}
	r.policy.Store(opts.Policy)
	r.setModelPolicies(opts.Policy)
	r.scratch.New = func() any {
		sc := &scratch{}
		sc.rng = rand.New(&sc.pcg)
		return sc
	}
	return r, nil
}

// Policy returns the policy config in force.
func (r *Router) Policy() *policy.Config { return r.policy.Load() }

// SetPolicy validates c and swaps it in; on error the old config stays.
func (r *Router) SetPolicy(c *policy.Config) error {
	if c == nil {
		return errors.New("route: policy config is nil")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	r.policy.Store(c)
	r.setModelPolicies(c)
	return nil
}

// Pool returns the first model's worker pool (the only one of a one-model router).
func (r *Router) Pool() *pool.Pool { return r.models[0].pool }

// Index returns the first model's prefix index (the only one of a one-model router).
func (r *Router) Index() *kvindex.Index { return r.models[0].index }

// scratch is one decision's reusable buffers.
type scratch struct {
	tokens  []uint32
	keys    []uint64
	ov      kvindex.Overlaps
	snap    policy.Snapshot
	decode  []policy.Signal
	prefill []policy.Signal
	pcg     rand.PCG
	rng     *rand.Rand
	salt    []byte
	// ovAt is the position of each worker in ov.Workers, when it has more than
	// linearOverlaps entries (indexOverlaps).
	ovAt map[kvindex.WorkerID]int32
	// shadowPCG is the candidate config's tie-break source (shadow.go).
	shadowPCG rand.PCG
	// tok and budget bound one decision's tokenization (tokenizer.Bounded).
	tok    tokenizer.Tokenizer
	budget tokenizer.Budget
}

// linearOverlaps: up to this many overlapping workers, signals finds a worker's overlap by
// scanning; past it, through ovAt. Scanning for every load is quadratic in the fleet when every
// worker holds the prompt's prefix (a fleet-wide system prompt): 2.8 ms per decision at 1,024
// workers.
const linearOverlaps = 8

// indexOverlaps fills ovAt from ov.Workers (emptied when scanning will do).
func (sc *scratch) indexOverlaps() {
	clear(sc.ovAt)
	if len(sc.ov.Workers) <= linearOverlaps {
		return
	}
	if sc.ovAt == nil {
		sc.ovAt = make(map[kvindex.WorkerID]int32, len(sc.ov.Workers))
	}
	for j := range sc.ov.Workers {
		sc.ovAt[sc.ov.Workers[j].Worker] = int32(j)
	}
}

// overlapOf is worker id's entry of ov.Workers, if it has one.
func (sc *scratch) overlapOf(id string) (kvindex.WorkerOverlap, bool) {
	ov := sc.ov.Workers
	if len(ov) <= linearOverlaps {
		for j := range ov {
			if string(ov[j].Worker) == id {
				return ov[j], true
			}
		}
		return kvindex.WorkerOverlap{}, false
	}
	j, ok := sc.ovAt[kvindex.WorkerID(id)]
	if !ok {
		return kvindex.WorkerOverlap{}, false
	}
	return ov[j], true
}

// Decide routes one request: tokenize, keys, overlap, snapshot, policy.Decide and (unless
// DryRun) pool.Book. Errors wrap ErrInvalidBody, ErrNoEligibleWorker, ErrSubsetNoMatch or
// ErrInternal.
func (r *Router) Decide(ctx context.Context, req *Request) (out Outcome, err error) {
	booked := ""
	var m *model
	defer func() {
		if p := recover(); p != nil {
			if booked != "" && m != nil {
				m.pool.Release(booked) // the booking must not outlive a failed decision
			}
			out = Outcome{}
			err = fmt.Errorf("%w: decide %s: recovered panic: %v", ErrInternal, req.Endpoint, p)
		}
	}()
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("%w: decide %s: %w", ErrCancelled, req.Endpoint, err)
	}
	clock := newStageClock(r.now)
	name := req.Model
	if req.Body != nil {
		// The one check of the body's routing fields; the tokenizer reads the prompt next.
		if out.Body, err = ParseBody(req.Endpoint, req.Body); err != nil {
			return out, err
		}
		name = out.Body.Model
	}
	t, known := r.resolve(name)
	if !known && (req.Body != nil || name != "") {
		return r.unknownModel(ctx, req, out.Body, name)
	} else if !known {
		t = target{m: r.models[0]}
	}
	m = t.m
	out.Model, out.LoRA = m.name, t.loraName
	cfg := m.policy.Load()
	sc := r.scratch.Get().(*scratch)
	defer r.scratch.Put(sc)
	n := r.seq.Add(1)
	sc.pcg.Seed(r.seed, n)
	if err := r.tokenize(ctx, m, sc, req); err != nil {
		switch {
		case errors.Is(err, tokenizer.ErrRequestTemplate):
			return r.unread(m, req, out, policy.ReasonRequestTemplate)
		case errors.Is(err, tokenizer.ErrWordTooLong):
			return r.unread(m, req, out, policy.ReasonLongPretoken)
		}
		return out, err
	}
	out.Stages[StageTokenize] = clock.lap()
	sc.keys = m.index.Keys().AppendRequestKeys(sc.keys[:0], sc.tokens, cfg.BlockSize, t.lora, saltBytes(sc, out.Body.CacheSalt))
	m.index.Overlap(sc.keys, &sc.ov)
	sc.indexOverlaps()
	out.Stages[StageOverlap] = clock.lap()
	m.pool.Snapshot(&sc.snap, pool.Request{Keys: sc.keys, ISL: len(sc.tokens)})
	if req.HasSubset && !filterSubset(&sc.snap, req.Subset) {
		return out, fmt.Errorf("%w: subset %v", ErrSubsetNoMatch, req.Subset)
	}
	now := clock.last
	in := policy.Input{Now: now, ISL: len(sc.tokens), SLO: req.SLO}
	if cfg.Disagg.Policy == policy.SLOKind {
		in.Feedback = r.learner.Corrections()
	}
	if fleetOn(cfg) {
		in.Fleet = m.fleetView(&sc.snap, now)
	}
	sc.decode = m.signals(sc.decode[:0], sc.snap.Decode, sc, now)
	sc.prefill = m.signals(sc.prefill[:0], sc.snap.Prefill, sc, now)
	in.Decode, in.Prefill = sc.decode, sc.prefill
	bound := ""
	if r.sessions != nil && req.Session != "" {
		bound = r.sessions.lookup(req.Session, now)
		in.Affinity = bound
	}
	dec := policy.Decide(cfg, &in, &sc.snap, sc.rng)
	out.Stages[StageDecide] = clock.lap()
	if dec.Route == policy.RouteDecode && dec.Reason != policy.ReasonNoPrefillWorkers &&
		out.Stages[StageOverlap]+out.Stages[StageDecide] > DecisionDeadline {
		// conditional-disagg.md §3 "Errors": a late bypass fails open to disaggregation.
		policy.Demote(cfg, &in, &sc.snap, sc.rng, &dec, policy.ReasonRemotePolicyError)
		dec.Inputs.Err = ErrDecisionDeadline
	}
	out.Tokens, out.Keys = len(sc.tokens), len(sc.keys)
	var cand policy.Decision
	hasCand := false
	if !req.DryRun {
		cand, hasCand = r.decideShadow(m, &in, sc, n)
	}
	if req.DryRun {
		out.Overlaps = append([]kvindex.WorkerOverlap(nil), sc.ov.Workers...)
		// The index answers in no particular order; Explain lists the workers by name.
		slices.SortFunc(out.Overlaps, func(a, b kvindex.WorkerOverlap) int { return strings.Compare(string(a.Worker), string(b.Worker)) })
	} else {
		if err := ctx.Err(); err != nil {
			// The client is gone: the decision is worth nothing and must book nothing.
			return out, fmt.Errorf("%w: decide %s: %w", ErrCancelled, req.Endpoint, err)
		}
		id := "cd-" + strconv.FormatUint(n, 36)
		var subset []string
		if req.HasSubset {
			subset = req.Subset
		}
		if err := m.commit(cfg, sc, &in, &dec, id, subset); err != nil {
			return out, err
		}
		out.BookingID, booked = id, id
		r.learner.ObserveRouted(in.ISL, dec.PrefillTokens)
		if fleetOn(cfg) {
			m.fleetBooked(&dec, in.ISL, now)
		}
	}
	out.Stages[StageBook] = clock.lap()
	if booked != "" {
		out.Ticket = r.newTicket(m, booked, &dec, clock.last)
	}
	if r.sessions != nil && req.Session != "" {
		out.Session = Session{ID: req.Session, Bound: bound, Outcome: settle(bound, &dec)}
		dec.Inputs.AffinityWorker = bound
		if booked != "" {
			// Bound at booking, not at the answer: a follow-up sent while this turn still
			// decodes has no KV in the index yet, and must find its worker all the same.
			r.sessions.bind(req.Session, holder(&dec), now)
			r.sessions.count(out.Session.Outcome)
		}
	}
	fill(&out, &dec, &sc.snap)
	if hasCand {
		out.Shadow = r.compareShadow(&dec, &cand)
	}
	if r.observe != nil {
		r.observe(&out)
	}
	return out, nil
}

// saltBytes is the cache salt as bytes in the scratch's buffer (no allocation when warm).
func saltBytes(sc *scratch, salt string) []byte {
	if salt == "" {
		return nil
	}
	sc.salt = append(sc.salt[:0], salt...)
	return sc.salt
}

// tokenize fills sc.tokens from the body (or the request's own tokens); tokenizer refusals
// are 400s. The tokenizer runs under the model's max_model_len, the pre-token bound and ctx
// (tokenizer.Limits), so a prompt costs at most about what the engine will accept.
func (r *Router) tokenize(ctx context.Context, m *model, sc *scratch, req *Request) error {
	if req.Body == nil {
		if len(req.Tokens) == 0 {
			return fmt.Errorf("%w: decide %s: request has neither a body nor tokens", ErrInternal, req.Endpoint)
		}
		sc.tokens = append(sc.tokens[:0], req.Tokens...)
		return nil
	}
	if m.tok == nil {
		return fmt.Errorf("%w: decide %s: model %q has no tokenizer", ErrInternal, req.Endpoint, m.name)
	}
	tok := m.tok
	bounded := false
	if t, ok := tok.(*tokenizer.Tokenizer); ok {
		maxLen := m.maxLen
		if maxLen > 0 && HasMember(req.Body, "truncate_prompt_tokens") {
			maxLen = 0 // vLLM truncates such a prompt instead of refusing it
		}
		sc.budget.Reset(tokenizer.Limits{MaxInputTokens: maxLen, MaxWordBytes: r.maxWord, Done: ctx.Done()})
		tok, bounded = t.Bounded(&sc.tok, &sc.budget), true
	}
	var err error
	switch req.Endpoint {
	case EndpointChat:
		sc.tokens, err = tok.EncodeChat(sc.tokens[:0], req.Body, tokenizer.ChatOptions{Now: r.now()})
	case EndpointCompletions:
		sc.tokens, err = tok.EncodeCompletion(sc.tokens[:0], req.Body)
	default:
		return fmt.Errorf("%w: decide: endpoint %s has no prompt", ErrInternal, req.Endpoint)
	}
	if bounded {
		sc.tok = tokenizer.Tokenizer{} // the copy must not keep the budget or tables alive
		if err == nil {
			err = sc.budget.Err()
		}
		sc.budget.Done = nil
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tokenizer.ErrCancelled):
		return fmt.Errorf("%w: tokenize %s: %w", ErrCancelled, req.Endpoint, err)
	case errors.Is(err, tokenizer.ErrWordTooLong):
		return err
	case errors.Is(err, tokenizer.ErrPromptTooLong):
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	case errors.Is(err, tokenizer.ErrNoChatTemplate), errors.Is(err, tokenizer.ErrUnsupported):
		return fmt.Errorf("%w: tokenize %s: %w", ErrInternal, req.Endpoint, err)
	default:
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
}

// signals describes loads (in snapshot order) from the index overlaps in sc.
func (m *model) signals(dst []policy.Signal, loads []policy.WorkerLoad, sc *scratch, now time.Time) []policy.Signal {
	for i := range loads {
		s := policy.Signal{Worker: loads[i].ID, Stream: policy.Stream{Connected: true, LastStored: now}}
		if o, ok := sc.overlapOf(loads[i].ID); ok {
			s.GPU, s.Host, s.Disk = o.GPU, o.CPU, o.Disk
			if m.index.Keys() == kvindex.KeysBigram {
				s.GPU, s.Host, s.Disk = bigramServable(s.GPU, s.Host, s.Disk, len(sc.tokens), m.policy.Load().BlockSize)
			}
		}
		if m.streams != nil {
			s.Stream = m.streams.Stream(loads[i].ID, now)
		}
		dst = append(dst, s)
	}
	return dst
}

// bigramServable caps a worker's prefix (device blocks, then host and disk) at what SGLang with
// EAGLE serves from cache for an isl-token prompt. The scheduler matches at most isl-1 tokens
// (Req._compute_max_prefix_len), which under bigram keys are isl-2 pairs: ⌊(isl-2)/B⌋ pages,
// one fewer than the ⌊(isl-1)/B⌋ the index can hold when isl-1 is a multiple of B. (The
// policy's own cap, CacheableBlocks, is vLLM's ⌊(isl-1)/B⌋.)
func bigramServable(gpu, host, disk, isl, bs int) (int, int, int) {
	limit := 0
	if isl > 1 && bs > 0 {
		limit = (isl - 2) / bs
	}
	gpu = min(gpu, limit)
	host = min(host, limit-gpu)
	disk = min(disk, limit-gpu-host)
	return gpu, host, disk
}

// commit books dec (conditional-disagg.md §3 step 9), demoting a denied bypass to the remote
// path once.
func (m *model) commit(cfg *policy.Config, sc *scratch, in *policy.Input, dec *policy.Decision, id string, reqSubset []string) error {
	if !dec.Routable() {
		return fmt.Errorf("%w: reason %s", ErrNoEligibleWorker, dec.Reason)
	}
	err := m.pool.Book(Booking(dec, id, sc.keys))
	if err != nil && dec.Route == policy.RouteDecode {
		reason := policy.DemoteReason(err)
		policy.Demote(cfg, in, &sc.snap, sc.rng, dec, reason)
		if !dec.Routable() {
			return fmt.Errorf("%w: commit demoted to %s: %w", ErrNoEligibleWorker, reason, err)
		}
		err = m.pool.Book(Booking(dec, id, sc.keys))
	}
	if err != nil && errors.Is(err, pool.ErrUnknownWorker) {
		// A chosen worker left or turned unhealthy since the snapshot: decide again on a fresh
		// one (once), so the request is re-selected on its route instead of failing open.
		m.pool.Snapshot(&sc.snap, pool.Request{Keys: sc.keys, ISL: in.ISL})
		if reqSubset != nil && !filterSubset(&sc.snap, reqSubset) {
			return fmt.Errorf("%w: subset %v after the chosen worker left", ErrSubsetNoMatch, reqSubset)
		}
		sc.decode = m.signals(sc.decode[:0], sc.snap.Decode, sc, in.Now)
		sc.prefill = m.signals(sc.prefill[:0], sc.snap.Prefill, sc, in.Now)
		in.Decode, in.Prefill = sc.decode, sc.prefill
		*dec = policy.Decide(cfg, in, &sc.snap, sc.rng)
		if !dec.Routable() {
			return fmt.Errorf("%w: re-selection after %w: reason %s", ErrNoEligibleWorker, err, dec.Reason)
		}
		err = m.pool.Book(Booking(dec, id, sc.keys))
	}
	if err != nil {
		return fmt.Errorf("%w: book %s on decode=%s prefill=%s: %w", ErrInternal, id, dec.DecodeID, dec.PrefillID, err)
	}
	if m.streams != nil {
		w := dec.DecodeID
		if dec.Route == policy.RoutePrefillLocal {
			w = dec.PrefillID
		}
		if storesBlock(sc, w) {
			m.streams.Routed(w)
		}
	}
	return nil
}

// storesBlock reports whether routing the prompt to worker w must make its engine publish a
// BlockStored: the prompt has a full block beyond what w already holds. Only such requests
// count towards the silence rule (conditional-disagg.md §8.3); a prompt shorter than one
// block, or one w holds whole, stores nothing, and twenty of them must not mark a healthy
// stream silent.
func storesBlock(sc *scratch, w string) bool {
	held := 0
	if o, ok := sc.overlapOf(w); ok {
		held = o.GPU
	}
	return len(sc.keys) > held
}

// Booking is the pool booking that commits dec (conditional-disagg.md §5.1). keys are the
// prompt's chained full-block keys (used by the routes that prefill where they decode).
func Booking(dec *policy.Decision, requestID string, keys []uint64) pool.Booking {
	b := pool.Booking{RequestID: requestID, Decode: dec.DecodeID, ISL: dec.Inputs.ISL, PrefillTokens: dec.PrefillTokens}
	switch dec.Route {
	case policy.RouteDecode:
		b.Mode, b.Keys, b.Guard = pool.ModeBypass, keys, dec.Guard
	case policy.RoutePrefillLocal:
		b.Mode, b.Keys, b.Prefill, b.Decode = pool.ModePrefillLocal, keys, dec.PrefillID, ""
	case policy.RouteHandoff:
		b.Mode, b.Prefill = pool.ModeHandoff, dec.PrefillID
	default:
		b.Mode, b.Prefill = pool.ModeRemote, dec.PrefillID
	}
	return b
}

// ReportUpstream passes what the response phase saw of a worker to its health (pool): a
// status (5xx counts against the worker, anything else clears its failure streak) or a
// connection that could not be made.
func (r *Router) ReportUpstream(workerID string, status int, connectFailure bool) {
	for _, m := range r.models { // worker ids are unique across models
		err := m.pool.ReportUpstream(workerID, pool.Upstream{Status: status, ConnectFailure: connectFailure})
		if !errors.Is(err, pool.ErrUnknownWorker) {
			return // a worker that left every pool is no news
		}
	}
}

// fill copies the decision's workers into out.
func fill(out *Outcome, dec *policy.Decision, snap *policy.Snapshot) {
	out.Decision, out.Route, out.Reason = *dec, dec.Route, dec.Reason.String()
	if dec.Decode >= 0 && dec.Decode < len(snap.Decode) {
		d := &snap.Decode[dec.Decode]
		out.Decode = Worker{ID: dec.DecodeID, Endpoint: d.Endpoint, DPRank: d.DPRank, DPSize: d.DPSize}
	}
	prefills := snap.Prefill
	if dec.Route.PrefillOnDecode() { // the handoff's holder is a decode worker
		prefills = snap.Decode
	}
	if dec.Route != policy.RouteDecode && dec.Prefill >= 0 && dec.Prefill < len(prefills) {
		p := &prefills[dec.Prefill]
		out.Prefill = Worker{ID: dec.PrefillID, Endpoint: p.Endpoint, DPRank: p.DPRank, DPSize: p.DPSize}
	}
}

// Fallback routes a request that gets no policy decision: reason policy.ReasonPassthrough
// (other paths, bodyless requests, a body mode that cannot carry a decision) or
// policy.ReasonFailureOpen (the pipeline failed under --failure-mode open). The decode worker
// is chosen by load among the eligible ones (policy.Fallback; req's subset hint applies) and
// booked like a bypass, so fallbacks spread and are released like any request. req may be nil.
func (r *Router) Fallback(ctx context.Context, req *Request, reason policy.Reason) (out Outcome, err error) {
	if req == nil {
		req = &Request{}
	}
	t, ok := r.resolve(req.Model)
	if !ok {
		t = target{m: r.models[0]}
	}
	return r.fallback(t.m, req, reason)
}

// fallback is Fallback on model m.
func (r *Router) fallback(m *model, req *Request, reason policy.Reason) (out Outcome, err error) {
	booked := ""
	defer func() {
		if p := recover(); p != nil {
			if booked != "" {
				m.pool.Release(booked)
			}
			out, err = Outcome{}, fmt.Errorf("%w: %s: recovered panic: %v", ErrNoEligibleWorker, reason, p)
		}
	}()
	cfg := m.policy.Load()
	sc := r.scratch.Get().(*scratch)
	defer r.scratch.Put(sc)
	n := r.seq.Add(1)
	sc.pcg.Seed(r.seed, n)
	m.pool.Snapshot(&sc.snap, pool.Request{})
	if req.HasSubset && !filterSubset(&sc.snap, req.Subset) {
		return out, fmt.Errorf("%w: %s: subset %v", ErrSubsetNoMatch, reason, req.Subset)
	}
	in := policy.Input{Now: r.now()}
	dec := policy.Fallback(cfg, &in, &sc.snap, sc.rng, reason)
	if !dec.Routable() {
		return out, fmt.Errorf("%w: %s: no eligible decode worker", ErrNoEligibleWorker, reason)
	}
	id := "cd-" + strconv.FormatUint(n, 36)
	if err := m.pool.Book(Booking(&dec, id, nil)); err != nil {
		// The worker left between snapshot and booking; route there unbooked rather than fail
		// a request that asked for no decision.
		id = ""
	}
	out.BookingID, booked = id, id
	if id != "" {
		out.Ticket = r.newTicket(m, id, &dec, in.Now)
	}
	out.Model = m.name
	fill(&out, &dec, &sc.snap)
	if r.observe != nil {
		r.observe(&out)
	}
	return out, nil
}

// unread routes by load, with its own reason, a request whose prompt the router does not
// tokenize, so it has no prompt to decide on: a chat request that brings its own template (the
// router does not render a client's template; vLLM refuses it unless
// --trust-request-chat-template), or a prompt with a pre-token over Options.MaxPretokenBytes
// (its BPE would cost CPU out of proportion; the engine tokenizes it anyway and answers for
// it, and the decision costs no more CPU than the scan that found it).
func (r *Router) unread(m *model, req *Request, parsed Outcome, reason policy.Reason) (Outcome, error) {
	out, err := r.fallback(m, req, reason)
	if req.DryRun && out.BookingID != "" {
		out.Ticket.Cancel() // Explain books nothing
		out.BookingID, out.Ticket = "", nil
	}
	out.Body, out.Model, out.LoRA = parsed.Body, parsed.Model, parsed.LoRA
	return out, err
}

// unknownModel answers a request for a model name no model serves: refused, or routed as a
// passthrough (Options.UnknownModel) to the model whose least-loaded decode worker is the
// least loaded (lightestModel): nothing tells which engine may answer for the name, so the
// load decides, instead of piling every such request onto the first model's workers.
func (r *Router) unknownModel(ctx context.Context, req *Request, body Body, name string) (Outcome, error) {
	if r.unknown != UnknownPassthrough {
		return Outcome{Body: body}, &UnknownModelError{Model: name}
	}
	if err := ctx.Err(); err != nil {
		return Outcome{Body: body}, fmt.Errorf("%w: decide %s: %w", ErrInternal, req.Endpoint, err)
	}
	m := r.lightestModel()
	out, err := r.fallback(m, req, policy.ReasonPassthrough)
	if req.DryRun && out.BookingID != "" {
		out.Ticket.Cancel() // Explain books nothing
		out.BookingID, out.Ticket = "", nil
	}
	out.Body, out.UnknownModel = body, true
	return out, err
}

// lightestModel returns the model whose least-loaded eligible decode worker has the fewest
// active requests (then the fewest active decode blocks); the earlier model wins a tie, so an
// idle fleet sends unknown names to the first model, and a model without an eligible decode
// worker is passed over.
func (r *Router) lightestModel() *model {
	if len(r.models) == 1 {
		return r.models[0]
	}
	sc := r.scratch.Get().(*scratch)
	defer r.scratch.Put(sc)
	best, bestReq, bestBlocks := r.models[0], int64(-1), int64(0)
	for _, m := range r.models {
		m.pool.Snapshot(&sc.snap, pool.Request{})
		for _, w := range sc.snap.Decode {
			if bestReq < 0 || w.ActiveRequests < bestReq || (w.ActiveRequests == bestReq && w.ActiveDecodeBlocks < bestBlocks) {
				best, bestReq, bestBlocks = m, w.ActiveRequests, w.ActiveDecodeBlocks
			}
		}
	}
	return best
}

// filterSubset keeps the workers whose IP is in subset, in both pools: every worker a decision
// names can become the gateway's destination (the prefill worker on the prefill and
// prefill_local routes, the decode worker on the decode route), and the endpoint picker
// protocol allows only listed endpoints there. It reports false if no decode worker is left
// (nothing can serve); an emptied prefill pool only rules out the prefill placements.
func filterSubset(snap *policy.Snapshot, subset []string) bool {
	snap.Decode = keepInSubset(snap.Decode, subset)
	snap.Prefill = keepInSubset(snap.Prefill, subset)
	return len(snap.Decode) > 0
}

func keepInSubset(ws []policy.WorkerLoad, subset []string) []policy.WorkerLoad {
	kept := ws[:0]
	for _, w := range ws {
		if inSubset(w.Endpoint, subset) {
			kept = append(kept, w)
		}
	}
	return kept
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
