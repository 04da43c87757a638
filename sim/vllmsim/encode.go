package vllmsim

import (
	"encoding/binary"
	"fmt"

	"github.com/condisagg/condisagg/internal/splitmix"
	"github.com/condisagg/condisagg/sim"
	"github.com/tinylib/msgp/msgp"
)

// EventFormat is the msgpack shape of the events in a KVEventBatch (vllm-kv-events.md §2.2).
type EventFormat uint8

const (
	// FormatArray is the positional form of vLLM <= 0.23: [tag, field, ...] with every field.
	FormatArray EventFormat = iota
	// FormatMap is the map form of vLLM >= 0.24: {"type": tag, field: value, ...}, fields with a
	// default omitted when they equal it.
	FormatMap
)

// ParseEventFormat parses "array" or "map".
func ParseEventFormat(s string) (EventFormat, error) {
	switch s {
	case "array":
		return FormatArray, nil
	case "map":
		return FormatMap, nil
	}
	return 0, fmt.Errorf("vllmsim: kv events format %q: want array or map", s)
}

// HashEncoding is how block hashes go on the wire (§2.5).
type HashEncoding uint8

const (
	// HashInt sends the hash as an unsigned int (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1).
	HashInt HashEncoding = iota
	// HashBytes sends a 32-byte bin whose last 8 bytes are the hash, big-endian, like a SHA-256
	// digest (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	HashBytes
)

// Encoder writes KVEventBatch payloads as msgspec does: [ts, events, data_parallel_rank].
// Stored blocks are reported on medium "GPU", KV cache group 0, kind full_attention.
type Encoder struct {
	Format    EventFormat
	Hashes    HashEncoding
	BlockSize int
	Rank      int64
}

// AppendBatch appends the payload of one batch of events with engine wall clock ts (seconds).
func (enc Encoder) AppendBatch(dst []byte, ts float64, events []sim.Event) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		dst = enc.appendEvent(dst, &events[i])
	}
	return msgp.AppendInt64(dst, enc.Rank)
}

func (enc Encoder) appendEvent(dst []byte, ev *sim.Event) []byte {
	switch ev.Kind {
	case sim.EventBlockStored:
		return enc.appendStored(dst, ev)
	case sim.EventBlockRemoved:
		return enc.appendRemoved(dst, ev)
	default:
		if enc.Format == FormatMap {
			return msgp.AppendString(msgp.AppendString(msgp.AppendMapHeader(dst, 1), "type"), "AllBlocksCleared")
		}
		return msgp.AppendString(msgp.AppendArrayHeader(dst, 1), "AllBlocksCleared")
	}
}

// appendStored writes BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window (§2.3; the array has 12 elements with the tag, the map omits
// the sliding window, and extra_keys when no block has one). An adapter's blocks carry its
// lora_id and lora_name and, as in vLLM 0.32, extra_keys [[name], ...] (one entry per block;
// the adapter path is in the engine's hash but never published, docs/vllm-facts.md §d).
func (enc Encoder) appendStored(dst []byte, ev *sim.Event) []byte {
	m := enc.Format == FormatMap
	lora := ev.LoRA.Name != ""
	if m {
		n := uint32(10)
		if lora {
			n++
		}
		dst = msgp.AppendMapHeader(dst, n)
		dst = msgp.AppendString(dst, "type")
	} else {
		dst = msgp.AppendArrayHeader(dst, 12)
	}
	dst = msgp.AppendString(dst, "BlockStored")
	dst = enc.key(dst, m, "block_hashes")
	dst = enc.appendHashes(dst, ev.Hashes)
	dst = enc.key(dst, m, "parent_block_hash")
	if ev.HasParent {
		dst = enc.appendHash(dst, ev.Parent)
	} else {
		dst = msgp.AppendNil(dst)
	}
	dst = enc.key(dst, m, "token_ids")
	dst = msgp.AppendArrayHeader(dst, uint32(len(ev.Tokens)))
	for _, t := range ev.Tokens {
		dst = msgp.AppendUint32(dst, t)
	}
	dst = msgp.AppendInt(enc.key(dst, m, "block_size"), enc.BlockSize)
	if lora {
		dst = msgp.AppendInt64(enc.key(dst, m, "lora_id"), ev.LoRA.ID)
	} else {
		dst = msgp.AppendNil(enc.key(dst, m, "lora_id"))
	}
	dst = msgp.AppendString(enc.key(dst, m, "medium"), "GPU")
	switch {
	case lora:
		dst = msgp.AppendString(enc.key(dst, m, "lora_name"), ev.LoRA.Name)
		dst = msgp.AppendArrayHeader(enc.key(dst, m, "extra_keys"), uint32(len(ev.Hashes)))
		for range ev.Hashes {
			dst = msgp.AppendString(msgp.AppendArrayHeader(dst, 1), ev.LoRA.Name)
		}
	case m:
		dst = msgp.AppendNil(enc.key(dst, m, "lora_name"))
	default:
		dst = msgp.AppendNil(msgp.AppendNil(dst)) // lora_name, extra_keys
	}
	dst = msgp.AppendInt(enc.key(dst, m, "group_idx"), 0)
	dst = msgp.AppendString(enc.key(dst, m, "kv_cache_spec_kind"), "full_attention")
	if !m {
		dst = msgp.AppendNil(dst) // kv_cache_spec_sliding_window
	}
	return dst
}

// appendRemoved writes BlockRemoved: block_hashes, medium, group_idx.
func (enc Encoder) appendRemoved(dst []byte, ev *sim.Event) []byte {
	m := enc.Format == FormatMap
	if m {
		dst = msgp.AppendMapHeader(dst, 4)
		dst = msgp.AppendString(dst, "type")
	} else {
		dst = msgp.AppendArrayHeader(dst, 4)
	}
	dst = msgp.AppendString(dst, "BlockRemoved")
	dst = enc.appendHashes(enc.key(dst, m, "block_hashes"), ev.Hashes)
	dst = msgp.AppendString(enc.key(dst, m, "medium"), "GPU")
	return msgp.AppendInt(enc.key(dst, m, "group_idx"), 0)
}

func (enc Encoder) key(dst []byte, m bool, name string) []byte {
	if m {
		return msgp.AppendString(dst, name)
	}
	return dst
}

func (enc Encoder) appendHashes(dst []byte, hs []uint64) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(hs)))
	for _, h := range hs {
		dst = enc.appendHash(dst, h)
	}
	return dst
}

func (enc Encoder) appendHash(dst []byte, h uint64) []byte {
	if enc.Hashes == HashInt {
		return msgp.AppendUint64(dst, h)
	}
	var digest [32]byte
	binary.BigEndian.PutUint64(digest[0:], ^h)
	binary.BigEndian.PutUint64(digest[8:], h*splitmix.Gamma)
	binary.BigEndian.PutUint64(digest[16:], splitmix.Mix64(h))
	binary.BigEndian.PutUint64(digest[24:], h)
	return msgp.AppendBytes(dst, digest[:])
}
