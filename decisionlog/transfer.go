package decisionlog

import "time"

// Transfer is what became of the KV transfer of a remote-prefill decision, as the ext_proc
// server classified it from the decode worker's answer (docs/disagg-truth.md §3): a later fact
// about the decision, joined to its Entry by Seq. extproc produces it; Admin Recent reports it.
type Transfer struct {
	// Outcome is the classification (transferred, recomputed, failed or unknown); "" for a
	// request whose stream ended without one (an error answer, a stream error, a cancel).
	Outcome      string
	At           time.Time // when it was classified; zero without an Outcome
	PromptTokens int64     // the decode leg's usage.prompt_tokens
	CachedTokens int64     // its cached_tokens; -1: not reported
}
