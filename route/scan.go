package route

import "bytes"

// scanBody is the fast path of ParseBody: one pass over the top level of the body that
// finds the routing fields without decoding the prompt (the tokenizer decodes it next). It
// returns ok=false whenever the body is not plainly well-formed or a field needs a closer
// look; ParseBody then decides, with its precise error messages.
func scanBody(ep Endpoint, body []byte) (Body, bool) {
	req := Body{Endpoint: ep}
	s := scanner{b: body}
	if !s.expect('{') {
		return req, false
	}
	var model, prompt, messages bool
	for first := true; ; first = false {
		s.space()
		if s.peek() == '}' && first {
			s.i++
			break
		}
		key, ok := s.str()
		if !ok || !s.expect(':') {
			return req, false
		}
		s.space()
		start := s.i
		if !s.value() {
			return req, false
		}
		v := body[start:s.i]
		if bytes.IndexByte(key, '\\') >= 0 {
			return req, false // an escaped key may spell a field we look for: read it exactly
		}
		switch string(key) {
		case "model":
			if len(v) < 3 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
				return req, false
			}
			req.Model, model = string(v[1:len(v)-1]), true
		case "messages":
			messages = len(v) > 2 && v[0] == '[' && !isEmptyArray(v)
		case "prompt":
			prompt = !bytes.Equal(v, []byte("null"))
		case "stream":
			req.Stream = bytes.Equal(v, []byte("true"))
			if !req.Stream && !bytes.Equal(v, []byte("false")) {
				return req, false
			}
		case engineControlFields[0], engineControlFields[1], engineControlFields[2]:
			req.EngineControl = true
		case "cache_salt":
			if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
				return req, false // null, a non-string or escapes: the exact path decides
			}
			req.CacheSalt = string(v[1 : len(v)-1])
		case "stream_options":
			if bytes.Contains(v, []byte(`"include_usage"`)) {
				return req, false // rare: let ParseBody read it
			}
		}
		s.space()
		if s.peek() == ',' {
			s.i++
			continue
		}
		if !s.expect('}') {
			return req, false
		}
		break
	}
	s.space()
	if s.i != len(body) || !model {
		return req, false
	}
	switch ep {
	case EndpointChat:
		return req, messages
	case EndpointCompletions:
		return req, prompt
	}
	return req, true
}

// scanner skips JSON values without decoding them.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) expect(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// str reads a string and returns its raw contents (escapes not decoded).
func (s *scanner) str() ([]byte, bool) {
	s.space()
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	if !s.skipString() {
		return nil, false
	}
	return s.b[start : s.i-1], true
}

// skipString moves past the string that starts at s.i.
func (s *scanner) skipString() bool {
	i := s.i + 1
	for {
		j := bytes.IndexByte(s.b[i:], '"')
		if j < 0 {
			return false
		}
		i += j
		bs := 0
		for k := i - 1; k >= s.i+1 && s.b[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			s.i = i
			return true
		}
	}
}

// value skips one value: strings exactly, containers by bracket depth, literals up to the
// next delimiter.
func (s *scanner) value() bool {
	switch c := s.peek(); c {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	case 0, ',', '}', ']', ':':
		return false
	default:
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return false
	}
}
