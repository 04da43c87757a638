package extproc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/decisionlog"
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

// AdminOptions are the Admin service's collaborators; Router is required.
type AdminOptions struct {
	Router  *route.Router
	Streams StreamReporter // nil: no worker has an event stream
	// Reload re-reads and applies the configuration file; nil: ReloadConfig is unavailable.
	Reload func(ctx context.Context) error
	// Promote makes the shadow candidate live (ReloadConfig{promote_shadow}); nil: unavailable.
	Promote func(ctx context.Context) error
	// HTTPClient asks engines to reset their prefix cache (ResetPrefixCache); default: a
	// client with a 30 s timeout.
	HTTPClient *http.Client
	// Server is the ext_proc service whose recent decisions Recent reports; nil: Recent is
	// unavailable.
	Server *Server
	Now    func() time.Time // default time.Now
}

// Admin implements condisagg.v1.Admin.
type Admin struct {
	condisaggv1.UnimplementedAdminServer
	opts AdminOptions
}

// NewAdmin returns the Admin service.
func NewAdmin(opts AdminOptions) (*Admin, error) {
	if opts.Router == nil {
		return nil, fmt.Errorf("extproc: admin: router is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Admin{opts: opts}, nil
}

// Explain decides for an OpenAI request without booking anything.
func (a *Admin) Explain(ctx context.Context, req *condisaggv1.ExplainRequest) (*condisaggv1.ExplainResponse, error) {
	resp, err := a.explain(ctx, req.GetPath(), req.GetBody())
	if err != nil {
		return nil, adminStatus(err)
	}
	return resp, nil
}

func (a *Admin) explain(ctx context.Context, path string, body []byte) (*condisaggv1.ExplainResponse, error) {
	ep := route.ParseEndpoint(path)
	if ep == route.EndpointOther {
		return nil, fmt.Errorf("%w: path %q is not /v1/chat/completions or /v1/completions", route.ErrInvalidBody, path)
	}
	out, err := a.opts.Router.Decide(ctx, &route.Request{Endpoint: ep, Body: body, DryRun: true})
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
	for _, o := range out.Overlaps {
		resp.Overlaps = append(resp.Overlaps, &condisaggv1.WorkerOverlap{Worker: string(o.Worker),
			GpuBlocks: int64(o.GPU), CpuBlocks: int64(o.CPU), DiskBlocks: int64(o.Disk)})
	}
	return resp, nil
}

// ListWorkers reports every discovered worker of every served model, in model order.
func (a *Admin) ListWorkers(context.Context, *condisaggv1.ListWorkersRequest) (*condisaggv1.ListWorkersResponse, error) {
	resp := &condisaggv1.ListWorkersResponse{}
	for _, m := range a.opts.Router.Models() {
		resp.Workers = a.appendWorkers(resp.Workers, &m)
	}
	return resp, nil
}

// appendWorkers appends the workers of model m.
func (a *Admin) appendWorkers(dst []*condisaggv1.Worker, m *route.ModelInfo) []*condisaggv1.Worker {
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
func (a *Admin) ReloadConfig(ctx context.Context, req *condisaggv1.ReloadConfigRequest) (*condisaggv1.ReloadConfigResponse, error) {
	if req.GetPromoteShadow() {
		if a.opts.Promote == nil {
			return nil, adminStatus(errNoReload)
		}
		if err := a.opts.Promote(ctx); err != nil {
			return &condisaggv1.ReloadConfigResponse{Applied: false, Message: err.Error()}, nil
		}
		return &condisaggv1.ReloadConfigResponse{Applied: true, Message: "shadow config promoted: live until the next reload from the file"}, nil
	}
	if a.opts.Reload == nil {
		return nil, adminStatus(errNoReload)
	}
	if err := a.opts.Reload(ctx); err != nil {
		return &condisaggv1.ReloadConfigResponse{Applied: false, Message: err.Error()}, nil
	}
	return &condisaggv1.ReloadConfigResponse{Applied: true, Message: "configuration reloaded"}, nil
}

// Shadow reports the candidate config's agreement with the live one.
func (a *Admin) Shadow(context.Context, *condisaggv1.ShadowRequest) (*condisaggv1.ShadowResponse, error) {
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

// sloForecasts are the slo policy's objective (ms) and forecast per placement; zero and nil for
// the other policies.
func sloForecasts(in *policy.Inputs) (ttftMs, tpotMs float64, est []*condisaggv1.PlacementEstimate) {
	if in.Policy != policy.SLOKind {
		return 0, 0, nil
	}
	for _, r := range policy.Routes() {
		e := in.Estimates[r]
		est = append(est, &condisaggv1.PlacementEstimate{Placement: r.String(),
			Valid: e.Valid, PrefillWorker: e.Prefill, DecodeWorker: e.Decode, TtftMs: e.TTFTms, TpotMs: e.TPOTms,
			ExistingTpotMs: e.ExistingTPOTms, Headroom: e.Headroom, CachedTokens: int64(e.CachedTokens),
			TransferTokens: int64(e.TransferTokens), TtftFactor: e.TTFTFactor, TpotFactor: e.TPOTFactor})
	}
	return in.SLO.TTFT.Seconds() * 1000, in.SLO.TPOT.Seconds() * 1000, est
}

// Recent bounds: the answer of the largest limit stays far below gRPC's 4 MiB message limit.
const (
	DefaultRecentLimit = 20
	MaxRecentLimit     = 1000
)

// Recent returns the latest routed decisions with their disaggregation truth.
func (a *Admin) Recent(_ context.Context, req *condisaggv1.RecentRequest) (*condisaggv1.RecentResponse, error) {
	if a.opts.Server == nil {
		return nil, status.Error(codes.Unimplemented, "extproc: recent: this Admin service has no ext_proc server to report")
	}
	limit := int(req.GetLimit())
	if limit > MaxRecentLimit {
		return nil, status.Errorf(codes.InvalidArgument, "limit: %d is above the maximum %d; ask for at most %d decisions",
			limit, MaxRecentLimit, MaxRecentLimit)
	}
	if limit == 0 {
		limit = DefaultRecentLimit
	}
	total, kept := a.opts.Server.RecentTotal()
	resp := &condisaggv1.RecentResponse{Total: total, Kept: uint32(kept)}
	for _, d := range a.opts.Server.RecentDecisions(limit) {
		e := &d.Entry
		pd := &condisaggv1.RecentDecision{Seq: e.Seq, At: timeText(e.At), RequestId: e.RequestID,
			BookingId: e.Record.BookingID, Model: e.Model, LoraAdapter: e.LoRA, Placement: decisionlog.PlacementNames[e.Placement],
			Route: e.Record.Route, Reason: e.Record.Reason, DecodeWorker: e.Record.Decode, PrefillWorker: e.Record.Prefill,
			Tokens: int64(e.Record.ISL), CachedTokens: int64(e.Record.Cached),
			LatencyMs: float64(e.Latency) / float64(time.Millisecond), Transfer: string(d.Transfer)}
		pd.SloTtftMs, pd.SloTpotMs, pd.Estimates = sloForecasts(&e.Inputs)
		if !d.Record.At.IsZero() {
			pd.TransferPromptTokens, pd.TransferCachedTokens = d.Record.PromptTokens, d.Record.CachedTokens
			pd.TransferAt = timeText(d.Record.At)
		}
		resp.Decisions = append(resp.Decisions, pd)
	}
	return resp, nil
}

func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
