package vllmsim

import (
	"fmt"

	"github.com/condisagg/condisagg/internal/splitmix"
	"github.com/condisagg/condisagg/tokenizer"
)

// commonWords are candidate output words; Vocab keeps those that are one token with and
// without a leading space in the model's vocabulary.
var commonWords = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
	"on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
	"had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
	"been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
	"good", "new", "first", "last", "long", "great", "little", "own", "other", "old", "right",
	"big", "high", "different", "small", "large", "next", "early", "young", "important", "few",
	"public", "bad", "same", "able", "make", "know", "take", "see", "come", "think", "look",
	"want", "give", "use", "find", "tell", "ask", "work", "seem", "feel", "try", "leave", "call",
	"world", "life", "hand", "part", "child", "eye", "woman", "place", "week", "case", "point",
	"number", "group", "problem", "fact", "day", "way", "thing", "man", "water", "house", "book",
}

// Vocab is the output vocabulary of vllm-sim: common words that are single tokens both with
// and without a leading space, so generated text re-tokenizes to the same ids and the next
// turn of a conversation hits the cache.
type Vocab struct {
	spaced, bare []uint32
	text         map[uint32]string
}

// NewVocab selects the words of tok's vocabulary.
func NewVocab(tok *tokenizer.Tokenizer) (*Vocab, error) {
	v := &Vocab{text: make(map[uint32]string, 2*len(commonWords))}
	for _, w := range commonWords {
		sp := tok.Encode(nil, " "+w, tokenizer.WithoutSpecialTokens)
		bare := tok.Encode(nil, w, tokenizer.WithoutSpecialTokens)
		if len(sp) != 1 || len(bare) != 1 {
			continue
		}
		v.spaced = append(v.spaced, sp[0])
		v.bare = append(v.bare, bare[0])
		v.text[sp[0]], v.text[bare[0]] = " "+w, w
	}
	if len(v.spaced) < 8 {
		return nil, fmt.Errorf("vllmsim: output vocabulary: only %d of %d common words are single tokens", len(v.spaced), len(commonWords))
	}
	return v, nil
}

// Output returns a request's output token function: deterministic words drawn with seed, the
// first one without a leading space when bareFirst is set (after a chat template's
// "assistant\n") and every later one with a space.
func (v *Vocab) Output(seed uint64, bareFirst bool) func(i int) uint32 {
	return func(i int) uint32 {
		k := splitmix.Mix64(seed+uint64(i)) % uint64(len(v.spaced))
		if i == 0 && bareFirst {
			return v.bare[k]
		}
		return v.spaced[k]
	}
}

// AppendText appends the text of output tokens (ids not from this vocabulary are skipped).
func (v *Vocab) AppendText(dst []byte, ids []uint32) []byte {
	for _, id := range ids {
		dst = append(dst, v.text[id]...)
	}
	return dst
}
