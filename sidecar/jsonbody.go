package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrNotObject is returned when a body is not one valid JSON object.
var ErrNotObject = errors.New("not a JSON object")

// member is one top-level member of a JSON object, kept as the exact input bytes.
type member struct {
	key    string // decoded key (escapes resolved, as a JSON parser sees it)
	rawKey []byte // the key as written, quotes included
	value  []byte // the value as written, no surrounding whitespace
}

// object is a JSON object split into its top-level members, in input order, duplicates kept.
type object struct {
	members []member
}

// parseObject validates data as JSON and splits the top-level object into members.
// Values are sub-slices of data (not copied).
func parseObject(data []byte) (object, error) {
	if !json.Valid(data) {
		return object{}, fmt.Errorf("parse body (%d bytes): %w", len(data), ErrNotObject)
	}
	i := skipWS(data, 0)
	if data[i] != '{' {
		return object{}, fmt.Errorf("parse body: top-level value starts with %q: %w", data[i], ErrNotObject)
	}
	var obj object
	i = skipWS(data, i+1)
	for data[i] != '}' {
		if data[i] == ',' {
			i = skipWS(data, i+1)
		}
		kEnd := skipString(data, i)
		rawKey := data[i:kEnd]
		key, err := decodeKey(rawKey)
		if err != nil {
			return object{}, err
		}
		i = skipWS(data, kEnd)
		i = skipWS(data, i+1) // the ':'
		vEnd := skipValue(data, i)
		obj.members = append(obj.members, member{key: key, rawKey: rawKey, value: data[i:vEnd]})
		i = skipWS(data, vEnd)
	}
	return obj, nil
}

func decodeKey(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("parse body: key %.40q: %w", raw, err)
	}
	return s, nil
}

// The skip helpers assume data is valid JSON (parseObject checks that first).

func skipWS(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

func skipString(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = skipString(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	default:
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j
			}
			j++
		}
		return j
	}
}

// last returns the value of the last member named key (a JSON parser keeps the last duplicate),
// or nil when there is none.
func (o object) last(key string) []byte {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == key {
			return o.members[i].value
		}
	}
	return nil
}

func (o object) has(key string) bool { return o.last(key) != nil }

// editOp says what an edit does to its key.
type editOp uint8

const (
	opSet          editOp = iota // replace the value (at the first occurrence) or append the member
	opSetIfPresent               // replace the value only when the key exists
	opDelete                     // drop every occurrence
)

// edit changes one top-level key of an object.
type edit struct {
	key   string
	op    editOp
	value []byte // valid JSON for opSet and opSetIfPresent
}

// rewrite returns the object with edits applied. Other members keep their bytes and their
// order. A set key stays at the position of its first occurrence and later duplicates are
// dropped, so the output has exactly one member per edited key; a set key that was absent is
// appended at the end. Whitespace between top-level members is not kept.
func (o object) rewrite(edits ...edit) []byte {
	size := 2
	for _, m := range o.members {
		size += len(m.rawKey) + len(m.value) + 2
	}
	for _, e := range edits {
		size += len(e.key) + len(e.value) + 4
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	var done uint64 // bit i: edit i has been written
	for _, m := range o.members {
		ei := findEdit(edits, m.key)
		if ei >= 0 {
			if edits[ei].op == opDelete || done&(1<<ei) != 0 {
				continue
			}
			done |= 1 << ei
			out = appendMember(out, m.rawKey, edits[ei].value)
			continue
		}
		out = appendMember(out, m.rawKey, m.value)
	}
	for i, e := range edits {
		if e.op == opSet && done&(1<<i) == 0 {
			out = appendMember(out, strconv.AppendQuote(nil, e.key), e.value)
		}
	}
	return append(out, '}')
}

func findEdit(edits []edit, key string) int {
	for i := range edits {
		if edits[i].key == key {
			return i
		}
	}
	return -1
}

func appendMember(out, rawKey, value []byte) []byte {
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, rawKey...)
	out = append(out, ':')
	return append(out, value...)
}

// isObject reports whether a raw JSON value is an object.
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// isTrue reports whether a raw JSON value is the literal true.
func isTrue(v []byte) bool { return string(v) == "true" }
