package extproc

import (
	"sync"
	"time"
)

// TransferOutcome says whether the decode leg of a remote-prefill request used the KV the
// prefill worker sent (docs/disagg-truth.md).
type TransferOutcome string

// The outcomes of condisagg_disagg_transfers_total.
const (
	// TransferTransferred: the decode worker reported the prompt as cached up to at least its
	// last token but one (vLLM 0.32 reports L after a complete NIXL read, earlier versions
	// L-1).
	TransferTransferred TransferOutcome = "transferred"
	// TransferRecomputed: it reported less, so it computed part of the prompt again (a
	// failed read under kv_load_failure_policy=recompute, or the sidecar's local fallback
	// after a failed prefill leg).
	TransferRecomputed TransferOutcome = "recomputed"
	// TransferFailed: the decode worker could not load the KV and answered an error (vLLM's
	// default kv_load_failure_policy=fail); pd-sidecar then had it prefill the prompt locally.
	TransferFailed TransferOutcome = "failed"
	// TransferUnknown: the answer said nothing usable (no usage, no cached_tokens from a
	// worker not yet seen to report them, a usage rewritten by the sidecar, or a low count
	// that did not come through pd-sidecar and may be the prefill worker's own hit).
	TransferUnknown TransferOutcome = "unknown"
)

// What pd-sidecar says on the response (its X-Condisagg-KV-Transfer header) about the KV of a
// remote request; sidecarUnreported when the header is absent.
const (
	sidecarUnreported = ""
	sidecarPulled     = "pulled"    // D's usage is D's own count
	sidecarRewritten  = "rewritten" // D's usage was replaced with P's (--rewrite-usage)
	sidecarFailed     = "failed"    // D could not load the KV; prefilled locally on a retry
	sidecarFallback   = "fallback"  // the prefill leg failed; D prefilled locally
)

// classifyTransfer is the rule of docs/disagg-truth.md §3 for the decode leg's usage:
// promptTokens is usage.prompt_tokens (L), cachedTokens usage.prompt_tokens_details.
// cached_tokens (-1: absent or null), sidecar the sidecar's report. vLLM before 0.32 omits
// prompt_tokens_details when nothing was cached, so an absent value means 0 for a worker that
// has been seen to report it (reportsDetails) and unknown otherwise. vLLM 0.32 reports the
// prefill engine's hit instead of its own when the decode leg carries
// remote_prefill_cached_tokens; pd-sidecar removes it (sidecarPulled), and without that
// report only a count of L-1 or more proves anything.
func classifyTransfer(hasUsage bool, promptTokens, cachedTokens int64, reportsDetails bool, sidecar string) TransferOutcome {
	switch sidecar {
	case sidecarFailed:
		return TransferFailed
	case sidecarFallback:
		return TransferRecomputed
	case sidecarRewritten:
		return TransferUnknown
	}
	switch {
	case !hasUsage || promptTokens <= 0:
		return TransferUnknown
	case cachedTokens < 0 && !reportsDetails:
		return TransferUnknown
	case cachedTokens >= promptTokens-1:
		return TransferTransferred
	case sidecar != sidecarPulled:
		return TransferUnknown
	default:
		return TransferRecomputed
	}
}

// TransferRecord is one classified remote-prefill request, for Explain and the status page.
type TransferRecord struct {
	At           time.Time
	Decision     uint64 // the decision's decisionlog.Entry.Seq (0: the server keeps no Recent)
	RequestID    string
	Prefill      string // prefill worker id
	Decode       string // decode worker id
	Outcome      TransferOutcome
	PromptTokens int64
	CachedTokens int64 // -1: not reported
	// PrefillCachedTokens is the prefill worker's own prefix-cache hit as pd-sidecar reported
	// it (X-Condisagg-Prefill-Cached-Tokens); -1: not reported.
	PrefillCachedTokens int64
	// Sidecar is pd-sidecar's X-Condisagg-KV-Transfer ("" when absent).
	Sidecar string
}

// transferLog remembers which decode workers report cached_tokens and keeps the most recent
// classified requests in a ring. Safe for concurrent use.
type transferLog struct {
	mu      sync.Mutex      // guards details, ring, next, full, ended, endNext
	details map[string]bool // decode worker id → it has reported cached_tokens
	ring    []TransferRecord
	next    int
	full    bool
	// ended is a ring of the decisions (decisionlog.Entry.Seq) of remote-prefill requests whose
	// stream ended without a classification (an error, a cancel); as long as ring.
	ended   []uint64
	endNext int
}

// recentTransfers is how many classified requests the log keeps.
const recentTransfers = 256

func newTransferLog(size int) *transferLog {
	return &transferLog{details: make(map[string]bool), ring: make([]TransferRecord, size), ended: make([]uint64, size)}
}

// classify records that decode answered a remote-prefill request with this usage and returns
// the outcome (the record is filled in and kept).
func (l *transferLog) classify(rec TransferRecord, hasUsage bool) TransferOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hasUsage && rec.CachedTokens >= 0 {
		l.details[rec.Decode] = true
	}
	rec.Outcome = classifyTransfer(hasUsage, rec.PromptTokens, rec.CachedTokens, l.details[rec.Decode], rec.Sidecar)
	l.ring[l.next] = rec
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
	return rec.Outcome
}

// endedUnclassified records that the remote-prefill request of decision seq ended without a
// classification (0: the server keeps no Recent, nothing to join with).
func (l *transferLog) endedUnclassified(seq uint64) {
	if seq == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended[l.endNext] = seq
	l.endNext = (l.endNext + 1) % len(l.ended)
}

// byDecision returns the records of the decisions whose Seq is in seqs (0 never matches); a
// request that ended unclassified has a record with only Decision set (Outcome "").
func (l *transferLog) byDecision(seqs map[uint64]bool) map[uint64]TransferRecord {
	out := make(map[uint64]TransferRecord, len(seqs))
	if len(seqs) == 0 {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, seq := range l.ended {
		if seq != 0 && seqs[seq] {
			out[seq] = TransferRecord{Decision: seq}
		}
	}
	for _, r := range l.ring {
		if r.Decision != 0 && seqs[r.Decision] {
			out[r.Decision] = r
		}
	}
	return out
}

// latest returns up to limit records, newest first.
func (l *transferLog) latest(limit int) []TransferRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	n = min(n, limit)
	out := make([]TransferRecord, 0, n)
	for i := range n {
		out = append(out, l.ring[(l.next-1-i+len(l.ring))%len(l.ring)])
	}
	return out
}
