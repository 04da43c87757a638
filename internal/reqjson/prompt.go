package reqjson

import (
	"fmt"
	"math"
)

// Prompt is a /v1/completions prompt as vLLM's CompletionRequest validates it: pydantic's
// smart union of list[int >= 0] | list[list[int >= 0]] | str | list[str]. Exactly one of the
// fields is set; a batch (several sequences) has Sequences > 1.
type Prompt struct {
	Text      string   // a string, or the one string of a one-element list
	IDs       []uint32 // token ids, or the one list of a one-element list of lists
	IsIDs     bool     // IDs holds the prompt (it may be empty)
	Sequences int      // how many sequences vLLM runs (1 for a single prompt)
}

// ReadPrompt reads a prompt value. Members are tried as pydantic's smart union does: every
// member strictly first (JSON integers only), then laxly (floats with no fraction, numeric
// strings and booleans as integers).
func ReadPrompt(v Value) (Prompt, error) {
	switch v.Kind() {
	case KindString:
		s, err := v.Str()
		return Prompt{Text: s, Sequences: 1}, err
	case KindArray:
	default:
		return Prompt{}, fmt.Errorf("%w: prompt is %s; want a string, a list of strings or token ids", ErrType, v.Kind())
	}
	elems, err := v.Elems()
	if err != nil {
		return Prompt{}, err
	}
	for _, lax := range []bool{false, true} {
		if ids, ok := tokenIDs(elems, lax); ok {
			return Prompt{IDs: ids, IsIDs: true, Sequences: 1}, nil
		}
		if p, ok := idLists(elems, lax); ok {
			return p, nil
		}
		if p, ok := strList(elems); ok {
			return p, nil
		}
	}
	return Prompt{}, fmt.Errorf("%w: prompt is a list that is neither token ids (integers >= 0), lists of token ids, nor strings", ErrType)
}

// tokenIDs reads elems as list[int >= 0] (strict: JSON integers only).
func tokenIDs(elems []Value, lax bool) ([]uint32, bool) {
	ids := make([]uint32, 0, len(elems))
	for _, e := range elems {
		var n int64
		var ok bool
		if lax {
			var err error
			n, err = e.Int()
			ok = err == nil
		} else {
			n, ok = e.StrictInt()
		}
		if !ok || n < 0 || n > math.MaxUint32 {
			return nil, false
		}
		ids = append(ids, uint32(n))
	}
	return ids, true
}

func idLists(elems []Value, lax bool) (Prompt, bool) {
	if len(elems) == 0 {
		return Prompt{}, false
	}
	var first []uint32
	for i, e := range elems {
		inner, err := e.Elems()
		if err != nil {
			return Prompt{}, false
		}
		ids, ok := tokenIDs(inner, lax)
		if !ok {
			return Prompt{}, false
		}
		if i == 0 {
			first = ids
		}
	}
	return Prompt{IDs: first, IsIDs: true, Sequences: len(elems)}, true
}

func strList(elems []Value) (Prompt, bool) {
	if len(elems) == 0 {
		return Prompt{}, false
	}
	var first string
	for i, e := range elems {
		s, err := e.Str()
		if err != nil {
			return Prompt{}, false
		}
		if i == 0 {
			first = s
		}
	}
	return Prompt{Text: first, Sequences: len(elems)}, true
}
