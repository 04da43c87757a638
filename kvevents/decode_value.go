package kvevents

import (
	"encoding/binary"
	"math"

	"github.com/tinylib/msgp/msgp"
)

// status says how a field value decoded. Every reader consumes exactly one msgpack value
// whatever its status; a non-nil error means the payload itself is broken (truncated or an
// invalid msgpack prefix).
type status uint8

const (
	valOK  status = iota
	valNil        // msgpack nil
	valBad        // wrong type or out of range: the event is malformed
)

// skipBad consumes a value of the wrong type.
func skipBad(p []byte) (status, []byte, error) {
	p, err := msgp.Skip(p)
	return valBad, p, err
}

// readInt reads an int of any msgpack width, signed or unsigned (§2.4 rule 7), or nil.
// An unsigned value above MaxInt64 is valBad.
func readInt(p []byte) (int64, status, []byte, error) {
	if len(p) > 0 && p[0] < 0x80 { // positive fixint: block sizes, group indexes, ranks
		return int64(p[0]), valOK, p[1:], nil
	}
	switch msgp.NextType(p) {
	case msgp.IntType:
		v, p, err := msgp.ReadInt64Bytes(p)
		return v, valOK, p, err
	case msgp.UintType:
		u, rest, err := msgp.ReadUint64Bytes(p)
		if err != nil || u > math.MaxInt64 {
			return 0, valBad, rest, err
		}
		return int64(u), valOK, rest, nil
	case msgp.NilType:
		p, err := msgp.ReadNilBytes(p)
		return 0, valNil, p, err
	}
	st, p, err := skipBad(p)
	return 0, st, p, err
}

// readArrayHeader reads an array header, with a fast path for fixarray. A value of another
// type is consumed and gives isArray false.
func readArrayHeader(p []byte) (n uint32, rest []byte, isArray bool, err error) {
	if len(p) > 0 && p[0]&0xf0 == 0x90 {
		return uint32(p[0] & 0x0f), p[1:], true, nil
	}
	if msgp.NextType(p) != msgp.ArrayType {
		rest, err = msgp.Skip(p)
		return 0, rest, false, err
	}
	n, rest, err = msgp.ReadArrayHeaderBytes(p)
	return n, rest, err == nil, err
}

// readStr reads a str (aliasing p) or nil.
func readStr(p []byte) ([]byte, status, []byte, error) {
	if len(p) > 0 && p[0]&0xe0 == 0xa0 { // fixstr: media, names, kinds
		if s, rest, _, err := readKey(p); err == nil {
			return s, valOK, rest, nil
		}
	}
	switch msgp.NextType(p) {
	case msgp.StrType:
		s, p, err := msgp.ReadStringZC(p)
		return s, valOK, p, err
	case msgp.NilType:
		p, err := msgp.ReadNilBytes(p)
		return nil, valNil, p, err
	}
	st, p, err := skipBad(p)
	return nil, st, p, err
}

// readRawArray returns the encoded bytes of an array value (aliasing p), or nil for nil.
func readRawArray(p []byte) ([]byte, status, []byte, error) {
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		rest, err := msgp.Skip(p)
		if err != nil {
			return nil, valBad, rest, err
		}
		return p[:len(p)-len(rest)], valOK, rest, nil
	case msgp.NilType:
		p, err := msgp.ReadNilBytes(p)
		return nil, valNil, p, err
	}
	st, p, err := skipBad(p)
	return nil, st, p, err
}

// readHash reads one wire block hash and normalises it to uint64 (§2.5): an unsigned int is
// its value, a negative int its two's-complement bits, a bin the big-endian value of its last
// 8 bytes (left-padded with zeros when shorter). nil gives valNil.
func readHash(p []byte) (uint64, status, []byte, error) {
	if len(p) >= 9 && p[0] == 0xcf { // uint64: the low 64 bits of a SHA-256 or xxh3-128 digest
		return binary.BigEndian.Uint64(p[1:]), valOK, p[9:], nil
	}
	switch msgp.NextType(p) {
	case msgp.UintType:
		u, p, err := msgp.ReadUint64Bytes(p)
		return u, valOK, p, err
	case msgp.IntType:
		v, p, err := msgp.ReadInt64Bytes(p)
		return uint64(v), valOK, p, err
	case msgp.BinType:
		b, p, err := msgp.ReadBytesZC(p)
		return binHash(b), valOK, p, err
	case msgp.NilType:
		p, err := msgp.ReadNilBytes(p)
		return 0, valNil, p, err
	}
	st, p, err := skipBad(p)
	return 0, st, p, err
}

// binHash is the big-endian value of the last 8 bytes of b, left-padded with zeros.
func binHash(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var buf [8]byte
	copy(buf[8-len(b):], b)
	return binary.BigEndian.Uint64(buf[:])
}

// appendTokens reads the n entries of token_ids and appends them to arena, which has room
// for n+1. The entries are either all ints in [0, 2^32-1] (pairs false: n tokens appended) or
// all EAGLE [token, token] pairs (pairs true). SGLang with EAGLE speculative decoding keys its
// radix tree by bigrams: a page of P entries holds the pairs (t_i, t_i+1) of P+1 consecutive
// tokens of one sequence, so pair j's second token must be pair j+1's first. Pairs append
// the n+1 tokens they are made of (each pair's first, then the last pair's second), the form
// the index keys EAGLE blocks by. Anything else (a mixed list, a pair that does not continue
// the one before, a pair of another length, an id out of range) makes the status valBad; the
// event is then skipped and badTokenDetail says why.
func appendTokens(arena []uint32, p []byte, n uint32) ([]uint32, []byte, bool, status, error) {
	i := uint32(0)
	// Fast path while 8 bytes can be loaded: msgspec writes token ids as positive fixint or
	// uint8/16/32 (lead 0xcc..0xce, 1<<(lead-0xcc) value bytes). The length is computed, not
	// looked up, to keep the per-token dependency chain short.
	for ; i < n && len(p) >= 8; i++ {
		lead := p[0]
		if lead < 0x80 {
			arena, p = append(arena, uint32(lead)), p[1:]
			continue
		}
		k := lead - 0xcc
		if k > 2 {
			break // another encoding (uint64, EAGLE pair, junk): the general loop reads the rest
		}
		width := uint(8) << k // value bits: 8, 16, 32
		word := binary.BigEndian.Uint64(p) << 8
		arena, p = append(arena, uint32(word>>(64-width))), p[1+width/8:]
	}
	result := valOK
	ints, pairs := i > 0, false
	var next uint32 // the second token of the last pair read
	for ; i < n; i++ {
		if msgp.NextType(p) != msgp.ArrayType {
			t, st, rest, err := readTokenInt(p)
			if err != nil {
				return arena, rest, false, valBad, err
			}
			p, ints = rest, true
			if st != valOK || pairs {
				result = valBad
				continue
			}
			arena = append(arena, t)
			continue
		}
		a, b, st, rest, err := readPair(p)
		if err != nil {
			return arena, rest, false, valBad, err
		}
		p = rest
		if st != valOK || ints || pairs && a != next {
			result = valBad
			pairs = true
			continue
		}
		arena, next, pairs = append(arena, a), b, true
	}
	if pairs && result == valOK {
		arena = append(arena, next)
	}
	return arena, p, pairs, result, nil
}

// readPair reads one EAGLE [token, token] pair; an array of another length, or with an id out
// of range, is consumed and valBad.
func readPair(p []byte) (uint32, uint32, status, []byte, error) {
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return 0, 0, valBad, p, err
	}
	if n != 2 {
		for range n {
			if p, err = msgp.Skip(p); err != nil {
				return 0, 0, valBad, p, err
			}
		}
		return 0, 0, valBad, p, nil
	}
	a, st1, p, err := readTokenInt(p)
	if err != nil {
		return 0, 0, valBad, p, err
	}
	b, st2, p, err := readTokenInt(p)
	if err != nil || st1 != valOK || st2 != valOK {
		return 0, 0, valBad, p, err
	}
	return a, b, valOK, p, nil
}

// readTokenInt reads an int token id in [0, 2^32-1].
func readTokenInt(p []byte) (uint32, status, []byte, error) {
	v, st, p, err := readInt(p)
	if err != nil || st != valOK || v < 0 || v > maxUint32 {
		return 0, valBad, p, err
	}
	return uint32(v), valOK, p, nil
}

// plainExtraKeys returns how many of the first n entries of the extra_keys array raw are plain
// before the first that is not (§4.2 step 5): an entry is plain if it is nil, empty, or exactly
// [lora_name]. When root (the store starts a sequence), entry 0 may also carry vLLM's
// cache_salt as its last element ([salt] or [lora_name, salt]); it is then plain and the salt
// is returned (pointing into raw). ok is false when an entry before the first non-plain one is
// neither nil nor an array.
func plainExtraKeys(raw []byte, n int, lora []byte, hasLoRA, root bool) (plain int, salt []byte, ok bool) {
	cnt, p, err := msgp.ReadArrayHeaderBytes(raw)
	if err != nil {
		return 0, nil, false
	}
	for j := range min(int(cnt), n) {
		switch msgp.NextType(p) {
		case msgp.NilType:
			p = p[1:]
			continue
		case msgp.ArrayType:
		default:
			return j, salt, false
		}
		var m uint32
		if m, p, err = msgp.ReadArrayHeaderBytes(p); err != nil {
			return j, salt, false
		}
		if m == 0 {
			continue
		}
		// Expected shape: [lora_name] with an adapter, and [..., salt] on a root's block 0.
		want := uint32(0)
		if hasLoRA {
			want = 1
		}
		withSalt := j == 0 && root && m == want+1
		if m != want && !withSalt {
			return j, salt, true
		}
		for k := range m {
			if msgp.NextType(p) != msgp.StrType {
				return j, salt, true
			}
			var s []byte
			if s, p, err = msgp.ReadStringZC(p); err != nil {
				return j, salt, false
			}
			switch {
			case k < want && string(s) != string(lora):
				return j, salt, true
			case k == want: // the salt
				if len(s) == 0 {
					return j, salt, true
				}
				salt = s
			}
		}
	}
	return n, salt, true
}

// leadingNils returns how many of the first n entries of the array raw are nil before the
// first that is not (TRT-LLM block_mm_infos: a non-nil entry is a non-plain block, §7).
func leadingNils(raw []byte, n int) int {
	cnt, p, err := msgp.ReadArrayHeaderBytes(raw)
	if err != nil {
		return 0
	}
	for j := range min(int(cnt), n) {
		if !msgp.IsNil(p) {
			return j
		}
		p = p[1:]
	}
	return n
}
