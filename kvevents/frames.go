package kvevents

import (
	"encoding/binary"
	"fmt"
)

// Frame parsing for the live PUB messages (vllm-kv-events.md §1.2) and the replay replies a
// DEALER receives from vLLM's ROUTER (§1.5). It works on frame lists, not sockets, so the rules
// are tested and fuzzed here without cgo, and any transport shell can use them.

// DefaultMaxPayloadBytes bounds one batch payload; larger messages are dropped and counted.
const DefaultMaxPayloadBytes = 16 << 20

// endSeq is the replay end marker: -1 as a signed 8-byte big-endian integer.
const endSeq = ^uint64(0)

// DropReason is the `reason` label of the dropped-messages counter.
type DropReason string

const (
	DropFrames   DropReason = "frames"    // a live message without exactly 3 frames
	DropSeqSize  DropReason = "seq_size"  // a seq frame that is not 8 bytes
	DropTooLarge DropReason = "too_large" // a payload over the configured limit

	DropReplayMalformed DropReason = "replay_malformed" // a replay reply with a bad shape
	DropUnknownTopic    DropReason = "unknown_topic"    // centralized topology: no stream has the topic
)

// ParseLive parses a live message [topic, seq 8B BE, payload]. On success reason is "".
func ParseLive(frames [][]byte, maxPayloadBytes int) (seq uint64, payload []byte, reason DropReason) {
	if len(frames) != 3 {
		return 0, nil, DropFrames
	}
	if len(frames[1]) != 8 {
		return 0, nil, DropSeqSize
	}
	if len(frames[2]) > maxPayloadBytes {
		return 0, nil, DropTooLarge
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], ""
}

// ReplyKind classifies one replay reply message.
type ReplyKind uint8

const (
	ReplyData      ReplyKind = iota + 1 // a (seq, payload) batch
	ReplyEnd                            // the end marker (END seq or empty payload)
	ReplyMalformed                      // the reply has a bad shape: the replay failed
	ReplyTooLarge                       // a batch over the payload limit: dropped and counted
)

// ParseReplay parses one replay reply message by frame count: one leading empty frame is
// dropped; then 2 frames are [seq, payload] (vLLM < 0.26) and 3 frames [topic, seq, payload]
// (vLLM >= 0.26). The replay ends on seq == END or an empty payload.
func ParseReplay(frames [][]byte, maxPayloadBytes int) (seq uint64, payload []byte, kind ReplyKind, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	var seqFrame []byte
	switch len(frames) {
	case 2:
		seqFrame, payload = frames[0], frames[1]
	case 3:
		seqFrame, payload = frames[1], frames[2]
	default:
		return 0, nil, ReplyMalformed, fmt.Errorf("kvevents: parse replay reply: %d frames after the delimiter, want 2 or 3", len(frames))
	}
	if len(seqFrame) != 8 {
		return 0, nil, ReplyMalformed, fmt.Errorf("kvevents: parse replay reply: seq frame of %d bytes, want 8", len(seqFrame))
	}
	seq = binary.BigEndian.Uint64(seqFrame)
	if seq == endSeq || len(payload) == 0 {
		return seq, nil, ReplyEnd, nil
	}
	if len(payload) > maxPayloadBytes {
		return seq, nil, ReplyTooLarge, nil
	}
	return seq, payload, ReplyData, nil
}

// ReplayRequest returns the two frames a DEALER sends to request a replay from start.
func ReplayRequest(start uint64) [][]byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, start)
	return [][]byte{{}, b}
}
