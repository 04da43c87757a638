package kvindex

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the base XXH3 seed of router block keys (vllm-kv-events.md §4.1). It seeds the local
// hash of a base-model block and every chaining step.
const Seed uint64 = 1337

// LoRASeed returns the seed of the local block hashes for the adapter lora: Seed for the base
// model ("" or nil) and Seed + XXH3_64(lora, 0) (wrapping) otherwise.
func LoRASeed(lora []byte) uint64 {
	if len(lora) == 0 {
		return Seed
	}
	return Seed + xxh3.HashSeed(lora, 0)
}

// SaltedSeed returns the seed of the local hash of a sequence's first block for a request with
// a cache_salt: vLLM adds the salt to the extra keys of block 0 only, so a salted prompt and an
// unsalted one share no block. SGLang and TRT-LLM namespace every block of a salted request
// instead; seeding block 0 separates the same chains, since every later key chains from it.
// An empty salt is no salt.
func SaltedSeed(lora, salt []byte) uint64 {
	seed := LoRASeed(lora)
	if len(salt) == 0 {
		return seed
	}
	return seed + xxh3.HashSeed(salt, Seed)
}

// KeyScheme says what a block's router key covers.
type KeyScheme uint8

const (
	// KeysPlain: block i's key hashes its B tokens, tokens[i·B : (i+1)·B] (vLLM, TRT-LLM,
	// SGLang without EAGLE).
	KeysPlain KeyScheme = iota
	// KeysBigram: block i's key hashes tokens[i·B : (i+1)·B+1], its B tokens and the first token
	// of the next block. SGLang with EAGLE speculative decoding (--speculative-algorithm EAGLE,
	// EAGLE3 or NEXTN) keys its radix tree by bigrams: page i holds the pairs (t_j, t_j+1) for j
	// in [i·B, (i+1)·B), so it is cached, published and matched only together with token
	// (i+1)·B. A sequence of n tokens has n-1 pairs and so ⌊(n-1)/B⌋ full pages.
	KeysBigram
)

// String returns the scheme's name in configuration and errors.
func (s KeyScheme) String() string {
	if s == KeysBigram {
		return "bigram"
	}
	return "plain"
}

// span is the number of tokens one block key hashes: B, or B+1 for bigram keys.
func (s KeyScheme) span(blockSize int) int {
	if s == KeysBigram {
		return blockSize + 1
	}
	return blockSize
}

// AppendRequestKeys appends the keys of a request's full blocks (from block 0) to dst: the
// adapter lora seeds every block, the cache_salt salt block 0 only. It is AppendKeys with a
// parent of 0 when salt is empty.
func AppendRequestKeys(dst []uint64, tokens []uint32, blockSize int, lora, salt []byte) []uint64 {
	return KeysPlain.AppendRequestKeys(dst, tokens, blockSize, lora, salt)
}

// AppendRequestKeys appends the keys, under scheme s, of the full blocks of a request's tokens
// (from block 0) to dst: the adapter lora seeds every block, the cache_salt salt block 0 only.
// With KeysBigram a block needs the token after it, so n tokens give ⌊(n-1)/B⌋ keys, the pages
// SGLang's match_prefix can find for them.
func (s KeyScheme) AppendRequestKeys(dst []uint64, tokens []uint32, blockSize int, lora, salt []byte) []uint64 {
	if blockSize < 1 {
		return dst
	}
	span := s.span(blockSize)
	if len(tokens) < span {
		return dst
	}
	seed := SaltedSeed(lora, salt)
	parent := uint64(0)
	for i := 0; i*blockSize+span <= len(tokens); i++ {
		parent = chainKey(parent, localHash(tokens[i*blockSize:i*blockSize+span], seed))
		dst = append(dst, parent)
		seed = LoRASeed(lora)
	}
	return dst
}

// Keys returns the chained router keys of the full blocks of tokens; a partial tail block is
// ignored. blockSize < 1 yields no keys.
func Keys(tokens []uint32, blockSize int, lora []byte) []uint64 {
	if blockSize < 1 || len(tokens) < blockSize {
		return nil
	}
	return AppendKeys(make([]uint64, 0, len(tokens)/blockSize), 0, tokens, blockSize, lora)
}

// AppendKeys appends the keys of tokens' full blocks chained after parent (0 = the first block
// of a sequence) to dst and returns the extended slice. It does not allocate when dst has room.
// A partial tail block is ignored; blockSize < 1 appends nothing.
func AppendKeys(dst []uint64, parent uint64, tokens []uint32, blockSize int, lora []byte) []uint64 {
	if blockSize < 1 {
		return dst
	}
	seed := LoRASeed(lora)
	n := len(tokens) / blockSize
	for i := range n {
		parent = chainKey(parent, localHash(tokens[i*blockSize:(i+1)*blockSize], seed))
		dst = append(dst, parent)
	}
	return dst
}

// chainKey returns key(i) from key(i-1) = parent and local(i); parent 0 marks block 0, whose key
// is its local hash.
func chainKey(parent, local uint64) uint64 {
	if parent == 0 {
		return local
	}
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	binary.LittleEndian.PutUint64(buf[8:], local)
	return xxh3.HashSeed(buf[:], Seed)
}

// localHashPortable is localHash for any byte order: it encodes the tokens little-endian into a
// stack buffer (a streaming hash for blocks over 64 tokens).
func localHashPortable(block []uint32, seed uint64) uint64 {
	var buf [256]byte
	if len(block) <= len(buf)/4 {
		for i, t := range block {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		return xxh3.HashSeed(buf[:4*len(block)], seed)
	}
	h := xxh3.NewSeed(seed)
	for len(block) > 0 {
		n := min(len(block), len(buf)/4)
		for i, t := range block[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		_, _ = h.Write(buf[:4*n])
		block = block[n:]
	}
	return h.Sum64()
}
