package workload

import (
	"fmt"

	"github.com/condisagg/condisagg/internal/splitmix"
)

const phi = splitmix.Gamma // golden-ratio increment of splitmix64

// Default vocabulary range: Llama-3 regular tokens, clear of the special tokens.
const (
	DefaultVocabLo = 1
	DefaultVocabHi = 128000
)

// Vocab turns segments into pseudo-token ids (perf-model.md §7, "Expanding to tokens"):
// for segment id h, x = Seed XOR (h·φ mod 2⁶⁴) and token k is Lo + splitmix64(x+k) mod (Hi−Lo).
// The zero Vocab is not usable; build one with NewVocab or DefaultVocab.
type Vocab struct {
	Seed   uint64 // per-trace namespace; different seeds never share prefixes
	Lo, Hi uint32 // token ids are in [Lo, Hi)
}

// DefaultVocab is the Llama-3 range [1, 128000) with seed 0.
func DefaultVocab() Vocab { return Vocab{Lo: DefaultVocabLo, Hi: DefaultVocabHi} }

// NewVocab validates the range and returns the Vocab.
func NewVocab(seed uint64, lo, hi uint32) (Vocab, error) {
	if hi <= lo {
		return Vocab{}, fmt.Errorf("workload: vocab range [%d, %d): hi must exceed lo", lo, hi)
	}
	return Vocab{Seed: seed, Lo: lo, Hi: hi}, nil
}

// Token is token k of segment id h.
func (v Vocab) Token(h uint64, k int) uint32 {
	x := v.Seed ^ (h * phi)
	return v.Lo + uint32(splitmix.Mix64(x+uint64(k))%uint64(v.Hi-v.Lo))
}

// AppendSegment appends the tokens of s to dst.
func (v Vocab) AppendSegment(dst []uint32, s Segment) []uint32 {
	return v.appendRange(dst, s.ID, int(s.Start), int(s.Start)+int(s.Len))
}

func (v Vocab) appendRange(dst []uint32, h uint64, from, to int) []uint32 {
	x := v.Seed ^ (h * phi)
	span := uint64(v.Hi - v.Lo)
	for k := from; k < to; k++ {
		dst = append(dst, v.Lo+uint32(splitmix.Mix64(x+uint64(k))%span))
	}
	return dst
}

// AppendTokens appends the concatenated tokens of segs to dst.
func (v Vocab) AppendTokens(dst []uint32, segs []Segment) []uint32 {
	dst = grow(dst, segmentsLen(segs))
	for _, s := range segs {
		dst = v.AppendSegment(dst, s)
	}
	return dst
}

// AppendPrompt appends r's prompt tokens to dst.
func (v Vocab) AppendPrompt(dst []uint32, r *Request) []uint32 { return v.AppendTokens(dst, r.Prompt) }

// AppendOutput appends r's forced output tokens to dst.
func (v Vocab) AppendOutput(dst []uint32, r *Request) []uint32 { return v.AppendTokens(dst, r.Output) }

// TokenAt is token i of the concatenation of segs, and false when i is out of range. It costs
// one step per segment; use AppendTokens to walk a whole prompt.
func (v Vocab) TokenAt(segs []Segment, i int) (uint32, bool) {
	if i < 0 {
		return 0, false
	}
	for _, s := range segs {
		if i < int(s.Len) {
			return v.Token(s.ID, int(s.Start)+i), true
		}
		i -= int(s.Len)
	}
	return 0, false
}

func grow(dst []uint32, n int) []uint32 {
	if cap(dst)-len(dst) < n {
		nd := make([]uint32, len(dst), len(dst)+n)
		copy(nd, dst)
		return nd
	}
	return dst
}
