package route

import "bytes"

// StreamCleaner is Clean for a body that arrives in chunks and must leave in chunks (a route
// fixed before the body: STREAMED, and passthrough paths in full duplex): each chunk is
// written out at once, except the key of the member being read, held until it is known, and
// the members Clean would cut, dropped. Whitespace between members is dropped and commas are
// written between the members kept, so the output is the same object without those members.
// A body that is not one JSON object is an error wrapping ErrInvalidBody once the cleaner sees
// it; bytes already written never include a cut member. The zero value is ready; it holds at
// most maxHeldKey bytes. Not safe for concurrent use.
type StreamCleaner struct {
	state  cleanState
	bom    int    // bytes of a leading UTF-8 BOM matched so far
	key    []byte // the current member's key, quotes included, until it is known
	keyEsc bool   // the previous key byte was a backslash
	keep   bool   // the current member is written
	first  bool   // no member yet in the object
	wrote  bool   // a member was written (the next kept one needs a comma)
	depth  int    // container depth inside the current value
	inStr  bool   // inside a string of the current value
	esc    bool   // the previous byte of that string was a backslash
	base   int    // bytes of the chunks before the current one, for errors
	cut    []string
	err    error
}

type cleanState uint8

const (
	csStart       cleanState = iota // BOM, whitespace, then '{'
	csBeforeKey                     // whitespace, then '"' (or '}' in an empty object)
	csKey                           // inside the key
	csAfterKey                      // whitespace, then ':'
	csBeforeValue                   // whitespace, then the value
	csValue                         // inside the value
	csAfterValue                    // whitespace, then ',' or '}'
	csEnd                           // trailing whitespace only
)

// maxHeldKey bounds the key bytes held back: no engine-control name is longer even with every
// character escaped (\uXXXX), so a longer key is written through as a kept member.
const maxHeldKey = 128

// Write appends the cleaned form of chunk to dst.
func (c *StreamCleaner) Write(dst, chunk []byte) ([]byte, error) {
	if c.err != nil {
		return dst, c.err
	}
	defer func() { c.base += len(chunk) }()
	for i := 0; i < len(chunk); i++ {
		b := chunk[i]
		switch c.state {
		case csStart:
			if c.bom < len(bom) && b == bom[c.bom] && (c.bom > 0 || c.base+i == 0) {
				c.bom++
				if c.bom == len(bom) {
					dst = append(dst, bom...)
				}
			} else if c.bom > 0 && c.bom < len(bom) {
				return dst, c.fail("a broken byte order mark", i)
			} else if b == '{' {
				dst = append(dst, b)
				c.state, c.first = csBeforeKey, true
			} else if !isSpace(b) {
				return dst, c.fail("the body is not a JSON object", i)
			}
		case csBeforeKey:
			switch {
			case b == '"':
				c.key, c.keyEsc, c.state = append(c.key[:0], b), false, csKey
			case b == '}' && c.first:
				dst = append(dst, b)
				c.state = csEnd
			case !isSpace(b):
				return dst, c.fail("expecting a property name in double quotes", i)
			}
		case csKey:
			dst = c.keyByte(dst, b)
		case csAfterKey:
			switch {
			case b == ':':
				if c.keep {
					if len(c.key) > 0 { // not written through already
						dst = c.openMember(dst)
					}
					dst = append(dst, b)
				}
				c.state = csBeforeValue
			case !isSpace(b):
				return dst, c.fail("expecting ':' after a property name", i)
			}
		case csBeforeValue:
			if isSpace(b) {
				continue
			}
			if b == ',' || b == '}' || b == ']' || b == ':' {
				return dst, c.fail("expecting a value", i)
			}
			c.state, c.depth, c.inStr, c.esc = csValue, 0, false, false
			i-- // read it as the value's first byte
		case csValue:
			var done bool
			start := i
			i, done = c.scanValue(chunk, i)
			if c.keep {
				dst = append(dst, chunk[start:i]...)
			}
			if done {
				c.state = csAfterValue
			}
			i-- // the loop's i++ moves to the byte scanValue stopped at
		case csAfterValue:
			switch {
			case b == ',':
				c.state, c.first = csBeforeKey, false
			case b == '}':
				dst = append(dst, b)
				c.state = csEnd
			case !isSpace(b):
				return dst, c.fail("expecting ',' or '}' after a value", i)
			}
		case csEnd:
			if !isSpace(b) {
				return dst, c.fail("extra data after the JSON object", i)
			}
		}
	}
	return dst, nil
}

// keyByte reads one byte of a key; a key that cannot name an engine-control member is written
// through without waiting for its end.
func (c *StreamCleaner) keyByte(dst []byte, b byte) []byte {
	if len(c.key) == 0 { // written through: only its end matters
		if b == '"' && !c.keyEsc {
			c.state = csAfterKey
		}
		c.keyEsc = b == '\\' && !c.keyEsc
		dst = append(dst, b)
		return dst
	}
	c.key = append(c.key, b)
	if b == '"' && !c.keyEsc {
		name, ok := decodeKey(c.key[1 : len(c.key)-1])
		c.keep = !(ok && IsEngineControl(name))
		if !c.keep {
			c.cut = append(c.cut, name)
		}
		c.state = csAfterKey
		return dst
	}
	c.keyEsc = b == '\\' && !c.keyEsc
	if len(c.key) > maxHeldKey {
		c.keep = true
		dst = c.openMember(dst)
		c.key = c.key[:0]
	}
	return dst
}

// openMember writes the separator and the held key of a kept member.
func (c *StreamCleaner) openMember(dst []byte) []byte {
	if c.wrote {
		dst = append(dst, ',')
	}
	c.wrote = true
	return append(dst, c.key...)
}

// scanValue advances over the value from chunk[i]; it returns where it stopped and whether
// the value ended (a scalar ends before its delimiter, which is left for csAfterValue).
func (c *StreamCleaner) scanValue(chunk []byte, i int) (int, bool) {
	for i < len(chunk) {
		b := chunk[i]
		if c.inStr {
			if c.esc {
				c.esc = false
				i++
				continue
			}
			j := bytes.IndexAny(chunk[i:], `"\`)
			if j < 0 {
				return len(chunk), false
			}
			i += j
			c.inStr, c.esc = chunk[i] != '"', chunk[i] == '\\'
			i++
			if !c.inStr && c.depth == 0 {
				return i, true
			}
			continue
		}
		switch {
		case b == '"':
			c.inStr = true
		case b == '{' || b == '[':
			c.depth++
		case b == '}' || b == ']':
			if c.depth == 0 {
				return i, true // a scalar's delimiter
			}
			c.depth--
			if c.depth == 0 {
				return i + 1, true
			}
		case c.depth == 0 && (b == ',' || isSpace(b)):
			return i, true
		}
		i++
	}
	return i, false
}

// Close checks that the body ended as one complete JSON object.
func (c *StreamCleaner) Close() error {
	if c.err != nil {
		return c.err
	}
	if c.state == csStart && c.base == 0 {
		return nil // an empty body: nothing to clean (the engine answers it)
	}
	if c.state == csValue && c.depth == 0 && !c.inStr {
		c.state = csAfterValue // a scalar cut by the end of the body: the object is still open
	}
	if c.state != csEnd {
		return c.fail("the body ended inside the JSON object", 0)
	}
	return nil
}

// Cut returns the name of each member cut so far.
func (c *StreamCleaner) Cut() []string { return c.cut }

func (c *StreamCleaner) fail(what string, i int) error {
	c.err = invalidBody("request body is not a valid JSON object: %s at byte %d", what, c.base+i)
	return c.err
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// bom is the UTF-8 byte order mark, which the engine's json.loads skips.
var bom = []byte("\xef\xbb\xbf")
