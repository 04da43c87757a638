package route

import (
	"encoding/json"
	"fmt"
)

// FieldKVTransferParams is the request field that drives vLLM's KV transfer (NixlConnector):
// it names the remote engine and blocks to pull. Only pd-sidecar may set it; a client that
// sends it could make a decode worker pull from any host, so it is cut from every body.
const FieldKVTransferParams = "kv_transfer_params"

// member is one top-level member of a JSON object: [start, end) covers the key, the colon and
// the value (not the separating comma).
type member struct {
	key        []byte // raw key contents (escapes not decoded)
	start, end int
}

// eachMember calls f for every top-level member of the JSON object body, in order. It fails
// on anything that is not a well-formed object at the top level (values are skipped, not
// validated).
func eachMember(body []byte, f func(m member)) error {
	s := scanner{b: body}
	if !s.expect('{') {
		return fmt.Errorf("route: body is not a JSON object")
	}
	for first := true; ; first = false {
		s.space()
		if s.peek() == '}' && first {
			s.i++
			break
		}
		start := s.i
		key, ok := s.str()
		if !ok || !s.expect(':') {
			return fmt.Errorf("route: body: malformed member at byte %d", start)
		}
		s.space()
		if !s.value() {
			return fmt.Errorf("route: body: malformed value at byte %d", s.i)
		}
		f(member{key: key, start: start, end: s.i})
		s.space()
		if s.peek() == ',' {
			s.i++
			continue
		}
		if !s.expect('}') {
			return fmt.Errorf("route: body: expected , or } at byte %d", s.i)
		}
		break
	}
	return nil
}

// keyIs reports whether a raw key decodes to name; a key with escapes ("kv\u005ftransfer…")
// is decoded the way the engine's JSON parser decodes it.
func keyIs(raw []byte, name string) bool {
	for _, c := range raw {
		if c == '\\' {
			var k string
			quoted := make([]byte, 0, len(raw)+2)
			quoted = append(append(append(quoted, '"'), raw...), '"')
			return json.Unmarshal(quoted, &k) == nil && k == name
		}
	}
	return string(raw) == name
}

// HasMember reports whether body has a top-level member named name (escaped or not).
func HasMember(body []byte, name string) bool {
	found := false
	_ = eachMember(body, func(m member) { found = found || keyIs(m.key, name) })
	return found
}

// StripMember returns body without every top-level member named name (duplicates included:
// the engine would read the last one), byte for byte otherwise, and how many it removed. A
// body that is not a JSON object is returned unchanged with n = 0.
func StripMember(body []byte, name string) (out []byte, n int) {
	var cut [][2]int
	err := eachMember(body, func(m member) {
		if keyIs(m.key, name) {
			cut = append(cut, [2]int{m.start, m.end})
		}
	})
	if err != nil || len(cut) == 0 {
		return body, 0
	}
	out = make([]byte, 0, len(body))
	pos := 0
	for _, c := range cut {
		out = append(out, body[pos:c[0]]...)
		pos = c[1]
		// Take the comma with the member: the one after it or, for the last member, the one
		// already copied before it, so the object stays well formed.
		if j := nextNonSpace(body, pos); j < len(body) && body[j] == ',' {
			pos = j + 1
		} else if k := prevNonSpace(out, len(out)); k >= 0 && out[k] == ',' {
			out = out[:k]
		}
	}
	return append(out, body[pos:]...), len(cut)
}

func nextNonSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func prevNonSpace(b []byte, i int) int {
	i--
	for i >= 0 && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i--
	}
	return i
}
