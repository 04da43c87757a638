package extproc

import (
	"bytes"
	"encoding/json"
)

// Bounds of response observation (envoy-extproc.md §3).
const (
	// MaxSSETail caps the bytes of an incomplete SSE event held between chunks; beyond it
	// parsing stops for the stream (the echo is unaffected) and is counted.
	MaxSSETail = 1 << 20
	// MaxJSONResponse caps the copy of a non-streaming answer kept to read its usage.
	MaxJSONResponse = 4 << 20
)

// Usage is the token accounting an answer reports (OpenAI `usage`).
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64 // prompt_tokens_details.cached_tokens; -1 unknown (null or absent)
}

// observation is what one response chunk revealed.
type observation struct {
	FirstToken  bool // an event with a non-empty choices array (the first one sets it)
	TokenEvents int  // events with a non-empty choices array in this feed (vLLM streams one token per event)
	Done        bool // the [DONE] marker
	Error       bool // a top-level `error` object
	HasUsage    bool
	Usage       Usage
	Overflow    bool // the tail cap was hit: parsing stopped
}

// sseParser reassembles Server-Sent Events across chunk boundaries. Events end at a blank
// line (LF or CRLF endings); only complete events are parsed. It never alters the bytes.
type sseParser struct {
	buf     []byte // unparsed bytes, starting at the current event
	scan    int    // offset in buf of the first line not yet scanned
	stopped bool   // tail cap hit or [DONE] seen
	tokens  bool   // a token event was seen
}

// Feed appends chunk and reports what its complete events revealed.
func (p *sseParser) Feed(chunk []byte) observation {
	var obs observation
	if p.stopped {
		return obs
	}
	p.buf = append(p.buf, chunk...)
	start := 0
	for {
		end, next := p.eventEnd(start)
		if end < 0 {
			break
		}
		p.event(p.buf[start:end], &obs)
		start, p.scan = next, next
		if p.stopped {
			p.buf = nil
			return obs
		}
	}
	n := copy(p.buf, p.buf[start:])
	p.buf = p.buf[:n]
	p.scan -= start
	if len(p.buf) > MaxSSETail {
		p.stopped, p.buf, obs.Overflow = true, nil, true
	}
	return obs
}

// eventEnd scans complete lines from p.scan; at a blank line it returns the end of the event
// that starts at start and the offset after the blank line, else (-1, -1).
func (p *sseParser) eventEnd(start int) (end, next int) {
	for {
		nl := bytes.IndexByte(p.buf[p.scan:], '\n')
		if nl < 0 {
			return -1, -1
		}
		lineStart, lineEnd := p.scan, p.scan+nl
		p.scan = lineEnd + 1
		if lineEnd > lineStart && p.buf[lineEnd-1] == '\r' {
			lineEnd--
		}
		if lineEnd == lineStart && lineStart > start {
			return lineStart, p.scan
		}
		if lineEnd == lineStart { // blank line with no event before it
			return start, p.scan
		}
	}
}

// event parses one complete event's lines.
func (p *sseParser) event(ev []byte, obs *observation) {
	var data []byte
	lines := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if lines > 0 {
			data = append(append(data[:len(data):len(data)], '\n'), v...)
		} else {
			data = v
		}
		lines++
	}
	if lines == 0 {
		return
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		obs.Done, p.stopped = true, true
		return
	}
	p.payload(data, obs)
}

// responsePayload is the typed view of an SSE data payload or a non-streaming answer.
type responsePayload struct {
	Choices []struct{}      `json:"choices"`
	Error   json.RawMessage `json:"error"`
	Usage   *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// payload reads one JSON payload; malformed payloads reveal nothing. Only the first token
// event of the stream reports FirstToken.
func (p *sseParser) payload(data []byte, obs *observation) {
	var r responsePayload
	if json.Unmarshal(data, &r) != nil {
		return
	}
	var one observation
	observePayload(&r, &one)
	if one.FirstToken {
		obs.TokenEvents++
	}
	if one.FirstToken && !p.tokens {
		p.tokens, obs.FirstToken = true, true
	}
	obs.Error = obs.Error || one.Error
	if one.HasUsage {
		obs.HasUsage, obs.Usage = true, one.Usage
	}
}

// observePayload records what one decoded payload says.
func observePayload(r *responsePayload, obs *observation) {
	if len(r.Choices) > 0 {
		obs.FirstToken = true
	}
	if e := bytes.TrimSpace(r.Error); len(e) > 0 && !bytes.Equal(e, []byte("null")) {
		obs.Error = true
	}
	if r.Usage != nil {
		obs.HasUsage = true
		obs.Usage = Usage{PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens, CachedTokens: -1}
		if d := r.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			obs.Usage.CachedTokens = *d.CachedTokens
		}
	}
}

// parseJSONResponse reads a complete non-streaming answer.
func parseJSONResponse(body []byte) observation {
	var obs observation
	var r responsePayload
	if json.Unmarshal(body, &r) == nil {
		observePayload(&r, &obs)
	}
	return obs
}
