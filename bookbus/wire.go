package bookbus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/condisagg/condisagg/pool"
)

// The wire form of one delta (README "Wire format"), version 1, little endian:
//
//	u8 version (1) | u8 kind (pool.PeerKind) | str replica | u64 incarnation | str model |
//	uvarint lease_ms | body
//
// where str is a uvarint length and that many bytes, and body is by kind:
//
//	book:            str request | u8 mode | str decode | str prefill | uvarint isl |
//	                 uvarint prefill_tokens | uvarint n | n × u64 key
//	release(_prefill): str request
//	renew:           u8 complete | uvarint n | n × str request
//	gone:            (empty)
//	hello (16):      (empty; model is "")
//
// Hello is the bus's own kind, not a pool delta: a replica that (re)connected asks its peers to
// re-send their open bookings (README "Resync"). A replica older than it refuses it as a
// decode error and answers nothing; the other kinds are unchanged, so version stays 1.
//
// Keys are the chained block keys of the prompt (8 bytes each, incompressible hashes): they
// make a peer's bypass share prefixes with local ones exactly as a local booking does.
const wireVersion = 1

// kindHello is the hello message's kind byte, outside pool.PeerKind's 1-5.
const kindHello pool.PeerKind = 16

// Bounds of a decoded message; each is far above what a sane peer sends and keeps a hostile or
// corrupt one from making the decoder allocate more than its input's size.
const (
	maxString = 1024    // a replica, model, worker or request id
	maxKeys   = 1 << 17 // keys of one booking: a 2M-token prompt at 16-token blocks
	maxOpen   = 1 << 16 // request ids of one heartbeat
)

var errShort = errors.New("truncated")

// message is one delta with its sender.
type message struct {
	replica     string
	incarnation uint64 // random per process: tells this process's own messages from a namesake's
	model       string
	d           pool.PeerDelta
}

// encode appends m's wire form to dst.
func encode(dst []byte, m *message) []byte {
	dst = append(dst, wireVersion, byte(m.d.Kind))
	dst = appendString(dst, m.replica)
	dst = binary.LittleEndian.AppendUint64(dst, m.incarnation)
	dst = appendString(dst, m.model)
	dst = binary.AppendUvarint(dst, uint64(m.d.Lease/time.Millisecond))
	switch m.d.Kind {
	case pool.PeerBook:
		b := &m.d.Booking
		dst = appendString(dst, b.RequestID)
		dst = append(dst, byte(b.Mode))
		dst = appendString(dst, b.Decode)
		dst = appendString(dst, b.Prefill)
		dst = binary.AppendUvarint(dst, uint64(b.ISL))
		dst = binary.AppendUvarint(dst, uint64(b.PrefillTokens))
		dst = binary.AppendUvarint(dst, uint64(len(b.Keys)))
		for _, k := range b.Keys {
			dst = binary.LittleEndian.AppendUint64(dst, k)
		}
	case pool.PeerRelease, pool.PeerReleasePrefill:
		dst = appendString(dst, m.d.RequestID)
	case pool.PeerRenew:
		c := byte(0)
		if m.d.Complete {
			c = 1
		}
		dst = append(dst, c)
		dst = binary.AppendUvarint(dst, uint64(len(m.d.Open)))
		for _, id := range m.d.Open {
			dst = appendString(dst, id)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// decode parses one message. Errors name the field that is wrong.
func decode(b []byte) (message, error) {
	r := reader{b: b}
	var m message
	if v := r.u8("version"); r.err == nil && v != wireVersion {
		return m, fmt.Errorf("bookbus: decode: version %d, want %d", v, wireVersion)
	}
	m.d.Kind = pool.PeerKind(r.u8("kind"))
	m.replica = r.str("replica")
	m.incarnation = r.u64("incarnation")
	m.model = r.str("model")
	m.d.Replica = m.replica
	m.d.Lease = time.Duration(r.uvarint("lease", uint64(pool.MaxPeerLease/time.Millisecond))) * time.Millisecond
	switch m.d.Kind {
	case pool.PeerBook:
		b := &m.d.Booking
		b.RequestID = r.str("request")
		b.Mode = pool.Mode(r.u8("mode"))
		b.Decode = r.str("decode")
		b.Prefill = r.str("prefill")
		b.ISL = int(r.uvarint("isl", 1<<31))
		b.PrefillTokens = int64(r.uvarint("prefill_tokens", 1<<31))
		n := int(r.uvarint("keys", maxKeys))
		if r.err == nil && n*8 > len(r.b) {
			r.fail("keys", errShort)
		}
		if r.err == nil && n > 0 {
			b.Keys = make([]uint64, n)
			for i := range b.Keys {
				b.Keys[i] = r.u64("keys")
			}
		}
	case pool.PeerRelease, pool.PeerReleasePrefill:
		m.d.RequestID = r.str("request")
	case pool.PeerRenew:
		m.d.Complete = r.u8("complete") == 1
		n := int(r.uvarint("open", maxOpen))
		if r.err == nil && n > len(r.b) { // every id takes at least its length byte
			r.fail("open", errShort)
		}
		if r.err == nil && n > 0 {
			m.d.Open = make([]string, 0, n)
			for range n {
				m.d.Open = append(m.d.Open, r.str("open"))
			}
		}
	case pool.PeerGone, kindHello:
	default:
		if r.err == nil {
			return m, fmt.Errorf("bookbus: decode: kind %d is not a delta kind (1-5) or hello (16)", m.d.Kind)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("end", fmt.Errorf("%d trailing bytes", len(r.b)))
	}
	return m, r.err
}

// reader consumes b; the first error sticks and names its field.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(field string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("bookbus: decode %s: %w", field, err)
	}
}

func (r *reader) u8(field string) byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail(field, errShort)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u64(field string) uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail(field, errShort)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// uvarint reads a uvarint of at most limit.
func (r *reader) uvarint(field string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(field, errShort)
		return 0
	}
	if v > limit {
		r.fail(field, fmt.Errorf("%d is above %d", v, limit))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str(field string) string {
	n := int(r.uvarint(field, maxString))
	if r.err != nil {
		return ""
	}
	if n > len(r.b) {
		r.fail(field, errShort)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
