package extproc

import (
	"github.com/condisagg/condisagg/decisionlog"
)

// TransferState is a recent decision's disaggregation truth as Admin Recent reports it: a
// classified outcome, or why there is none.
type TransferState string

const (
	// TransferPending: a remote prefill still in flight.
	TransferPending TransferState = "pending"
	// TransferUnclassified: a remote prefill that ended without a classification: an error
	// answer, a stream error or a cancel, which say nothing about the transfer
	// (docs/disagg-truth.md §3).
	TransferUnclassified TransferState = "unclassified"
	// TransferNotRemote: every other placement; no transfer took place.
	TransferNotRemote TransferState = "not_remote"
)

// RecentDecision is one routed request joined with its transfer outcome.
type RecentDecision struct {
	Entry    decisionlog.Entry
	Transfer TransferState  // a TransferOutcome's text, TransferPending, TransferUnclassified or TransferNotRemote
	Record   TransferRecord // the classification; zero unless Transfer is an outcome
}

// RecentDecisions returns up to limit of the latest routed requests, newest first, each with
// the transfer outcome of its decode leg when it went to remote prefill. Nil when the server
// keeps no Recent (ServerOptions.Recent).
func (s *Server) RecentDecisions(limit int) []RecentDecision {
	if s.recent == nil || limit <= 0 {
		return nil
	}
	entries := s.recent.Latest(make([]decisionlog.Entry, 0, min(limit, s.recent.Size())), limit)
	remote := make(map[uint64]bool)
	for _, e := range entries {
		if e.Placement == decisionlog.PlacementPrefill {
			remote[e.Seq] = true
		}
	}
	judged := s.transfers.byDecision(remote)
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

// RecentTotal is the number of requests routed since the start, and RecentKept how many of
// the latest the server keeps (0, 0 without a Recent).
func (s *Server) RecentTotal() (total uint64, kept int) { return s.recent.Total(), s.recent.Size() }
