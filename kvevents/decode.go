package kvevents

import (
	"errors"
	"fmt"
	"math"

	"github.com/tinylib/msgp/msgp"
)

// Default decode limits (see Limits).
const (
	DefaultMaxEvents = 1 << 16 // events per batch
	DefaultMaxHashes = 1 << 16 // block hashes per event: 1 Mi tokens at block size 16
	DefaultMaxTokens = 1 << 21 // token ids per event
)

// Limits bound the work and memory of decoding one batch. A field <= 0 takes its default. A
// batch over a limit is rejected as a whole (an error wrapping ErrLimit and ErrMalformedBatch)
// rather than decoded partially, because a partial batch would leave the index silently wrong.
//
// Decoded memory is also bounded by the payload size: every event, hash and token occupies at
// least one payload byte, and declared lengths larger than the remaining payload are rejected
// before anything is reserved.
type Limits struct {
	// MaxEvents is the most events one batch may hold (default DefaultMaxEvents). vLLM emits
	// one BlockRemoved per evicted block, so one step can carry thousands of events.
	MaxEvents int
	// MaxHashes is the most block hashes one event may hold (default DefaultMaxHashes).
	MaxHashes int
	// MaxTokens is the most token ids one BlockStored may hold (default DefaultMaxTokens).
	MaxTokens int
}

func (l Limits) withDefaults() Limits {
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	if l.MaxHashes <= 0 {
		l.MaxHashes = DefaultMaxHashes
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = DefaultMaxTokens
	}
	return l
}

var (
	// ErrMalformedBatch is wrapped by every batch-level decode failure (vllm-kv-events.md §2.4
	// rule 6): the payload is truncated, is not msgpack, or its outer shape is wrong.
	ErrMalformedBatch = errors.New("kvevents: malformed batch")
	// ErrLimit is wrapped (together with ErrMalformedBatch) when a batch exceeds a Limits field.
	ErrLimit = errors.New("kvevents: batch over decode limit")
)

// DecodeError says where a batch failed to decode. It wraps ErrMalformedBatch and the cause.
type DecodeError struct {
	Offset int    // byte offset in the payload of the value that failed
	Event  int    // index of the event being decoded, or -1 outside the events array
	Field  string // batch or event field being decoded ("ts", "events", "token_ids", ...)
	Err    error  // cause: msgp.ErrShortBytes, a msgp type error, ErrLimit, ...
}

func (e *DecodeError) Error() string {
	if e.Event >= 0 {
		return fmt.Sprintf("kvevents: decode batch: events[%d].%s at byte %d: %v", e.Event, e.Field, e.Offset, e.Err)
	}
	return fmt.Sprintf("kvevents: decode batch: %s at byte %d: %v", e.Field, e.Offset, e.Err)
}

// Unwrap lets errors.Is match ErrMalformedBatch as well as the cause.
func (e *DecodeError) Unwrap() []error { return []error{ErrMalformedBatch, e.Err} }

// DecodeBatch decodes one KVEventBatch payload into b with the default Limits.
// See Limits.DecodeBatch.
func DecodeBatch(payload []byte, b *Batch) error {
	return Limits{}.DecodeBatch(payload, b)
}

// DecodeBatch decodes one KVEventBatch payload (vllm-kv-events.md §2) into b, following the
// tolerant rules of §2.4: the batch may be an array of two or more elements or a map; events may
// be arrays of any historical length or maps with any key order, mixed in one batch. Unknown
// tags give KindUnknown events and type errors inside a known event mark only that event
// Malformed; decoding continues with the next event. A batch-level failure returns a
// *DecodeError (wrapping ErrMalformedBatch) and leaves b empty.
//
// b's arenas are reused, so a warm Batch decodes without allocating. Byte fields of the events
// alias payload, which must not be modified while b is in use.
func (l Limits) DecodeBatch(payload []byte, b *Batch) error {
	b.Reset()
	d := decoder{payload: payload, lim: l.withDefaults(), b: b, event: -1}
	rest, err := d.batch(payload)
	if err == nil && len(rest) != 0 {
		err = d.fail(rest, "batch", fmt.Errorf("%d trailing bytes after the batch", len(rest)))
	}
	if err != nil {
		b.Reset()
		return err
	}
	for i := range b.Events {
		ev := &b.Events[i]
		ev.Hashes = b.hashes[ev.hashOff:ev.hashEnd:ev.hashEnd]
		ev.Tokens = b.tokens[ev.tokenOff:ev.tokenEnd:ev.tokenEnd]
	}
	return nil
}

// decoder holds the state of one DecodeBatch call.
type decoder struct {
	payload []byte
	lim     Limits
	b       *Batch
	event   int // index of the event being decoded, -1 outside events

	// Per-event scratch, reset by eventValue.
	seen      fieldSet
	extraKeys []byte // raw extra_keys array, evaluated once lora_name is known
	mmInfos   []byte // raw block_mm_infos array (TRT-LLM)
	cacheSalt []byte // the cache_salt key's value (SGLang, Dynamo's TRT-LLM publisher), nil if absent
}

// fail builds the DecodeError for a failure of the value starting at at.
func (d *decoder) fail(at []byte, field string, err error) error {
	off := len(d.payload) - len(at)
	if at == nil {
		off = len(d.payload)
	}
	return &DecodeError{Offset: off, Event: d.event, Field: field, Err: err}
}

// typeErr describes a value of the wrong type, or a truncation when nothing is left.
func typeErr(p []byte, want string) error {
	if len(p) == 0 {
		return msgp.ErrShortBytes
	}
	return fmt.Errorf("got %s (0x%02x), want %s", msgp.NextType(p), p[0], want)
}

func (d *decoder) batch(p []byte) ([]byte, error) {
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		return d.batchArray(p)
	case msgp.MapType:
		return d.batchMap(p)
	}
	return p, d.fail(p, "batch", typeErr(p, "array or map"))
}

// batchArray decodes [ts, events, data_parallel_rank, ...ignored].
func (d *decoder) batchArray(p []byte) ([]byte, error) {
	start := p
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, d.fail(start, "batch", err)
	}
	if n < 2 {
		return p, d.fail(start, "batch", fmt.Errorf("array of %d elements, want at least 2", n))
	}
	if p, err = d.ts(p); err != nil {
		return p, err
	}
	if p, err = d.events(p); err != nil {
		return p, err
	}
	if n >= 3 {
		if p, err = d.rank(p); err != nil {
			return p, err
		}
	}
	for i := uint32(3); i < n; i++ {
		at := p
		if p, err = msgp.Skip(p); err != nil {
			return p, d.fail(at, "batch", err)
		}
	}
	return p, nil
}

// batchMap decodes {"ts", "events", "data_parallel_rank"}, skipping unknown keys.
func (d *decoder) batchMap(p []byte) ([]byte, error) {
	start := p
	n, p, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return p, d.fail(start, "batch", err)
	}
	sawEvents := false
	for i := uint32(0); i < n; i++ {
		at := p
		var key []byte
		if msgp.NextType(p) == msgp.StrType {
			key, p, err = msgp.ReadStringZC(p)
		} else {
			p, err = msgp.Skip(p)
		}
		if err != nil {
			return p, d.fail(at, "batch key", err)
		}
		switch string(key) {
		case "ts":
			p, err = d.ts(p)
		case "events":
			p, err = d.events(p)
			sawEvents = true
		case "data_parallel_rank":
			p, err = d.rank(p)
		default:
			at = p
			if p, err = msgp.Skip(p); err != nil {
				err = d.fail(at, "batch", err)
			}
		}
		if err != nil {
			return p, err
		}
	}
	if !sawEvents {
		return p, d.fail(start, "events", errors.New("batch map has no events key"))
	}
	return p, nil
}

// ts reads the batch timestamp: any numeric, or nil (kept as 0).
func (d *decoder) ts(p []byte) ([]byte, error) {
	at := p
	var err error
	switch msgp.NextType(p) {
	case msgp.Float64Type:
		d.b.TS, p, err = msgp.ReadFloat64Bytes(p)
	case msgp.Float32Type:
		var f float32
		f, p, err = msgp.ReadFloat32Bytes(p)
		d.b.TS = float64(f)
	case msgp.IntType, msgp.UintType:
		var v int64
		var st status
		v, st, p, err = readInt(p)
		d.b.TS = float64(v)
		if st == valBad { // uint64 above MaxInt64: still a number
			u, _, _ := msgp.ReadUint64Bytes(at)
			d.b.TS = float64(u)
		}
	case msgp.NilType:
		p, err = msgp.ReadNilBytes(p)
	default:
		err = typeErr(p, "a number")
	}
	if err != nil {
		return p, d.fail(at, "ts", err)
	}
	return p, nil
}

// rank reads data_parallel_rank: an int or nil.
func (d *decoder) rank(p []byte) ([]byte, error) {
	at := p
	v, st, p, err := readInt(p)
	if err == nil && st == valBad {
		err = typeErr(at, "an int or nil")
	}
	if err != nil {
		return p, d.fail(at, "data_parallel_rank", err)
	}
	d.b.Rank, d.b.HasRank = v, st == valOK
	return p, nil
}

// events reads the events array, one Event per element.
func (d *decoder) events(p []byte) ([]byte, error) {
	at := p
	if msgp.NextType(p) != msgp.ArrayType {
		return p, d.fail(at, "events", typeErr(p, "array"))
	}
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, d.fail(at, "events", err)
	}
	total := len(d.b.Events) + int(n)
	if total > d.lim.MaxEvents {
		return p, d.fail(at, "events", fmt.Errorf("%w: %d events, limit %d", ErrLimit, total, d.lim.MaxEvents))
	}
	if int(n) > len(p) {
		return p, d.fail(at, "events", fmt.Errorf("%d events declared, %d bytes left: %w", n, len(p), msgp.ErrShortBytes))
	}
	if cap(d.b.Events) < total {
		grown := make([]Event, len(d.b.Events), total)
		copy(grown, d.b.Events)
		d.b.Events = grown
	}
	first := len(d.b.Events)
	d.b.Events = d.b.Events[:total]
	clear(d.b.Events[first:]) // one bulk clear instead of one zero value per event
	for i := first; i < total; i++ {
		d.event = i
		if p, err = d.eventValue(p, &d.b.Events[i]); err != nil {
			return p, err
		}
	}
	d.event = -1
	return p, nil
}

// reserve makes room for n more entries in an arena after checking the limit and that the
// payload can hold them (each entry takes at least one byte), so a forged length cannot make
// the decoder allocate more than the payload justifies.
func reserve[T uint64 | uint32](arena []T, n uint32, left, limit int, what string) ([]T, error) {
	if int(n) <= cap(arena)-len(arena) && int(n) <= left && int(n) <= limit {
		return arena, nil
	}
	if int(n) > limit {
		return arena, fmt.Errorf("%w: %d %s, limit %d", ErrLimit, n, what, limit)
	}
	if int(n) > left {
		return arena, fmt.Errorf("%d %s declared, %d bytes left: %w", n, what, left, msgp.ErrShortBytes)
	}
	if free := cap(arena) - len(arena); free < int(n) {
		grown := make([]T, len(arena), max(2*cap(arena), len(arena)+int(n)))
		copy(grown, arena)
		arena = grown
	}
	return arena, nil
}

// maxUint32 bounds token ids (§2.4 rule 5).
const maxUint32 = math.MaxUint32
