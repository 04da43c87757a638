package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// modeKVRetry is the requests_total mode of a request whose decode leg could not load P's KV
// and that D then prefilled locally.
const modeKVRetry = "kv_load_retry"

// kvDrainBytes bounds what is read of a failed decode answer before its connection is
// closed (a small error body; reading it lets the connection be reused).
const kvDrainBytes = 64 << 10

// decodeRemote runs the decode leg with P's kv_transfer_params and relays D's answer. When D
// could not load the KV, which vLLM's default kv_load_failure_policy "fail" reports as an
// error before the first token (HTTP 500, or an error event first in a stream), nothing has
// gone to the client yet: the request is sent to D once more without kv_transfer_params, so
// D prefills it locally, and the answer says so in HeaderKVTransfer.
func (p *Proxy) decodeRemote(ctx context.Context, ex *exchange, req object, ans prefillAnswer, stream bool) {
	var u *usageRewriter
	state := KVTransferPulled
	if p.cfg.Usage == UsageFromPrefill {
		ur := newUsageRewriter(ans)
		u, state = &ur, KVTransferRewritten
	}
	var firstByte time.Duration
	if stream {
		firstByte = p.cfg.DecodeFirstByteTimeout
	}
	up, ok := p.callDecode(ctx, ex, decodeBody(req, ans.kvTransferParams), firstByte, modeRemote)
	if !ok {
		return
	}
	failed := up.resp.StatusCode == http.StatusInternalServerError
	if !failed && stream && up.resp.StatusCode/100 == 2 && isEventStream(up.resp.Header) && isPeekPath(ex.r.URL.Path) {
		held, errEvent, err := peekFirstToken(up.resp.Body, p.cfg.MaxSSELineBytes)
		if err != nil && err != io.EOF {
			up.close()
			if ctx.Err() != nil {
				p.m.ClientCancels.Inc()
				p.countRequest(modeRemote, statusClientClosed)
				return
			}
			p.m.UpstreamErrors.WithLabelValues(string(legDecode), reasonTransport).Inc()
			e := upstreamError(legDecode, reasonTransport)
			p.countRequest(modeRemote, e.status)
			e.write(ex.w, ex.id)
			return
		}
		failed = errEvent
		up.resp.Body = heldBody{Reader: io.MultiReader(bytes.NewReader(held), up.resp.Body), Closer: up.resp.Body}
	}
	if failed {
		_, _ = io.Copy(io.Discard, io.LimitReader(up.resp.Body, kvDrainBytes))
		up.close()
		p.m.KVLoadFailures.Inc()
		p.log.Debug("decode could not load the KV, local prefill at decode", "request_id", ex.id, "endpoint", ex.decode)
		ex.w.Header().Set(HeaderKVTransfer, KVTransferFailed)
		p.decode(ctx, ex, localBody(req), stream, nil, modeKVRetry)
		return
	}
	defer up.close()
	ex.w.Header().Set(HeaderKVTransfer, state)
	p.countRequest(modeRemote, up.resp.StatusCode)
	p.log.Debug("request routed", "request_id", ex.id, "route", modeRemote, "endpoint", ex.decode)
	p.relay(ctx, ex, up.resp, u)
}

// heldBody replays the events read while peeking, then the rest of D's stream.
type heldBody struct {
	io.Reader
	io.Closer
}

// isPeekPath: the streams whose first events peekFirstToken understands (vLLM's chat and
// completion chunks). /v1/responses streams typed events and is relayed without a peek.
func isPeekPath(path string) bool { return path == pathCompletions || path == pathChatCompletions }

// peekFirstToken reads D's event stream up to its first event that carries output (a token, a
// finish reason, a usage chunk or [DONE]), or an error event, and returns everything it read.
// Only the chat stream's opening role chunk comes before that. It stops early, without a
// verdict, once it holds more than limit bytes. errEvent reports an error event before any
// output: vLLM's stream for a request whose KV load failed.
func peekFirstToken(r io.Reader, limit int) (held []byte, errEvent bool, err error) {
	buf := make([]byte, 0, 4<<10)
	scanned := 0 // bytes of buf already split into events
	for len(buf) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		for {
			end := eventEnd(buf[scanned:])
			if end < 0 {
				break
			}
			ev := buf[scanned : scanned+end]
			scanned += end
			switch classifyEvent(ev) {
			case eventError:
				return buf, true, nil
			case eventOutput:
				return buf, false, nil
			}
		}
		if rerr != nil {
			return buf, false, rerr
		}
	}
	return buf, false, nil
}

// eventEnd returns the length of the first complete event in b (through its blank line), or
// -1. Lines end in \n or \r\n.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		j := i + 1
		if j < len(b) && b[j] == '\r' {
			j++
		}
		if j < len(b) && b[j] == '\n' {
			return j + 1
		}
	}
	return -1
}

type eventKind uint8

const (
	eventPrelude eventKind = iota // nothing generated yet (the chat role chunk, a comment)
	eventOutput                   // output, the end of the stream, or something not understood
	eventError                    // {"error": ...}
)

// chunkProbe is what classifyEvent reads of a chunk: vLLM's ChatCompletionStreamResponse and
// CompletionStreamResponse, and its streamed ErrorResponse.
type chunkProbe struct {
	Error   json.RawMessage `json:"error"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Text         *string         `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		Delta        json.RawMessage `json:"delta"`
	} `json:"choices"`
}

// deltaProbe is a chat delta: the role chunk has a role and an empty content, nothing else.
type deltaProbe struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
}

// classifyEvent reads one SSE event (the data lines of an event, vLLM sends one per event).
func classifyEvent(ev []byte) eventKind {
	var data []byte
	for line := range bytes.Lines(ev) {
		if payload, ok := bytes.CutPrefix(line, []byte(sseData)); ok {
			data = append(data, bytes.TrimSpace(payload)...)
		}
	}
	if len(data) == 0 {
		return eventPrelude
	}
	var c chunkProbe
	if bytes.Equal(data, []byte("[DONE]")) || json.Unmarshal(data, &c) != nil {
		return eventOutput
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte(jsonNull)) {
		return eventError
	}
	if len(c.Usage) > 0 && !bytes.Equal(c.Usage, []byte(jsonNull)) && len(c.Choices) == 0 {
		return eventOutput // the usage chunk that ends a stream
	}
	if len(c.Choices) == 0 {
		return eventOutput
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil || ch.Text != nil || len(ch.Delta) == 0 {
			return eventOutput
		}
		var d deltaProbe
		if json.Unmarshal(ch.Delta, &d) != nil || len(d.ToolCalls) > 0 && !bytes.Equal(d.ToolCalls, []byte(jsonNull)) ||
			d.Content != nil && *d.Content != "" || d.ReasoningContent != nil && *d.ReasoningContent != "" ||
			d.Reasoning != nil && *d.Reasoning != "" {
			return eventOutput
		}
	}
	return eventPrelude
}
