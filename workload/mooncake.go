package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Limits of the Mooncake reader.
const (
	DefaultMaxLineBytes = 1 << 20 // a 126k-token prompt is ~2 KB of JSON
	maxHashID           = 1 << 62 // ids above are reserved for output and synthetic namespaces
	maxOutputTokens     = 1 << 20
	maxTimestampMS      = int64(1) << 40
)

// outputNamespace tags the segment ids of forced outputs (one per request index), so they
// never collide with trace hash ids.
const outputNamespace = uint64(1) << 63

// MooncakeOptions configure a MooncakeReader. The zero value is valid.
type MooncakeOptions struct {
	MaxLineBytes int    // longest accepted line; default DefaultMaxLineBytes
	IDOffset     uint64 // added to every hash id, so offset copies of a trace share nothing
}

// MooncakeReader streams a Mooncake JSONL trace (perf-model.md §7): one request per line,
// {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}, sorted by
// timestamp. Each hash id becomes a 512-token Segment (the last one partial), so prompts that
// share leading ids share exactly 512 tokens per id. Conversations are inferred from the
// shared leading ids (Session, Turn, Parent; see conversation). Unknown fields are ignored; blank lines
// are skipped. A MooncakeReader is not safe for concurrent use.
type MooncakeReader struct {
	lr     *lineReader
	opts   MooncakeOptions
	index  int   // Index of the next request
	lastTS int64 // timestamp of the previous request, ms
	// convs maps a conversation (its first two hash ids) to its last turn so far.
	convs    map[[2]uint64]turn
	sessions int64 // sessions numbered so far
}

// turn is a conversation's last request: its session, turn number and Index.
type turn struct {
	session int64
	turn    int
	index   int
}

// MaxConversations bounds the conversations a MooncakeReader follows; requests of later new
// conversations carry no session (-1).
const MaxConversations = 1 << 20

// NewMooncakeReader reads the trace from r.
func NewMooncakeReader(r io.Reader, opts MooncakeOptions) *MooncakeReader {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	return &MooncakeReader{lr: newLineReader(r, opts.MaxLineBytes), opts: opts}
}

// Next returns the next request, or io.EOF after the last one. Any other error names the
// line; the reader is not usable after it.
func (m *MooncakeReader) Next() (Request, error) {
	for {
		line, err := m.lr.next()
		if errors.Is(err, io.EOF) {
			return Request{}, io.EOF
		}
		if err != nil {
			return Request{}, fmt.Errorf("workload: mooncake %w", err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		rec, err := ParseMooncakeLine(line)
		if err != nil {
			return Request{}, fmt.Errorf("workload: mooncake line %d: %w", m.lr.line, err)
		}
		if rec.TimestampMS < m.lastTS {
			return Request{}, fmt.Errorf("workload: mooncake line %d: timestamp %d is before the previous line's %d (trace must be sorted)", m.lr.line, rec.TimestampMS, m.lastTS)
		}
		m.lastTS = rec.TimestampMS
		r := rec.request(m.index, m.opts.IDOffset)
		m.conversation(&r, rec.HashIDs)
		m.index++
		return r, nil
	}
}

// conversation fills r's Session, Turn and Parent. The trace names no conversations, but its
// hash ids are chained prefix hashes: the turns of one conversation repeat the conversation so
// far, so they share their leading ids. Block 0 is a system prompt nearly every request
// shares, so a conversation is keyed by its first two ids; a request of one block starts none.
// Its Parent is the conversation's previous request.
func (m *MooncakeReader) conversation(r *Request, ids []uint64) {
	if len(ids) < 2 {
		return
	}
	if m.convs == nil {
		m.convs = make(map[[2]uint64]turn)
	}
	k := [2]uint64{ids[0], ids[1]}
	prev, ok := m.convs[k]
	switch {
	case ok:
		r.Session, r.Turn, r.Parent = prev.session, prev.turn+1, prev.index
	case len(m.convs) >= MaxConversations:
		return
	default:
		r.Session, r.Turn = m.sessions, 0
		m.sessions++
	}
	m.convs[k] = turn{session: r.Session, turn: r.Turn, index: r.Index}
}

// ReadMooncake reads a whole trace, keeping requests while w admits them.
func ReadMooncake(r io.Reader, opts MooncakeOptions, w Window) ([]Request, error) {
	mr := NewMooncakeReader(r, opts)
	var out []Request
	for {
		req, err := mr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if !w.admits(len(out), req.Arrival) {
			return out, nil
		}
		out = append(out, req)
	}
}

// MooncakeRecord is one decoded, validated trace line.
type MooncakeRecord struct {
	TimestampMS  int64
	InputLength  int
	OutputLength int
	HashIDs      []uint64
}

type mooncakeJSON struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// ParseMooncakeLine decodes and validates one trace line: all four fields present, lengths
// and ids in range, and len(hash_ids) == ceil(input_length/512).
func ParseMooncakeLine(line []byte) (MooncakeRecord, error) {
	var j mooncakeJSON
	if err := json.Unmarshal(line, &j); err != nil {
		return MooncakeRecord{}, fmt.Errorf("decode: %w", err)
	}
	switch {
	case j.Timestamp == nil:
		return MooncakeRecord{}, errors.New(`missing field "timestamp"`)
	case j.InputLength == nil:
		return MooncakeRecord{}, errors.New(`missing field "input_length"`)
	case j.OutputLength == nil:
		return MooncakeRecord{}, errors.New(`missing field "output_length"`)
	case j.HashIDs == nil:
		return MooncakeRecord{}, errors.New(`missing field "hash_ids"`)
	}
	ts, in, out, ids := *j.Timestamp, *j.InputLength, *j.OutputLength, *j.HashIDs
	if ts < 0 || ts > maxTimestampMS {
		return MooncakeRecord{}, fmt.Errorf("timestamp %d is outside [0, %d]", ts, maxTimestampMS)
	}
	if in < 1 || in > int64(len(ids))*TraceBlockTokens {
		return MooncakeRecord{}, fmt.Errorf("input_length %d does not fit %d hash_ids of %d tokens", in, len(ids), TraceBlockTokens)
	}
	if want := (in + TraceBlockTokens - 1) / TraceBlockTokens; int64(len(ids)) != want {
		return MooncakeRecord{}, fmt.Errorf("hash_ids has %d ids, input_length %d needs %d", len(ids), in, want)
	}
	if out < 0 || out > maxOutputTokens {
		return MooncakeRecord{}, fmt.Errorf("output_length %d is outside [0, %d]", out, maxOutputTokens)
	}
	rec := MooncakeRecord{TimestampMS: ts, InputLength: int(in), OutputLength: int(out), HashIDs: make([]uint64, len(ids))}
	for i, id := range ids {
		if id < 0 || id >= maxHashID {
			return MooncakeRecord{}, fmt.Errorf("hash_ids[%d] = %d is outside [0, 2^62)", i, id)
		}
		rec.HashIDs[i] = uint64(id)
	}
	return rec, nil
}

// request turns the record into the index-th Request.
func (rec *MooncakeRecord) request(index int, idOffset uint64) Request {
	prompt := make([]Segment, len(rec.HashIDs))
	left := rec.InputLength
	for i, id := range rec.HashIDs {
		n := min(left, TraceBlockTokens)
		prompt[i] = Segment{ID: (id + idOffset) % maxHashID, Len: uint32(n)}
		left -= n
	}
	return Request{
		Index:        index,
		Arrival:      time.Duration(rec.TimestampMS) * time.Millisecond,
		Session:      -1,
		Turn:         -1,
		Parent:       -1,
		InputTokens:  rec.InputLength,
		OutputTokens: rec.OutputLength,
		Prompt:       prompt,
		Output:       outputSegments(idOffset, index, rec.OutputLength),
	}
}

// outputSegments is the forced output of request index: one segment in the output namespace.
func outputSegments(namespace uint64, index, n int) []Segment {
	if n == 0 {
		return nil
	}
	return []Segment{{ID: outputNamespace | (namespace+uint64(index))%maxHashID, Len: uint32(n)}}
}
