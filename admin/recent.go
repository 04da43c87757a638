package admin

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/decisionlog"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// RecentSource is what Recent asks of the ext_proc server (*extproc.Server satisfies it): the
// log its routed requests go to, and the transfer truth of the two-leg ones (remote prefill and
// handoff), by the Seq of each decision in that log.
type RecentSource interface {
	Recent() *decisionlog.Recent
	// TransfersByDecision returns the transfer of every decision whose Seq is in seqs and that
	// has one: classified, or ended unclassified (Outcome "").
	TransfersByDecision(seqs map[uint64]bool) map[uint64]decisionlog.Transfer
}

// TransferState is a recent decision's disaggregation truth as Admin Recent reports it: a
// classified outcome, or why there is none.
type TransferState string

const (
	// TransferPending: a two-leg request (remote prefill or handoff) still in flight.
	TransferPending TransferState = "pending"
	// TransferUnclassified: a two-leg request that ended without a classification: an error
	// answer, a stream error or a cancel, which say nothing about the transfer
	// (docs/disagg-truth.md §3).
	TransferUnclassified TransferState = "unclassified"
	// TransferNotRemote: every other placement (one leg); no transfer took place.
	TransferNotRemote TransferState = "not_remote"
)

// RecentDecision is one routed request joined with its transfer outcome.
type RecentDecision struct {
	Entry    decisionlog.Entry
	Transfer TransferState        // a classified outcome's text, TransferPending, TransferUnclassified or TransferNotRemote
	Record   decisionlog.Transfer // the classification; zero unless Transfer is an outcome
}

// RecentDecisions returns up to limit of the latest requests src routed, newest first, each
// with the transfer outcome of its decode leg when it ran two legs: a remote prefill, or a
// handoff (prefill on the decode worker holding the prefix, decode on another, the KV pulled
// as on the remote path, and classified by the same rule). Nil when src keeps no log.
func RecentDecisions(src RecentSource, limit int) []RecentDecision {
	log := src.Recent()
	if log == nil || limit <= 0 {
		return nil
	}
	entries := log.Latest(make([]decisionlog.Entry, 0, min(limit, log.Size())), limit)
	remote := make(map[uint64]bool)
	for _, e := range entries {
		if e.Placement == decisionlog.PlacementPrefill || e.Placement == decisionlog.PlacementHandoff {
			remote[e.Seq] = true
		}
	}
	judged := src.TransfersByDecision(remote)
	out := make([]RecentDecision, len(entries))
	for i, e := range entries {
		out[i] = RecentDecision{Entry: e, Transfer: TransferNotRemote}
		if !remote[e.Seq] {
			continue
		}
		out[i].Transfer = TransferPending
		switch r, ok := judged[e.Seq]; {
		case ok && r.Outcome == "":
			out[i].Transfer = TransferUnclassified
		case ok:
			out[i].Transfer, out[i].Record = TransferState(r.Outcome), r
		}
	}
	return out
}

// Recent bounds: the answer of the largest limit stays far below gRPC's 4 MiB message limit.
const (
	DefaultRecentLimit = 20
	MaxRecentLimit     = 1000
)

// Recent returns the latest routed decisions with their disaggregation truth.
func (a *Service) Recent(_ context.Context, req *condisaggv1.RecentRequest) (*condisaggv1.RecentResponse, error) {
	if a.opts.Server == nil {
		return nil, status.Error(codes.Unimplemented, "admin: recent: this Admin service has no ext_proc server to report")
	}
	limit := int(req.GetLimit())
	if limit > MaxRecentLimit {
		return nil, status.Errorf(codes.InvalidArgument, "limit: %d is above the maximum %d; ask for at most %d decisions",
			limit, MaxRecentLimit, MaxRecentLimit)
	}
	if limit == 0 {
		limit = DefaultRecentLimit
	}
	log := a.opts.Server.Recent()
	total, kept := log.Total(), log.Size()
	resp := &condisaggv1.RecentResponse{Total: total, Kept: uint32(kept)}
	for _, d := range RecentDecisions(a.opts.Server, limit) {
		e := &d.Entry
		pd := &condisaggv1.RecentDecision{Seq: e.Seq, At: timeText(e.At), RequestId: e.RequestID,
			BookingId: e.Record.BookingID, Model: e.Model, LoraAdapter: e.LoRA, Placement: decisionlog.PlacementNames[e.Placement],
			Route: e.Record.Route, Reason: e.Record.Reason, DecodeWorker: e.Record.Decode, PrefillWorker: e.Record.Prefill,
			Tokens: int64(e.Record.ISL), CachedTokens: int64(e.Record.Cached),
			LatencyMs: float64(e.Latency) / float64(time.Millisecond), Transfer: string(d.Transfer)}
		pd.SloTtftMs, pd.SloTpotMs, pd.Estimates = sloForecasts(&e.Inputs)
		pd.Fleet = fleetForecast(&e.Inputs.Fleet)
		if e.Record.Session != "" {
			pd.Session = &condisaggv1.SessionAffinity{Outcome: e.Record.Session, BoundWorker: e.Inputs.AffinityWorker}
		}
		if !d.Record.At.IsZero() {
			pd.TransferPromptTokens, pd.TransferCachedTokens = d.Record.PromptTokens, d.Record.CachedTokens
			pd.TransferAt = timeText(d.Record.At)
		}
		resp.Decisions = append(resp.Decisions, pd)
	}
	return resp, nil
}

func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
