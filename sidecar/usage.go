package sidecar

import (
	"bytes"
	"strconv"
)

// usageRewriter sets usage.prompt_tokens_details.cached_tokens in D's answer to P's value
// (vllm-kv-events.md §6.3 step 6): D reports the transferred prefix as cached, P knows how much
// of the prompt was really a cache hit. A zero or unknown P value is written as null, and a
// missing prompt_tokens_details object is created only for a positive value.
type usageRewriter struct {
	value  []byte // P's count as JSON, or null
	create bool   // create prompt_tokens_details when D's usage has none
}

func newUsageRewriter(ans prefillAnswer) usageRewriter {
	if !ans.cachedKnown || ans.cachedTokens == 0 {
		return usageRewriter{value: []byte(jsonNull)}
	}
	return usageRewriter{value: strconv.AppendInt(nil, ans.cachedTokens, 10), create: true}
}

// rewriteJSON returns body with the usage rewritten and true, or body unchanged and false when
// it is not a JSON object with a usage object.
func (u usageRewriter) rewriteJSON(body []byte) ([]byte, bool) {
	obj, err := parseObject(body)
	if err != nil {
		return body, false
	}
	usage := obj.last(keyUsage)
	if !isObject(usage) {
		return body, false
	}
	uo, err := parseObject(usage)
	if err != nil {
		return body, false
	}
	var details []byte
	if d := uo.last(keyPromptTokensDetails); isObject(d) {
		do, err := parseObject(d)
		if err != nil {
			return body, false
		}
		details = do.rewrite(edit{key: keyCachedTokens, op: opSet, value: u.value})
	} else if u.create {
		details = object{}.rewrite(edit{key: keyCachedTokens, op: opSet, value: u.value})
	} else {
		return body, false
	}
	newUsage := uo.rewrite(edit{key: keyPromptTokensDetails, op: opSet, value: details})
	return obj.rewrite(edit{key: keyUsage, op: opSet, value: newUsage}), true
}

const (
	sseData     = "data:"
	usageMarker = `"usage"`
)

// sseUsage rewrites the usage of a server-sent-event stream line by line. Complete lines go
// out as soon as they are seen; only a partial last line is held back, up to maxLineBytes.
// A longer line switches the rewriter off for the rest of the stream (bytes pass unchanged).
type sseUsage struct {
	u            usageRewriter
	tail         []byte // partial line carried to the next chunk
	maxLineBytes int
	off          bool
	rewrites     int // lines rewritten so far
}

// feed appends to out what can be sent for chunk and returns it.
func (s *sseUsage) feed(out, chunk []byte) []byte {
	if s.off {
		return append(out, chunk...)
	}
	data := chunk
	if len(s.tail) > 0 {
		s.tail = append(s.tail, chunk...)
		data = s.tail
	}
	for {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			break
		}
		out = s.line(out, data[:nl+1])
		data = data[nl+1:]
	}
	if len(data) > s.maxLineBytes {
		s.off = true
		out = append(out, data...)
		s.tail = s.tail[:0]
		return out
	}
	s.tail = append(s.tail[:0:0], data...)
	return out
}

// finish appends the held partial line (a stream that ended without a newline).
func (s *sseUsage) finish(out []byte) []byte {
	if len(s.tail) > 0 && !s.off {
		out = s.line(out, s.tail)
	}
	s.tail = nil
	return out
}

func (s *sseUsage) line(out, line []byte) []byte {
	payload, ok := bytes.CutPrefix(line, []byte(sseData))
	if !ok || !bytes.Contains(payload, []byte(usageMarker)) {
		return append(out, line...)
	}
	body := bytes.TrimRight(payload, "\r\n")
	end := payload[len(body):]
	lead := len(body) - len(bytes.TrimLeft(body, " "))
	newBody, changed := s.u.rewriteJSON(body[lead:])
	if !changed {
		return append(out, line...)
	}
	s.rewrites++
	out = append(out, sseData...)
	out = append(out, body[:lead]...)
	out = append(out, newBody...)
	return append(out, end...)
}
