package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrUnknownID is wrapped by Decode's error for an id that is neither in the vocabulary nor
// an added token.
var ErrUnknownID = errors.New("token id not in the vocabulary")

// decodeTable maps ids back to the bytes they stand for; built on the first Decode.
type decodeTable struct {
	once   sync.Once
	pieces []string // by id; "" when unused
	known  []bool   // by id
}

// Decode returns the text of ids as Hugging Face's tokenizer.decode does for a byte-level
// model with skip_special_tokens false (vLLM's /detokenize): each id's bytes in order (added
// tokens as their content), invalid UTF-8 replaced by U+FFFD. Models without a byte-level
// pre-tokenizer are not supported (ErrUnsupported).
func (t *Tokenizer) Decode(ids []uint32) (string, error) {
	if !t.model.byteLevel {
		return "", fmt.Errorf("tokenizer: decode: only byte-level models: %w", ErrUnsupported)
	}
	d := t.decoder
	d.once.Do(func() { t.buildDecodeTable(d) })
	var sb strings.Builder
	for _, id := range ids {
		if int(id) >= len(d.known) || !d.known[id] {
			return "", fmt.Errorf("tokenizer: decode: id %d: %w", id, ErrUnknownID)
		}
		sb.WriteString(d.pieces[id])
	}
	return strings.ToValidUTF8(sb.String(), "\uFFFD"), nil
}

func (t *Tokenizer) buildDecodeTable(d *decodeTable) {
	n := 0
	for _, id := range t.model.vocab {
		n = max(n, int(id)+1)
	}
	for _, id := range t.special {
		n = max(n, int(id)+1)
	}
	d.pieces, d.known = make([]string, n), make([]bool, n)
	for piece, id := range t.model.vocab { // byte-level: the key is the raw bytes
		d.pieces[id], d.known[id] = piece, true
	}
	for content, id := range t.special { // added tokens win, as in Hugging Face
		d.pieces[id], d.known[id] = content, true
	}
}
