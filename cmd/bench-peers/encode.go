package main

import "github.com/tinylib/msgp/msgp"

// storedEvent is one BlockStored event of the recorded stream.
type storedEvent struct {
	hashes    []uint64 // engine block hashes of the stored blocks
	parent    uint64   // engine hash of the block before hashes[0], valid when hasParent
	hasParent bool
	tokens    []uint32 // len(hashes) * blockSize token ids
}

// appendBatch appends one KVEventBatch payload as vLLM >= 0.24 publishes it (msgspec,
// vllm-kv-events.md §2): the batch is an array [ts, events, data_parallel_rank] and each event a
// map with its "type" tag, integer block hashes, medium "GPU" and KV cache group 0
// (full_attention).
func appendBatch(dst []byte, ts float64, blockSize int, events []storedEvent) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		dst = appendStored(dst, blockSize, &events[i])
	}
	return msgp.AppendInt64(dst, 0)
}

func appendStored(dst []byte, blockSize int, ev *storedEvent) []byte {
	dst = msgp.AppendMapHeader(dst, 10)
	dst = msgp.AppendString(msgp.AppendString(dst, "type"), "BlockStored")
	dst = msgp.AppendArrayHeader(msgp.AppendString(dst, "block_hashes"), uint32(len(ev.hashes)))
	for _, h := range ev.hashes {
		dst = msgp.AppendUint64(dst, h)
	}
	dst = msgp.AppendString(dst, "parent_block_hash")
	if ev.hasParent {
		dst = msgp.AppendUint64(dst, ev.parent)
	} else {
		dst = msgp.AppendNil(dst)
	}
	dst = msgp.AppendArrayHeader(msgp.AppendString(dst, "token_ids"), uint32(len(ev.tokens)))
	for _, t := range ev.tokens {
		dst = msgp.AppendUint32(dst, t)
	}
	dst = msgp.AppendInt(msgp.AppendString(dst, "block_size"), blockSize)
	dst = msgp.AppendNil(msgp.AppendString(dst, "lora_id"))
	dst = msgp.AppendString(msgp.AppendString(dst, "medium"), "GPU")
	dst = msgp.AppendNil(msgp.AppendString(dst, "lora_name"))
	dst = msgp.AppendInt(msgp.AppendString(dst, "group_idx"), 0)
	return msgp.AppendString(msgp.AppendString(dst, "kv_cache_spec_kind"), "full_attention")
}
