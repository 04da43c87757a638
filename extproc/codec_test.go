package extproc

import (
	"bytes"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// bodyRequest is an ext_proc request body message of n bytes of JSON-like text.
func bodyRequest(n int) *extprocv3.ProcessingRequest {
	body := bytes.Repeat([]byte(`{"role":"user","content":"hello"},`), n/34+1)[:n]
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}
}

// framed splits an encoded message into HTTP/2-sized buffers, as the transport hands it over.
func framed(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		s = append(s, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return s
}

// TestMessageCodecRoundTrip: messageCodec decodes what gRPC's proto codec encodes and the other
// way round, from one buffer or from frames, for messages below and above the pooling
// threshold and around the old 32 KiB / 1 MiB tier edge; it refuses non-protobuf values.
func TestMessageCodecRoundTrip(t *testing.T) {
	grpcCodec := encoding.GetCodecV2("proto")
	for _, n := range []int{0, 10, 1 << 10, 32<<10 - 7, 33 << 10, 300 << 10, 2 << 20} {
		want := bodyRequest(n)
		for _, enc := range []encoding.CodecV2{grpcCodec, messageCodec{}} {
			data, err := enc.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			raw := data.Materialize()
			data.Free()
			for _, in := range []mem.BufferSlice{{mem.SliceBuffer(raw)}, framed(raw)} {
				var got extprocv3.ProcessingRequest
				if err := (messageCodec{}).Unmarshal(in, &got); err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
				if !proto.Equal(&got, want) {
					t.Fatalf("%d bytes: decoded message differs", n)
				}
			}
			var back extprocv3.ProcessingRequest
			if err := grpcCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &back); err != nil || !proto.Equal(&back, want) {
				t.Fatalf("%d bytes: gRPC's codec does not read it back: %v", n, err)
			}
		}
	}
	if _, err := (messageCodec{}).Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a string: no error")
	}
	if err := (messageCodec{}).Unmarshal(nil, new(int)); err == nil {
		t.Fatal("Unmarshal into an int: no error")
	}
}

// BenchmarkMessageCodec: decoding a 33 KiB request body message that arrived in three frames,
// and encoding it, with gRPC's proto codec and with messageCodec, in the same run.
func BenchmarkMessageCodec(b *testing.B) {
	msg := bodyRequest(33 << 10)
	raw, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc", encoding.GetCodecV2("proto")}, {"condisagg", messageCodec{}}} {
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var m extprocv3.ProcessingRequest
				if err := c.codec.Unmarshal(framed(raw), &m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("encode/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				data, err := c.codec.Marshal(msg)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
