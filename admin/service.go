package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/route"
)

// StreamInfo is one worker's KV event stream state for ListWorkers.
type StreamInfo struct {
	Connected   bool
	LastSeq     uint64
	HasLastSeq  bool
	Gaps        uint64
	Replays     uint64
	ReplaysLost uint64
	LastEvent   time.Time // zero: no event yet
}

// StreamReporter reports the event stream of a worker; false when it has none.
type StreamReporter interface {
	StreamInfo(worker string) (StreamInfo, bool)
}

// Decider is what Explain asks of the decision pipeline: a dry-run decision and the policy
// config in force.
type Decider interface {
	Decide(ctx context.Context, req *route.Request) (route.Outcome, error)
	Policy() *policy.Config
}

// Fleet is what ListWorkers and ResetPrefixCache ask of it: every served model with its pool
// and index.
type Fleet interface {
	Models() []route.ModelInfo
}

// Router is everything the Service asks of the decision pipeline; *route.Router satisfies it.
type Router interface {
	Decider
	Fleet
	// ShadowStats is the shadow candidate's agreement with the live config (Shadow).
	ShadowStats() route.ShadowStats
}

// Options are the Service's collaborators; Router is required.
type Options struct {
	Router  Router
	Streams StreamReporter // nil: no worker has an event stream
	// Reload re-reads and applies the configuration file; nil: ReloadConfig is unavailable.
	Reload func(ctx context.Context) error
	// Promote makes the shadow candidate live (ReloadConfig{promote_shadow}); nil: unavailable.
	Promote func(ctx context.Context) error
	// HTTPClient asks engines to reset their prefix cache (ResetPrefixCache); default: a
	// client with a 30 s timeout.
	HTTPClient *http.Client
	// Server is the ext_proc server whose recent decisions Recent reports; nil: Recent is
	// unavailable.
	Server RecentSource
	Now    func() time.Time // default time.Now
}

// Service implements condisagg.v1.Admin.
type Service struct {
	condisaggv1.UnimplementedAdminServer
	opts Options
}

// New returns the Admin service.
func New(opts Options) (*Service, error) {
	if opts.Router == nil {
		return nil, fmt.Errorf("admin: router is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Service{opts: opts}, nil
}

// Explain decides for an OpenAI request without booking anything.
func (a *Service) Explain(ctx context.Context, req *condisaggv1.ExplainRequest) (*condisaggv1.ExplainResponse, error) {
	resp, err := a.explain(ctx, req.GetPath(), req.GetBody(), req.GetSession())
	if err != nil {
		return nil, statusOf(err)
	}
	return resp, nil
}

func (a *Service) explain(ctx context.Context, path string, body []byte, session string) (*condisaggv1.ExplainResponse, error) {
	ep := route.ParseEndpoint(path)
	if ep == route.EndpointOther {
		return nil, fmt.Errorf("%w: path %q is not /v1/chat/completions or /v1/completions", route.ErrInvalidBody, path)
	}
	if len(session) > route.MaxSessionIDBytes {
		return nil, fmt.Errorf("%w: session id of %d bytes is over %d", route.ErrInvalidBody, len(session), route.MaxSessionIDBytes)
	}
	out, err := a.opts.Router.Decide(ctx, &route.Request{Endpoint: ep, Body: body, DryRun: true, Session: session})
	if err != nil {
		return nil, err
	}
	in := &out.Decision.Inputs
	resp := &condisaggv1.ExplainResponse{
		Route: out.Route.String(), Reason: out.Reason, Gate: out.Decision.Gate.String(),
		Policy: string(a.opts.Router.Policy().Disagg.Policy), Tokens: int64(out.Tokens), BlockKeys: int64(out.Keys),
		DecodeWorker: out.Decode.ID, DecodeEndpoint: out.Decode.Endpoint,
		PrefillWorker: out.Prefill.ID, PrefillEndpoint: out.Prefill.Endpoint,
		Destination: out.Destination().Endpoint,
		Model:       out.Model, LoraAdapter: out.LoRA, UnknownModel: out.UnknownModel,
		Inputs: &condisaggv1.PolicyInputs{
			SnapshotVersion: in.SnapshotVersion, PreviewDecode: in.PreviewDecode,
			OverlapBlocks: int64(in.Overlap), HostBlocks: int64(in.HostBlocks), DiskBlocks: int64(in.DiskBlocks),
			CachedTokens: int64(in.Cached), EffectiveIsl: int64(in.Eff), Ratio: in.Ratio,
			EffIslThreshold: in.EffISLThreshold, RatioThreshold: in.RatioThreshold, Silent: in.Silent,
			PrefillPreviewed: in.PrefillPreviewed, PrefillBusy: in.PrefillBusy.String(),
			PrefillRejected: in.PrefillRejected, PrefillActiveTokens: in.PrefillActive,
			PrefillBudget: in.PrefillBudget, PrefillCachedTokens: int64(in.PrefillCached),
			ProjectedDecodeBlocks: in.ProjectedBlocks, KvCapacityBlocks: in.KVCapacity,
			DecodeBusyThreshold: in.DecodeBusy, GuardEnabled: in.GuardEnabled,
		},
	}
	if in.Err != nil {
		resp.Inputs.Error = in.Err.Error()
	}
	resp.Inputs.SloTtftMs, resp.Inputs.SloTpotMs, resp.Inputs.Estimates = sloForecasts(in)
	resp.Inputs.Fleet = fleetForecast(&in.Fleet)
	if out.Session.ID != "" {
		resp.Session = &condisaggv1.SessionAffinity{Outcome: out.Session.Outcome.String(), BoundWorker: out.Session.Bound}
	}
	for _, o := range out.Overlaps {
		resp.Overlaps = append(resp.Overlaps, &condisaggv1.WorkerOverlap{Worker: string(o.Worker),
			GpuBlocks: int64(o.GPU), CpuBlocks: int64(o.CPU), DiskBlocks: int64(o.Disk)})
	}
	return resp, nil
}

// ListWorkers reports every discovered worker of every served model, in model order.
func (a *Service) ListWorkers(context.Context, *condisaggv1.ListWorkersRequest) (*condisaggv1.ListWorkersResponse, error) {
	resp := &condisaggv1.ListWorkersResponse{}
	for _, m := range a.opts.Router.Models() {
		resp.Workers = a.appendWorkers(resp.Workers, &m)
	}
	return resp, nil
}

// appendWorkers appends the workers of model m.
func (a *Service) appendWorkers(dst []*condisaggv1.Worker, m *route.ModelInfo) []*condisaggv1.Worker {
	now := a.opts.Now()
	for _, w := range m.Pool.Workers() {
		pw := &condisaggv1.Worker{Id: w.ID, Name: w.Name, Role: string(w.Role), Endpoint: w.Endpoint, Model: m.Name,
			Healthy: w.Healthy, KvCapacityBlocks: w.KVCapacityBlocks, MaxBatchedTokens: w.MaxBatchedTokens,
			ActivePrefillTokens: w.ActivePrefillTokens, ActiveDecodeBlocks: w.ActiveDecodeBlocks,
			ActiveRequests: w.ActiveRequests}
		if st, ok := m.Index.Stats(kvindex.WorkerID(w.ID)); ok {
			pw.IndexedGpuBlocks = int64(st.Blocks[kvindex.GPU])
			pw.IndexedCpuBlocks = int64(st.Blocks[kvindex.CPU])
			pw.IndexedDiskBlocks = int64(st.Blocks[kvindex.Disk])
		}
		if a.opts.Streams != nil {
			if si, ok := a.opts.Streams.StreamInfo(w.ID); ok {
				age := -1.0
				if !si.LastEvent.IsZero() {
					age = now.Sub(si.LastEvent).Seconds()
				}
				pw.Events = &condisaggv1.EventStream{Connected: si.Connected, LastSeq: si.LastSeq,
					HasLastSeq: si.HasLastSeq, Gaps: si.Gaps, Replays: si.Replays, ReplaysLost: si.ReplaysLost,
					LastEventAgeSeconds: age}
			}
		}
		dst = append(dst, pw)
	}
	return dst
}

// ReloadConfig re-reads the configuration; a rejected file keeps the old configuration.
func (a *Service) ReloadConfig(ctx context.Context, req *condisaggv1.ReloadConfigRequest) (*condisaggv1.ReloadConfigResponse, error) {
	if req.GetPromoteShadow() {
		if a.opts.Promote == nil {
			return nil, statusOf(errNoReload)
		}
		if err := a.opts.Promote(ctx); err != nil {
			return &condisaggv1.ReloadConfigResponse{Applied: false, Message: err.Error()}, nil
		}
		return &condisaggv1.ReloadConfigResponse{Applied: true, Message: "shadow config promoted: live until the next reload from the file"}, nil
	}
	if a.opts.Reload == nil {
		return nil, statusOf(errNoReload)
	}
	if err := a.opts.Reload(ctx); err != nil {
		return &condisaggv1.ReloadConfigResponse{Applied: false, Message: err.Error()}, nil
	}
	return &condisaggv1.ReloadConfigResponse{Applied: true, Message: "configuration reloaded"}, nil
}

// Shadow reports the candidate config's agreement with the live one.
func (a *Service) Shadow(context.Context, *condisaggv1.ShadowRequest) (*condisaggv1.ShadowResponse, error) {
	st := a.opts.Router.ShadowStats()
	resp := &condisaggv1.ShadowResponse{LiveConfig: a.opts.Router.Policy().Disagg.String(), CandidateConfig: st.Config,
		Decisions: st.Decisions, SameRoute: st.SameRoute, SameWorkers: st.SameWorkers,
		CandidateReasons: st.ByReason, Forecasts: st.Forecasts}
	for _, l := range policy.Routes() {
		for _, c := range policy.Routes() {
			if n := st.ByRoute[l][c]; n > 0 {
				resp.Pairs = append(resp.Pairs, &condisaggv1.RoutePair{LiveRoute: l.String(), CandidateRoute: c.String(), Count: n})
			}
		}
	}
	if st.Forecasts > 0 {
		n := float64(st.Forecasts)
		resp.LiveTtftMsMean, resp.CandidateTtftMsMean = st.LiveTTFTmsSum/n, st.ShadowTTFTmsSum/n
		resp.LiveHeadroomMean, resp.CandidateHeadroomMean = st.LiveHeadroomSum/n, st.ShadowHeadroomSum/n
	}
	return resp, nil
}

// sloForecasts are the slo policy's objective (ms) and forecast per placement (the handoff's
// only when it was priced); zero and nil for the other policies.
func sloForecasts(in *policy.Inputs) (ttftMs, tpotMs float64, est []*condisaggv1.PlacementEstimate) {
	if in.Policy != policy.SLOKind {
		return 0, 0, nil
	}
	for _, r := range policy.Routes() {
		e := in.Estimates[r]
		if r == policy.RouteHandoff && !e.Valid {
			continue // priced only with slo_handoff on, and only where a holder and a decoder exist
		}
		est = append(est, &condisaggv1.PlacementEstimate{Placement: r.String(),
			Valid: e.Valid, PrefillWorker: e.Prefill, DecodeWorker: e.Decode, TtftMs: e.TTFTms, TpotMs: e.TPOTms,
			ExistingTpotMs: e.ExistingTPOTms, Headroom: e.Headroom, CachedTokens: int64(e.CachedTokens),
			TransferTokens: int64(e.TransferTokens), TtftFactor: e.TTFTFactor, TpotFactor: e.TPOTFactor})
	}
	return in.SLO.TTFT.Seconds() * 1000, in.SLO.TPOT.Seconds() * 1000, est
}

// fleetForecast is the slo policy's steady-state view (slo_fleet); nil without one.
func fleetForecast(f *policy.FleetForecast) *condisaggv1.FleetForecast {
	if f.View.Window <= 0 {
		return nil
	}
	pool := func(r policy.PoolRates, util float64) *condisaggv1.PoolRates {
		return &condisaggv1.PoolRates{Requests: r.Requests, PrefillTokens: r.PrefillTokens, OutputTokens: r.OutputTokens,
			QueueGrowth: r.QueueGrowth, PrefillUtil: util}
	}
	regime := func(r policy.Regime) *condisaggv1.FleetRegime {
		return &condisaggv1.FleetRegime{Valid: r.Valid, Workers: int32(r.Workers), PrefillUtil: r.Util, Saturated: r.Saturated,
			WaitMs: r.WaitMS, TtftMs: r.TTFTms, TpotMs: r.TPOTms, Headroom: r.Headroom}
	}
	return &condisaggv1.FleetForecast{WindowMs: float64(f.View.Window) / float64(time.Millisecond),
		DecodePool: pool(f.View.Decode, f.DecodeUtil), PrefillPool: pool(f.View.Prefill, f.PrefillUtil),
		Aggregated: regime(f.Aggregated), Split: regime(f.Split), OutputPerRequest: f.OutputPerRequest}
}
