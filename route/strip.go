package route

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/condisagg/condisagg/internal/reqjson"
)

// FieldKVTransferParams is the request field that drives vLLM's KV transfer (NixlConnector):
// it names the remote engine and blocks to pull.
const FieldKVTransferParams = "kv_transfer_params"

// engineControlFields are the request members vLLM 0.32 passes to the engine itself rather
// than to sampling: kv_transfer_params and ec_transfer_params become SamplingParams.extra_args,
// which the KV and encoder-cache connectors act on (NixlConnector pulls KV from the host and
// blocks they name), and vllm_xargs is copied into extra_args whole, so it can carry either of
// them, or kv_cache_report_mode, under its own name. Every request model of vLLM 0.32 that
// generates (chat, completions, responses, messages, generate, cohere chat, transcription)
// accepts some of them. Only pd-sidecar may set them; they are cut from every body.
var engineControlFields = [...]string{FieldKVTransferParams, "ec_transfer_params", "vllm_xargs"}

// EngineControlFields returns the members Clean cuts.
func EngineControlFields() []string { return engineControlFields[:] }

// IsEngineControl reports whether a decoded top-level key is one Clean cuts.
func IsEngineControl(key string) bool {
	for _, f := range engineControlFields {
		if key == f {
			return true
		}
	}
	return false
}

// Clean returns body without its engine-control members (every occurrence: the engine reads
// the last), byte for byte otherwise, and the name of each member it cut. A body that may hold
// one (mayHoldEngineControl) and is not one JSON object as vLLM reads it (reqjson) is an error
// wrapping ErrInvalidBody: a body that cannot be read cannot be cleaned, so it must not pass
// (the engine refuses it too).
func Clean(body []byte) (out []byte, cut []string, err error) {
	if !mayHoldEngineControl(body) {
		return body, nil, nil
	}
	var spans [][2]int
	if scanErr := eachMember(body, func(m member) {
		if k, ok := decodeKey(m.key); ok && IsEngineControl(k) {
			spans = append(spans, [2]int{m.start, m.end})
			cut = append(cut, k)
		}
	}); scanErr != nil {
		// Not plain enough for the fast scan (a BOM, say): read it exactly.
		obj, err := reqjson.Parse(body)
		if err != nil {
			return body, nil, invalidBody("request body is not a valid JSON object: %s", err)
		}
		spans, cut = spans[:0], cut[:0]
		for _, m := range obj.Members {
			if IsEngineControl(m.Key) {
				spans = append(spans, [2]int{m.Start, m.End})
				cut = append(cut, m.Key)
			}
		}
	}
	if len(spans) == 0 {
		return body, nil, nil
	}
	return cutSpans(body, spans), cut, nil
}

// mayHoldEngineControl reports whether body could spell an engine-control key: it holds one of
// the names, a \u escape (the only way a key can spell a letter or '_' otherwise), or a NUL
// byte (UTF-16 and UTF-32, which the engine's json.loads decodes, spell ASCII with NULs). The
// other bodies are passed as they are without a scan: a typical chat body costs a few memchr
// passes instead of a walk of its members.
func mayHoldEngineControl(body []byte) bool {
	if bytes.IndexByte(body, 0) >= 0 || bytes.Contains(body, []byte(`\u`)) {
		return true
	}
	for _, f := range engineControlFields {
		if bytes.Contains(body, []byte(f)) {
			return true
		}
	}
	return false
}

// cutSpans removes each member span with one adjacent comma, so the object stays well formed.
func cutSpans(body []byte, spans [][2]int) []byte {
	out := make([]byte, 0, len(body))
	pos := 0
	for _, c := range spans {
		out = append(out, body[pos:c[0]]...)
		pos = c[1]
		// Take the comma with the member: the one after it or, for the last member, the one
		// already copied before it.
		if j := nextNonSpace(body, pos); j < len(body) && body[j] == ',' {
			pos = j + 1
		} else if k := prevNonSpace(out, len(out)); k >= 0 && out[k] == ',' {
			out = out[:k]
		}
	}
	return append(out, body[pos:]...)
}

// member is one top-level member of a JSON object: [start, end) covers the key, the colon and
// the value (not the separating comma).
type member struct {
	key        []byte // raw key contents (escapes not decoded)
	start, end int
}

// eachMember calls f for every top-level member of the JSON object body, in order. It fails
// on anything that is not a plainly well-formed object at the top level (values are skipped,
// not validated).
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
	s.space()
	if s.i != len(body) {
		return fmt.Errorf("route: body: extra data at byte %d", s.i)
	}
	return nil
}

// HasMember reports whether body has a top-level member named name (escaped or not).
func HasMember(body []byte, name string) bool {
	found := false
	_ = eachMember(body, func(m member) {
		if k, ok := decodeKey(m.key); ok && k == name {
			found = true
		}
	})
	return found
}

// decodeKey decodes a raw key the way the engine's JSON parser does ("kv\u005ftransfer…").
func decodeKey(raw []byte) (string, bool) {
	for _, c := range raw {
		if c == '\\' {
			var k string
			quoted := make([]byte, 0, len(raw)+2)
			quoted = append(append(append(quoted, '"'), raw...), '"')
			return k, json.Unmarshal(quoted, &k) == nil
		}
	}
	return string(raw), true
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
