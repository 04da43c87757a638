package workload

import "time"

// TraceBlockTokens is the Mooncake hash-id block size: each hash id stands for 512 tokens.
const TraceBlockTokens = 512

// Segment is tokens Start..Start+Len-1 of the pseudo-token stream ID: token k of a stream is a
// pure function of (ID, k) and the Vocab (see Vocab.Token). Segments of the same stream give
// the same tokens at the same stream positions, whatever their lengths, so a conversation can
// be one growing stream whose prompts are its prefixes and whose outputs are its next tokens.
type Segment struct {
	ID    uint64
	Start uint32
	Len   uint32
}

// Request is one request of a workload. Its prompt is the concatenation of Prompt's segments
// (InputTokens tokens in total) and its forced output the concatenation of Output's
// (OutputTokens tokens); tokens are produced on demand by a Vocab, never stored.
//
// A Request is immutable once a reader or generator has returned it: Prompt and Output may
// share backing arrays with other requests of the same workload.
type Request struct {
	Index   int           // position in the workload, 0-based, in arrival order
	Arrival time.Duration // offset from the start of the workload

	// Session identifies a conversation or agent session and Turn the request's place in it
	// (0-based); both are -1 when the source does not say (Mooncake, Azure).
	Session int64
	Turn    int
	// Parent is the Index of the previous turn of the session, or -1. ThinkTime is the
	// delay the client waits after Parent completes before sending this request; closed-loop
	// replay sends at max(Arrival, completion(Parent)+ThinkTime), open-loop at Arrival.
	Parent    int
	ThinkTime time.Duration

	InputTokens  int
	OutputTokens int
	Prompt       []Segment
	Output       []Segment
}

// segmentsLen is the number of tokens the segments stand for.
func segmentsLen(segs []Segment) int {
	n := 0
	for _, s := range segs {
		n += int(s.Len)
	}
	return n
}
