package kvevents

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tinylib/msgp/msgp"
)

// field identifies an event field (vllm-kv-events.md §2.3).
type field uint8

const (
	fNone field = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroup
	fSpecKind
	fWindow
	fLocality
	fMMInfos   // TRT-LLM block_mm_infos, map form only
	fCacheSalt // cache_salt as its own key (SGLang, Dynamo's TRT-LLM publisher), map form only
)

// fieldSet is a set of fields, one bit per field.
type fieldSet uint32

func (s fieldSet) has(f field) bool { return s&(1<<f) != 0 }

func setOf(fs ...field) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// Positional field order of the array form, after the tag (declaration order, §2.3).
var (
	storedOrder  = [...]field{fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroup, fSpecKind, fWindow, fLocality}
	removedOrder = [...]field{fHashes, fMedium, fGroup, fLocality}
)

// Fields each kind accepts in map form; other keys are skipped.
var (
	storedFields  = setOf(storedOrder[:]...) | setOf(fMMInfos, fCacheSalt)
	removedFields = setOf(removedOrder[:]...)
)

func (f field) String() string {
	switch f {
	case fHashes:
		return "block_hashes"
	case fParent:
		return "parent_block_hash"
	case fTokens:
		return "token_ids"
	case fBlockSize:
		return "block_size"
	case fLoRAID:
		return "lora_id"
	case fMedium:
		return "medium"
	case fLoRAName:
		return "lora_name"
	case fExtraKeys:
		return "extra_keys"
	case fGroup:
		return "group_idx"
	case fSpecKind:
		return "kv_cache_spec_kind"
	case fWindow:
		return "kv_cache_spec_sliding_window"
	case fLocality:
		return "locality"
	case fMMInfos:
		return "block_mm_infos"
	case fCacheSalt:
		return "cache_salt"
	}
	return "unknown"
}

// fieldNamed maps a map-form key to its field; unknown keys (and "type") give fNone.
func fieldNamed(key []byte) field {
	switch string(key) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoRAID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroup
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fWindow
	case "locality":
		return fLocality
	case "block_mm_infos":
		return fMMInfos
	case "cache_salt":
		return fCacheSalt
	}
	return fNone
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return KindBlockStored
	case "BlockRemoved":
		return KindBlockRemoved
	case "AllBlocksCleared":
		return KindAllBlocksCleared
	}
	return KindUnknown
}

// bad marks ev malformed, remembering the first offending field.
func (ev *Event) bad(field string) {
	if !ev.Malformed {
		ev.Malformed, ev.MalformedField = true, field
	}
}

// eventValue decodes one element of the events array into ev. Only truncated or invalid
// msgpack returns an error; anything else that is wrong marks ev malformed.
func (d *decoder) eventValue(p []byte, ev *Event) ([]byte, error) {
	d.seen, d.extraKeys, d.mmInfos, d.cacheSalt = 0, nil, nil, nil
	ev.hashOff, ev.hashEnd = len(d.b.hashes), len(d.b.hashes)
	ev.tokenOff, ev.tokenEnd = len(d.b.tokens), len(d.b.tokens)
	var err error
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		p, err = d.arrayEvent(p, ev)
	case msgp.MapType:
		p, err = d.mapEvent(p, ev)
	default:
		at := p
		ev.bad("event")
		if p, err = msgp.Skip(p); err != nil {
			return p, d.fail(at, "event", err)
		}
		return p, nil
	}
	if err != nil || ev.Malformed || ev.Kind == KindUnknown {
		return p, err
	}
	d.finishEvent(ev)
	return p, nil
}

// arrayEvent decodes [tag, f1, f2, ...] (§2.4 rule 2).
func (d *decoder) arrayEvent(p []byte, ev *Event) ([]byte, error) {
	at := p
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, d.fail(at, "event", err)
	}
	if n == 0 || msgp.NextType(p) != msgp.StrType {
		ev.bad("tag")
		return d.skipN(p, n, "event")
	}
	tagAt := p
	tag, p, err := msgp.ReadStringZC(p)
	if err != nil {
		return p, d.fail(tagAt, "tag", err)
	}
	ev.Kind = kindOf(tag)
	var order []field
	switch ev.Kind {
	case KindBlockStored:
		order = storedOrder[:]
	case KindBlockRemoved:
		order = removedOrder[:]
	case KindUnknown:
		ev.UnknownTag = tag
	}
	for i := uint32(1); i < n; i++ {
		if int(i) <= len(order) && ev.Kind != KindUnknown {
			p, err = d.fieldValue(p, ev, order[i-1])
		} else {
			p, err = d.skipN(p, 1, "event")
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// mapEvent decodes {"type": tag, field: value, ...} with keys in any order (§2.4 rule 3).
func (d *decoder) mapEvent(p []byte, ev *Event) ([]byte, error) {
	start := p
	n, body, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return p, d.fail(start, "event", err)
	}
	tag, afterTag, first, ok, err := d.findTag(body, n)
	if err != nil {
		return body, err
	}
	if !ok {
		ev.bad("tag")
		return d.skipN(start, 1, "event")
	}
	ev.Kind = kindOf(tag)
	var accept fieldSet
	switch ev.Kind {
	case KindBlockStored:
		accept = storedFields
	case KindBlockRemoved:
		accept = removedFields
	case KindUnknown:
		ev.UnknownTag = tag
		return d.skipN(start, 1, "event")
	}
	p, i := body, uint32(0)
	if first {
		p, i = afterTag, 1
	}
	for ; i < n; i++ {
		var f field
		if f, p, err = d.key(p); err != nil {
			return p, err
		}
		if accept.has(f) {
			p, err = d.fieldValue(p, ev, f)
		} else {
			p, err = d.skipN(p, 1, "event")
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// findTag scans the n key/value pairs of a map event for "type". ok is false when the key is
// missing or its value is not a str. first is true when "type" is the first key (as msgspec
// writes it); rest then points just after the tag, so the field pass can start there.
func (d *decoder) findTag(p []byte, n uint32) (tag, rest []byte, first, ok bool, err error) {
	for i := range n {
		at := p
		var key []byte
		var isStr bool
		if key, p, isStr, err = readKey(p); err != nil {
			return nil, nil, false, false, d.fail(at, "event", err)
		}
		if !isStr || string(key) != "type" {
			if p, err = d.skipN(p, 1, "event"); err != nil {
				return nil, nil, false, false, err
			}
			continue
		}
		at = p
		tag, p, isStr, err = readKey(p)
		if err != nil {
			return nil, nil, false, false, d.fail(at, "tag", err)
		}
		return tag, p, i == 0, isStr, nil
	}
	return nil, nil, false, false, nil
}

// key reads a map-form key. Keys that are not str are consumed and give fNone. The fixstr
// fast path is small enough to inline.
func (d *decoder) key(p []byte) (field, []byte, error) {
	if len(p) > 0 && p[0]&0xe0 == 0xa0 {
		if n := int(p[0]&0x1f) + 1; len(p) >= n {
			return fieldNamed(p[1:n]), p[n:], nil
		}
	}
	return d.keySlow(p)
}

func (d *decoder) keySlow(p []byte) (field, []byte, error) {
	at := p
	key, p, isStr, err := readKey(p)
	if err != nil {
		return fNone, p, d.fail(at, "event", err)
	}
	if !isStr {
		return fNone, p, nil
	}
	return fieldNamed(key), p, nil
}

// readKey reads a str (aliasing p), with a fast path for fixstr, the encoding of every key and
// tag vLLM sends. A value of another type is consumed and gives isStr false.
func readKey(p []byte) (key, rest []byte, isStr bool, err error) {
	if len(p) > 0 && p[0]&0xe0 == 0xa0 {
		n := int(p[0]&0x1f) + 1
		if len(p) < n {
			return nil, p, false, msgp.ErrShortBytes
		}
		return p[1:n], p[n:], true, nil
	}
	if msgp.NextType(p) == msgp.StrType {
		key, rest, err = msgp.ReadStringZC(p)
		return key, rest, err == nil, err
	}
	rest, err = msgp.Skip(p)
	return nil, rest, false, err
}

// skipN skips n msgpack values.
func (d *decoder) skipN(p []byte, n uint32, what string) ([]byte, error) {
	for range n {
		at := p
		var err error
		if p, err = msgp.Skip(p); err != nil {
			return p, d.fail(at, what, err)
		}
	}
	return p, nil
}

// fieldValue decodes the value of one known field into ev.
func (d *decoder) fieldValue(p []byte, ev *Event, f field) ([]byte, error) {
	at := p
	d.seen |= 1 << f
	var st status
	var err error
	switch f {
	case fHashes:
		p, st, err = d.hashes(p, ev)
	case fParent:
		ev.Parent, st, p, err = readHash(p)
		// llm-d's KV-cache simulator writes parent 0 for "no parent" (vLLM writes nil); a real
		// block hash of 0 has probability 2^-64, so 0 means none for both.
		ev.HasParent = st == valOK && ev.Parent != 0
	case fTokens:
		p, st, err = d.tokens(p, ev)
	case fBlockSize:
		ev.BlockSize, st, p, err = readInt(p)
	case fLoRAID:
		ev.LoRAID, st, p, err = readInt(p)
		ev.HasLoRAID = st == valOK
	case fMedium:
		ev.Medium, st, p, err = readStr(p)
	case fLoRAName:
		ev.LoRAName, st, p, err = readStr(p)
		ev.HasLoRAName = st == valOK
	case fExtraKeys:
		d.extraKeys, st, p, err = readRawArray(p)
	case fGroup:
		ev.GroupIdx, st, p, err = readInt(p)
		ev.HasGroup = st == valOK
	case fSpecKind:
		ev.SpecKind, st, p, err = readStr(p)
	case fWindow:
		ev.SlidingWindow, st, p, err = readInt(p)
		ev.HasWindow = st == valOK
	case fLocality:
		ev.Locality, st, p, err = readStr(p)
	case fMMInfos:
		d.mmInfos, st, p, err = readRawArray(p)
	case fCacheSalt:
		d.cacheSalt, st, p, err = readStr(p)
	}
	if err != nil {
		return p, d.fail(at, f.String(), err)
	}
	if st == valBad {
		ev.bad(f.String())
	}
	return p, nil
}

// hashes reads block_hashes into the batch's hash arena.
func (d *decoder) hashes(p []byte, ev *Event) ([]byte, status, error) {
	n, p, isArray, err := readArrayHeader(p)
	if err != nil || !isArray {
		return p, valBad, err
	}
	arena, err := reserve(d.b.hashes, n, len(p), d.lim.MaxHashes, "block hashes")
	if err != nil {
		return p, valBad, err
	}
	ev.hashOff = len(arena)
	result := valOK
	for range n {
		if len(p) >= 9 && p[0] == 0xcf { // uint64, as vLLM sends digests
			arena, p = append(arena, binary.BigEndian.Uint64(p[1:])), p[9:]
			continue
		}
		var h uint64
		var st status
		if h, st, p, err = readHash(p); err != nil {
			return p, valBad, err
		}
		if st != valOK {
			result = valBad
			continue
		}
		arena = append(arena, h)
	}
	d.b.hashes, ev.hashEnd = arena, len(arena)
	return p, result, nil
}

// tokens reads token_ids into the batch's token arena; nil is an empty list.
func (d *decoder) tokens(p []byte, ev *Event) ([]byte, status, error) {
	if msgp.IsNil(p) {
		return p[1:], valOK, nil
	}
	n, p, isArray, err := readArrayHeader(p)
	if err != nil || !isArray {
		return p, valBad, err
	}
	arena, err := reserve(d.b.tokens, n, len(p), d.lim.MaxTokens, "token ids")
	if err != nil {
		return p, valBad, err
	}
	if cap(arena)-len(arena) == int(n) { // n EAGLE pairs take n+1 tokens
		grown := make([]uint32, len(arena), max(2*cap(arena), len(arena)+int(n)+1))
		copy(grown, arena)
		arena = grown
	}
	ev.tokenOff = len(arena)
	raw := p
	arena, p, pairs, st, err := appendTokens(arena, p, n)
	if err != nil {
		return p, valBad, err
	}
	if st == valBad {
		ev.badTokens, ev.badTokensN = raw, n // described only if reported: decoding stays allocation-free
	}
	ev.Bigram = pairs
	d.b.tokens, ev.tokenEnd = arena, len(arena)
	return p, st, nil
}

// finishEvent checks required fields and computes PlainBlocks once the whole event is read
// (map keys come in any order, so lora_name may follow extra_keys).
func (d *decoder) finishEvent(ev *Event) {
	if ev.Kind == KindAllBlocksCleared {
		return
	}
	if !d.seen.has(fHashes) {
		ev.bad("block_hashes")
		return
	}
	if ev.Kind != KindBlockStored {
		return
	}
	n := ev.hashEnd - ev.hashOff
	ev.PlainBlocks = n
	if d.extraKeys != nil {
		plain, salt, ok := plainExtraKeys(d.extraKeys, n, ev.LoRAName, ev.HasLoRAName, !ev.HasParent)
		if !ok {
			ev.bad("extra_keys")
			return
		}
		ev.PlainBlocks, ev.Salt = min(ev.PlainBlocks, plain), salt
	}
	if len(d.cacheSalt) > 0 {
		// SGLang and Dynamo's TRT-LLM publisher send the salt as its own key, on every store
		// of a salted request; vLLM puts it in block 0's extra_keys. Both name one namespace,
		// so two different salts on one store cannot both hold: skip it rather than guess.
		if ev.Salt != nil && string(ev.Salt) != string(d.cacheSalt) {
			ev.bad("cache_salt")
			return
		}
		ev.Salt = d.cacheSalt
	}
	if d.mmInfos != nil {
		ev.PlainBlocks = min(ev.PlainBlocks, leadingNils(d.mmInfos, n))
	}
}

// badTokenDetail says what is wrong with the token_ids array raw (n entries) of a malformed
// BlockStored: the first id out of range, or the first entry that breaks the EAGLE pair rules
// of appendTokens. It runs only for malformed events.
func badTokenDetail(raw []byte, n uint32) string {
	p := raw
	var prev [2]uint32 // the last pair read
	ints, pairs := false, false
	for i := range n {
		if msgp.NextType(p) == msgp.ArrayType {
			at := p
			a, b, st, rest, err := readPair(p)
			if err != nil {
				break
			}
			p = rest
			switch {
			case st != valOK:
				return fmt.Sprintf("token_ids[%d] = %s: an EAGLE pair is exactly two unsigned 32-bit token ids", i, shortValue(at))
			case ints:
				return fmt.Sprintf("token_ids[%d] = [%d, %d] is a pair after int entries: token_ids holds either ints or EAGLE [token, token] pairs, not both", i, a, b)
			case pairs && a != prev[1]:
				return fmt.Sprintf("token_ids[%d] = [%d, %d] does not continue token_ids[%d] = [%d, %d]: EAGLE pairs are (t_j, t_j+1) of one sequence, "+
					"so each pair starts with the token the one before ends with", i, a, b, i-1, prev[0], prev[1])
			}
			prev, pairs = [2]uint32{a, b}, true
			continue
		}
		if pairs {
			return fmt.Sprintf("token_ids[%d] is an int after EAGLE pairs: token_ids holds either ints or [token, token] pairs, not both", i)
		}
		ints = true
		switch msgp.NextType(p) {
		case msgp.IntType:
			v, rest, err := msgp.ReadInt64Bytes(p)
			if err != nil {
				return "token_ids: truncated"
			}
			if v < 0 || v > maxUint32 {
				return fmt.Sprintf("token_ids[%d] = %d: token ids are unsigned 32-bit integers", i, v)
			}
			p = rest
			continue
		case msgp.UintType:
			v, rest, err := msgp.ReadUint64Bytes(p)
			if err != nil {
				return "token_ids: truncated"
			}
			if v > maxUint32 {
				return fmt.Sprintf("token_ids[%d] = %d: token ids are unsigned 32-bit integers", i, v)
			}
			p = rest
			continue
		}
		return fmt.Sprintf("token_ids[%d] = %s: an entry is an unsigned 32-bit integer or a [token, token] pair", i, shortValue(p))
	}
	return "token_ids: an entry is neither an unsigned 32-bit integer nor a [token, token] pair"
}

// shortValue renders the msgpack value at the start of p as JSON for an error message, at
// most 64 bytes.
func shortValue(p []byte) string {
	rest, err := msgp.Skip(p)
	if err != nil {
		return "(truncated)"
	}
	p = p[:len(p)-len(rest)]
	var sb strings.Builder
	if _, err := msgp.UnmarshalAsJSON(&sb, p); err != nil {
		return "(undecodable)"
	}
	if s := sb.String(); len(s) <= 64 {
		return s
	}
	return sb.String()[:61] + "..."
}
