package extproc

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/condisagg/condisagg/decisionlog"
)

// ProcessStream is what Process needs of a gRPC stream.
type ProcessStream interface {
	Context() context.Context
	Recv() (*extprocv3.ProcessingRequest, error)
	Send(*extprocv3.ProcessingResponse) error
}

// Server is the ext_proc service. It holds no per-stream state.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	router      Router
	settings    atomic.Pointer[Settings]
	metrics     *Metrics
	log         *slog.Logger
	warnedModes atomic.Bool  // the STREAMED-mode misconfiguration was logged
	afterStream func()       // tests: called when a stream's cleanup is done
	policyWarn  atomic.Int64 // unix nanoseconds of the last policy-error warning
	fixed       fixedResponses
	slots       *slots              // decision slots (ServerOptions.DecisionConcurrency)
	receivers   sync.WaitGroup      // one receive goroutine per open stream
	recent      *decisionlog.Recent // the status page's recent decisions and placement mix; nil: none kept
	transfers   *transferLog        // remote-prefill requests' transfer outcomes (docs/disagg-truth.md)
	onHeld      func(int)           // tests: each stream's held bytes after each message
	buffered    atomic.Int64        // bytes every open stream holds (the sum of their heldBytes)
	warnLog     logThrottle         // per-request warnings (client strings in them)
	now         func() time.Time
}

// policyErrorEvery rate-limits the remote_policy_error warning.
const policyErrorEvery = 10 * time.Second

// warnPolicyError logs a fail-open-to-disaggregation decision at most once per
// policyErrorEvery (conditional-disagg.md §3 "Errors").
func (s *Server) warnPolicyError(requestID string, err error) {
	now := time.Now().UnixNano()
	last := s.policyWarn.Load()
	if now-last < int64(policyErrorEvery) || !s.policyWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("conditional disagg decision failed; falling back to remote prefill", "request_id", requestID, "err", err)
}

// ServerOptions are the Server's collaborators. Router, Settings and Metrics are required.
type ServerOptions struct {
	Router   Router    // the decision pipeline
	Settings *Settings // validated here; Settings.Policy is handed to the router
	Metrics  *Metrics
	Logger   *slog.Logger // nil discards
	// DecisionConcurrency bounds the decisions that run at once (ext_proc messages that are
	// not decisions are never limited); 0 = GOMAXPROCS.
	DecisionConcurrency int
	// Recent, if set, records every routed request's outcome (decisions and fallbacks, not
	// rejections, not Explain) for the status page.
	Recent *decisionlog.Recent
	// Now is the clock of what the response phase reports to a request's route.Ticket (its
	// first token, its end), from which the slo controller learns latencies; nil: time.Now.
	// Tests that replay a virtual timeline set it; timeouts always run on the wall clock.
	Now func() time.Time
}

// NewServer returns the ext_proc service over opts.Router.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Router == nil || opts.Metrics == nil || opts.Settings == nil {
		return nil, errors.New("extproc: server: Router, Settings and Metrics are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DecisionConcurrency < 0 {
		return nil, errors.New("extproc: server: DecisionConcurrency must be >= 0")
	}
	if opts.DecisionConcurrency == 0 {
		opts.DecisionConcurrency = runtime.GOMAXPROCS(0)
	}
	s := &Server{router: opts.Router, metrics: opts.Metrics, log: opts.Logger, fixed: newFixedResponses(),
		slots: newSlots(opts.DecisionConcurrency), recent: opts.Recent,
		// At least as many transfer records as decisions, so that a kept remote decision's
		// outcome is normally kept too (TransfersByDecision).
		transfers: newTransferLog(max(recentTransfers, opts.Recent.Size())), now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.Reload(opts.Settings); err != nil {
		return nil, err
	}
	return s, nil
}

// PromoteShadow makes the candidate policy config of the settings in force the live one (and
// removes the candidate) until the next reload from the configuration file.
func (s *Server) PromoteShadow() error {
	cur := s.settings.Load()
	if cur.Shadow == nil {
		return errors.New("extproc: no shadow_disagg_config to promote")
	}
	next := *cur
	next.Policy, next.Shadow = cur.Shadow, nil
	return s.Reload(&next)
}

// Settings returns the settings in force.
func (s *Server) Settings() *Settings { return s.settings.Load() }

// Reload validates set and swaps it in, with its policy config on the router; on error the old
// settings stay. A stream keeps the settings it started with.
func (s *Server) Reload(set *Settings) error {
	if err := set.Validate(); err != nil {
		return err
	}
	if err := s.router.SetPolicy(set.Policy); err != nil {
		return err
	}
	// A reload keeps the candidate's counts when the candidate is unchanged.
	if cur := s.router.ShadowConfig(); (cur == nil) != (set.Shadow == nil) || (cur != nil && cur.Disagg.String() != set.Shadow.Disagg.String()) {
		if err := s.router.SetShadow(set.Shadow); err != nil {
			return err
		}
	}
	s.settings.Store(set)
	return nil
}

// RecentTransfers returns up to limit of the latest classified remote-prefill requests, newest
// first (docs/disagg-truth.md).
func (s *Server) RecentTransfers(limit int) []TransferRecord { return s.transfers.latest(limit) }

// Recent returns the log every routed request is added to (ServerOptions.Recent); nil when
// the server keeps none.
func (s *Server) Recent() *decisionlog.Recent { return s.recent }

// TransfersByDecision returns the transfer outcome of every remote-prefill decision whose
// decisionlog Seq is in seqs and whose answer was classified (docs/disagg-truth.md), or whose
// stream ended without a classification (Outcome ""); a decision still in flight, or one the
// transfer log no longer keeps, has none.
func (s *Server) TransfersByDecision(seqs map[uint64]bool) map[uint64]decisionlog.Transfer {
	recs := s.transfers.byDecision(seqs)
	out := make(map[uint64]decisionlog.Transfer, len(recs))
	for seq, r := range recs {
		out[seq] = decisionlog.Transfer{Outcome: string(r.Outcome), At: r.At, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens}
	}
	return out
}

// UpdateSilence evaluates every worker's event stream (route.Router.UpdateSilence) and sets
// condisagg_kv_events_silent_workers; it returns the workers whose state changed.
func (s *Server) UpdateSilence(now time.Time, prev map[string]bool) []string {
	ev := s.router.UpdateSilence(now, prev)
	for role, n := range ev.Silent {
		s.metrics.SilentWorkers.WithLabelValues(string(role)).Set(float64(n))
	}
	return ev.Changed
}

// Process runs one ext_proc stream (one HTTP request): receive, step the per-stream machine,
// send its answers. It returns nil when Envoy closes the stream or the client goes away.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	return s.process(stream)
}

// A receive goroutine feeds the loop one message at a time (it receives the next only once
// the loop took the last, so HTTP/2 flow control still holds the sender back), which lets the
// loop end a stream whose request stalls for stream_idle_timeout.
func (s *Server) process(stream ProcessStream) error {
	ctx := stream.Context()
	s.metrics.ActiveStreams.Inc()
	x := newExchange(s)
	x.client = connKey(ctx)
	defer func() {
		x.end()
		x.unaccount()
		s.metrics.ActiveStreams.Dec()
		if s.afterStream != nil {
			s.afterStream()
		}
	}()
	in := make(chan received)
	s.receivers.Add(1)
	go s.receive(ctx, stream, in)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	b := x.nextBound(time.Now())
	timer.Reset(b.after)
	for {
		var r received
		select {
		case r = <-in:
		case <-ctx.Done(): // the client went away (the receive goroutine may not pass that on)
			r.err = ctx.Err()
		case <-timer.C:
			if b.kind == boundUnanswered {
				x.releaseUnanswered()
				b = x.nextBound(time.Now())
				if b.kind != boundNone {
					timer.Reset(b.after)
				}
				continue
			}
			return x.requestExpired(stream, b)
		}
		if r.err != nil {
			return s.ended("recv", r.err)
		}
		for _, resp := range x.Step(ctx, r.req) {
			if err := stream.Send(resp); err != nil {
				return s.ended("send", err)
			}
		}
		x.account()
		timer.Stop()
		if b = x.nextBound(time.Now()); b.kind != boundNone {
			timer.Reset(b.after)
		}
	}
}

// received is one Recv result.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// receive passes stream's messages to process until Recv fails. Its owner is process; it stops
// when the stream ends (gRPC cancels the stream context once Process returns, which fails the
// pending Recv) and Wait waits for it.
func (s *Server) receive(ctx context.Context, stream ProcessStream, out chan<- received) {
	defer s.receivers.Done()
	for {
		req, err := stream.Recv()
		select {
		case out <- received{req, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Wait returns once the receive goroutine of every stream has exited; call it after the gRPC
// server stopped (Serve returned).
func (s *Server) Wait() { s.receivers.Wait() }

// ended turns a Recv/Send failure into the stream's result, counting real errors.
func (s *Server) ended(op string, err error) error {
	res, label := streamEnd(op, err)
	if label != "" {
		s.metrics.StreamErrors.WithLabelValues(label).Inc()
		s.log.Warn("ext_proc stream failed", "op", op, "err", err)
	}
	return res
}
