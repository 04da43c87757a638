package kvevents

// Kind is the tag of a vLLM KV cache event (the msgspec tagged-union value under "type").
type Kind uint8

const (
	// KindUnknown is an event whose tag this decoder does not know; it is skipped and counted.
	KindUnknown Kind = iota
	KindBlockStored
	KindBlockRemoved
	KindAllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case KindBlockStored:
		return "BlockStored"
	case KindBlockRemoved:
		return "BlockRemoved"
	case KindAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Batch is one decoded KVEventBatch payload: [ts, events, data_parallel_rank].
//
// A Batch is reused across Decode calls so the steady state allocates nothing: every slice
// (Events, and each event's Hashes and Tokens) points into arenas owned by the Batch, and every
// byte slice (Medium, LoRAName, SpecKind, Locality, UnknownTag) points into the payload that was
// decoded. Both are valid only until the next Decode into the same Batch or until the payload
// buffer is reused.
type Batch struct {
	TS      float64 // engine wall clock; for lag metrics only, never for ordering
	Rank    int64   // data_parallel_rank, valid when HasRank
	HasRank bool
	Events  []Event

	// Arenas behind Events[i].Hashes and Events[i].Tokens.
	hashes []uint64
	tokens []uint32
}

// Reset empties b, keeping its arenas for the next decode.
func (b *Batch) Reset() {
	b.TS, b.Rank, b.HasRank = 0, 0, false
	b.Events = b.Events[:0]
	b.hashes = b.hashes[:0]
	b.tokens = b.tokens[:0]
}

// Event is one decoded KV cache event. Fields that the producing vLLM version did not send are
// zero with their Has* flag false (the tolerant rules of vllm-kv-events.md §2.4).
type Event struct {
	Kind Kind

	// BlockStored and BlockRemoved.
	Hashes   []uint64 // engine block hashes normalised to uint64 (§2.5)
	Medium   []byte   // nil when absent or nil on the wire (device cache)
	GroupIdx int64
	HasGroup bool
	Locality []byte // "LOCAL" / "REMOTE" or nil

	// BlockStored only.
	Parent    uint64 // engine hash of the parent block, valid when HasParent
	HasParent bool
	// Tokens are the token ids of the stored blocks. When Bigram is set, token_ids held n EAGLE
	// [token, token] pairs (SGLang with EAGLE speculative decoding keys its pages by bigrams) and
	// Tokens holds the n+1 tokens they are made of: pair j is (Tokens[j], Tokens[j+1]).
	Tokens      []uint32
	Bigram      bool
	BlockSize   int64
	LoRAID      int64
	HasLoRAID   bool
	LoRAName    []byte // nil for the base model
	HasLoRAName bool
	// Salt is the store's cache_salt, nil when there is none: the value of the map key
	// "cache_salt" (SGLang, Dynamo's TRT-LLM publisher; on every store of a salted request), or
	// else the salt vLLM puts in block 0's extra keys (only on a store that starts a sequence).
	// The index uses it only when the store starts a sequence. It points into the payload.
	Salt          []byte
	SpecKind      []byte // kv_cache_spec_kind, nil when absent
	SlidingWindow int64
	HasWindow     bool
	// PlainBlocks is the number of leading blocks whose extra_keys entry is plain (nil, empty, or
	// exactly [lora_name]); blocks from PlainBlocks on carry multimodal, salt or embedding keys and
	// must be excluded from the index (§4.2 step 5). Equal to len(Hashes) when extra_keys is absent.
	PlainBlocks int

	// Unknown tags: the tag text, for the unknown_event{tag} counter.
	UnknownTag []byte

	// Malformed is set when a field of a known event has the wrong type or an out-of-range value
	// (§2.4 rule 5), or when the event is neither an array nor a map or has no str tag. Such an
	// event must be skipped and counted as malformed_event; its other fields are unspecified.
	// MalformedField names the first offending field ("token_ids", "block_hashes", "tag", ...).
	Malformed      bool
	MalformedField string
	// badTokens is the raw token_ids array (its n entries) of a malformed BlockStored, kept
	// (without copying) so MalformedDetail can name the bad id when someone asks.
	badTokens  []byte
	badTokensN uint32

	// Positions of Hashes and Tokens in the Batch arenas while the batch is being decoded.
	hashOff, hashEnd   int
	tokenOff, tokenEnd int
}

// MalformedDetail says precisely what is wrong with a malformed event when the decoder can tell
// more than the field ("token_ids[3] = -7: token ids are unsigned 32-bit integers"), else "".
// It reads the batch payload, so call it before the payload is reused.
func (ev *Event) MalformedDetail() string {
	if ev.badTokens == nil {
		return ""
	}
	return badTokenDetail(ev.badTokens, ev.badTokensN)
}
