package tokenizer

import (
	"bytes"
	"encoding/binary"
	"regexp"
	"strings"
	"unsafe"

	"github.com/ardanlabs/jinja"
)

// Splicing keeps long strings (message contents) out of the template engine's output buffer,
// which otherwise grows by doubling to hold the whole prompt on every request (about 112 kB
// allocated for an 8k-token chat). The output filter, through which the compiled template prints
// every {{ ... }} (compileChatTemplate), records each printed string of spliceMinBytes or more
// and prints a marker instead: the byte 0xFF, which UTF-8 never uses, and the string's index as 4
// little-endian bytes. After
// rendering, the markers are replaced by the recorded strings in a pooled buffer, and the
// tokenizer encodes from that buffer. The expanded text is exactly what the engine would have
// printed, because:
//
//   - the filter is the outermost operation of every output tag, so no template code sees a
//     marker's text in place of its string;
//   - templates that capture output ({% set x %}...{% endset %}, macros, call and filter
//     blocks), whose captured text could be measured or transformed, render without splicing;
//   - markers are the only 0xFF bytes: JSON escapes decode to valid UTF-8, so only a raw 0xFF in
//     the request body (or in the special tokens or the template source) could put one into
//     the output, and such a render goes without splicing.
const spliceMinBytes = 64

// markerByte starts a marker.
const markerByte = 0xFF

// maxPooledSplice bounds the buffer kept for reuse, in bytes.
const maxPooledSplice = 1 << 22

// captureTag matches the tags that capture rendered output instead of printing it.
var captureTag = regexp.MustCompile(`\{%-?\s*(macro|call|filter)\b|\{%-?\s*set\s+[^=%]*-?%\}`)

// spliceable reports whether a template source compiled with the output filter may splice.
func spliceable(src string) bool {
	return !captureTag.MatchString(src) && strings.IndexByte(src, markerByte) < 0
}

// splicer is the per-render state of splicing; renders take one from chatTemplate.splicers.
type splicer struct {
	parts  []string      // recorded strings, by marker index
	marks  []jinja.Value // marker i, kept across renders
	buf    []byte        // the expanded prompt
	filter jinja.Value
}

func newSplicer() *splicer {
	s := &splicer{}
	s.filter = jinja.NewCallable("output", s.output)
	return s
}

// output is pyOutputFilter that records long strings and prints their markers.
func (s *splicer) output(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	v, err := pyOutputFilter(args, kw)
	if err != nil || !v.IsString() {
		return v, err
	}
	str := v.AsString()
	if len(str) < spliceMinBytes {
		return v, nil
	}
	i := len(s.parts)
	s.parts = append(s.parts, str)
	if i == len(s.marks) {
		m := [5]byte{markerByte}
		binary.LittleEndian.PutUint32(m[1:], uint32(i))
		s.marks = append(s.marks, jinja.NewString(string(m[:])))
	}
	return s.marks[i], nil
}

// expand replaces the markers of the engine's output and returns the prompt, which aliases the
// splicer's buffer: it is valid until the splicer is released.
func (s *splicer) expand(out string) string {
	if len(s.parts) == 0 {
		return out
	}
	b := s.buf[:0]
	for {
		i := strings.IndexByte(out, markerByte)
		if i < 0 || i+5 > len(out) {
			b = append(b, out...)
			break
		}
		b = append(b, out[:i]...)
		idx := uint32(out[i+1]) | uint32(out[i+2])<<8 | uint32(out[i+3])<<16 | uint32(out[i+4])<<24
		b = append(b, s.parts[idx]...)
		out = out[i+5:]
	}
	s.buf = b
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// reset drops the references to the request before the splicer is pooled.
func (s *splicer) reset() {
	clear(s.parts)
	s.parts = s.parts[:0]
	if cap(s.buf) > maxPooledSplice {
		s.buf = nil
	}
	if len(s.marks) > maxPooledSplice/64 {
		s.marks = nil
	}
	s.buf = s.buf[:0]
}

// mayHoldMarker reports whether a request body could put a marker byte into the rendered
// prompt: only a raw 0xFF can (the JSON decoder borrows unescaped strings as they are).
func mayHoldMarker(body []byte) bool {
	return bytes.IndexByte(body, markerByte) >= 0
}
