package extproc

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// messageCodec is the ext_proc server's protobuf codec. It encodes as gRPC's own "proto" codec
// does; it differs in the buffers it borrows. gRPC's default buffer pool has tiers of 256 B,
// 4, 16 and 32 KiB, then 1 MiB, and clears the whole buffer it hands out, so every request
// body between 32 KiB and 1 MiB (an 8k-token chat is about 33 KiB) cost a 1 MiB clear to
// assemble its frames, and again to encode a response carrying it back: about a fifth of a
// warm 8k-token decision here. messagePool has a tier at every power of two, so the buffer is
// at most twice the message.
type messageCodec struct{}

// messagePool: zeroed buffers (as gRPC's) of 2^8 B to 2^24 B; larger ones are allocated.
var messagePool = func() mem.BufferPool {
	var sizes []int
	for e := 8; e <= 24; e++ {
		sizes = append(sizes, 1<<e)
	}
	return mem.NewTieredBufferPool(sizes...)
}()

var _ encoding.CodecV2 = messageCodec{}

// Name is "proto": the content-subtype peers send, so the codec applies to every call.
func (messageCodec) Name() string { return "proto" }

func (messageCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("extproc: cannot encode %T: not a protobuf message", v)
	}
	// UseCachedSize reuses the Size just computed; m is not changed in between.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := messagePool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		messagePool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, messagePool)}, nil
}

func (messageCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("extproc: cannot decode into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(messagePool) // one frame: no copy
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
