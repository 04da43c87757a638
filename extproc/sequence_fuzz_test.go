package extproc

import (
	"bytes"
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// sequenceMessage builds the ProcessingRequest that op byte b stands for: any phase, in any
// order, repeated, with or without end_of_stream, with whole, truncated or junk bodies.
func sequenceMessage(b byte, body []byte) *extprocv3.ProcessingRequest {
	eos := b&0x10 != 0
	// Each message owns its bytes, as one unmarshalled from the wire does.
	half := bytes.Clone(body[:len(body)/2])
	body = bytes.Clone(body)
	switch b & 0x0f {
	case 0:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", chatPath), EndOfStream: eos}}}
	case 1:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":method", "GET", ":path", "/v1/models"), EndOfStream: eos}}}
	case 2:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: eos}}}
	case 3:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: half, EndOfStream: eos}}}
	case 4:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	case 5:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":status", "200", "content-type", "text/event-stream"), EndOfStream: eos}}}
	case 6:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":status", "503", "content-type", "text/plain"), EndOfStream: eos}}}
	case 7:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(sseToken), EndOfStream: eos}}}
	case 8:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte("data: [DONE]\n\n"), EndOfStream: eos}}}
	case 9:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: body, EndOfStream: eos}}}
	case 10:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
	case 11:
		return &extprocv3.ProcessingRequest{} // no request at all
	default:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{}, EndOfStream: eos}}}
	}
}

// FuzzExchangeSequence drives the stream machine with arbitrary message sequences in every
// body mode (random orders, duplicate phases, truncated or junk bodies) and then ends the
// stream as Process does: nothing panics, a stream never holds more than one booking nor more
// bytes than its bounds, and no booking outlives the stream.
func FuzzExchangeSequence(f *testing.F) {
	f.Add([]byte{0, 0x12, 5, 7, 0x18}, []byte(`{"model":"m","messages":[{"role":"user","content":"hi there"}]}`), uint8(0))
	f.Add([]byte{0, 2, 2, 0x12, 0x12, 4, 5, 6, 9, 10}, []byte(`{"model":"m","prompt":"x"}`), uint8(2))
	f.Add([]byte{0x10, 1, 0x15, 8}, []byte(`{`), uint8(1))
	f.Add([]byte{5, 7, 8, 0, 3, 0x13, 0x12}, []byte(`{"model":"m","messages":[{"role":"user","content":"`+"\u00e9"+`"}]}`), uint8(2))
	e := newEnv(f, envOptions{})
	modes := []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED,
		filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_NONE}
	f.Fuzz(func(t *testing.T, ops []byte, body []byte, mode uint8) {
		if len(ops) > 64 || len(body) > 4096 {
			return
		}
		x := newExchange(e.server)
		m := modes[int(mode)%len(modes)]
		first := true
		for _, op := range ops {
			req := sequenceMessage(op, body)
			if first {
				req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: m, ResponseBodyMode: m}
				first = false
			}
			x.Step(context.Background(), req)
			if n := e.totalRequests(); n > 1 {
				t.Fatalf("ops %x mode %v: %d bookings on one stream, at most 1", ops, m, n)
			}
			if held := x.heldBytes(); held > x.set.MaxBodyBytes+2*(MaxSSETail+MaxJSONResponse) {
				t.Fatalf("ops %x mode %v: stream holds %d bytes", ops, m, held)
			}
		}
		x.end()
		if n := e.totalRequests(); n != 0 {
			t.Fatalf("ops %x mode %v: %d bookings left after the stream ended", ops, m, n)
		}
	})
}
