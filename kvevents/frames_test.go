package kvevents

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

func be8(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func TestParseLive(t *testing.T) {
	const max = 8
	cases := []struct {
		name   string
		spec   string
		frames [][]byte
		seq    uint64
		reason DropReason
	}{
		{"three_frames", "§1.2", [][]byte{[]byte("kv"), be8(7), []byte("payload")}, 7, ""},
		{"empty_topic_accepted", "§8 transport", [][]byte{{}, be8(0), []byte("p")}, 0, ""},
		{"two_frames_dropped", "§1.2", [][]byte{be8(1), []byte("p")}, 0, DropFrames},
		{"four_frames_dropped", "§1.2", [][]byte{{}, {}, be8(1), []byte("p")}, 0, DropFrames},
		{"no_frames_dropped", "§1.2", nil, 0, DropFrames},
		{"seq_7_bytes_dropped", "§1.2", [][]byte{{}, be8(1)[:7], []byte("p")}, 0, DropSeqSize},
		{"seq_9_bytes_dropped", "§1.2", [][]byte{{}, append(be8(1), 0), []byte("p")}, 0, DropSeqSize},
		{"payload_at_limit", "frame size limit", [][]byte{{}, be8(2), bytes.Repeat([]byte{1}, max)}, 2, ""},
		{"payload_over_limit", "frame size limit", [][]byte{{}, be8(2), bytes.Repeat([]byte{1}, max+1)}, 0, DropTooLarge},
		{"max_seq", "§1.2 unsigned", [][]byte{{}, be8(1 << 63), []byte("p")}, 1 << 63, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seq, payload, reason := ParseLive(c.frames, max)
			if reason != c.reason || seq != c.seq {
				t.Fatalf("%s: got seq=%d reason=%q, want seq=%d reason=%q", c.spec, seq, reason, c.seq, c.reason)
			}
			if reason == "" && !bytes.Equal(payload, c.frames[2]) {
				t.Fatalf("%s: payload %q, want %q", c.spec, payload, c.frames[2])
			}
		})
	}
}

func TestParseReplay(t *testing.T) {
	const max = 8
	end := be8(endSeq)
	cases := []struct {
		name   string
		spec   string
		frames [][]byte
		kind   ReplyKind
		seq    uint64
	}{
		{"old_layout_data", "§1.5 vLLM < 0.26", [][]byte{{}, be8(3), []byte("p3")}, ReplyData, 3},
		{"old_layout_end", "§1.5 vLLM < 0.26", [][]byte{{}, end, {}}, ReplyEnd, endSeq},
		{"new_layout_data", "§1.5 vLLM >= 0.26", [][]byte{{}, []byte("kv"), be8(4), []byte("p4")}, ReplyData, 4},
		{"new_layout_empty_topic", "§1.5 vLLM >= 0.26", [][]byte{{}, {}, be8(4), []byte("p4")}, ReplyData, 4},
		{"new_layout_end", "§1.5 vLLM >= 0.26", [][]byte{{}, {}, end, {}}, ReplyEnd, endSeq},
		{"end_by_seq_with_payload", "§1.5 END seq", [][]byte{{}, end, []byte("x")}, ReplyEnd, endSeq},
		{"end_by_empty_payload", "§1.5 empty payload", [][]byte{{}, be8(9), {}}, ReplyEnd, 9},
		{"no_delimiter_two_frames", "§1.5 parse by count", [][]byte{be8(5), []byte("p5")}, ReplyData, 5},
		{"one_frame_malformed", "§1.5", [][]byte{{}, be8(5)}, ReplyMalformed, 0},
		{"five_frames_malformed", "§1.5", [][]byte{{}, {}, {}, be8(5), []byte("p")}, ReplyMalformed, 0},
		{"empty_message_malformed", "§1.5", nil, ReplyMalformed, 0},
		{"short_seq_malformed", "§1.5", [][]byte{{}, []byte{1, 2}, []byte("p")}, ReplyMalformed, 0},
		{"over_limit", "frame size limit", [][]byte{{}, be8(6), bytes.Repeat([]byte{1}, max+1)}, ReplyTooLarge, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seq, payload, kind, err := ParseReplay(c.frames, max)
			if kind != c.kind || seq != c.seq {
				t.Fatalf("%s: got kind=%d seq=%d (err %v), want kind=%d seq=%d", c.spec, kind, seq, err, c.kind, c.seq)
			}
			if (err != nil) != (kind == ReplyMalformed) {
				t.Fatalf("%s: err=%v with kind %d", c.spec, err, kind)
			}
			if kind == ReplyData && !bytes.Equal(payload, c.frames[len(c.frames)-1]) {
				t.Fatalf("%s: payload %q", c.spec, payload)
			}
		})
	}
}

func TestReplayRequest(t *testing.T) {
	got := ReplayRequest(0x0102030405060708)
	if len(got) != 2 || len(got[0]) != 0 || !bytes.Equal(got[1], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("replay request frames %x, want [\"\", 0102030405060708] (§1.5)", got)
	}
}

// joinFrames and splitFrames encode a frame list as one fuzz input: each frame is prefixed by
// its length as one byte (frames longer than 255 bytes are cut).
func joinFrames(frames [][]byte) []byte {
	var b []byte
	for _, f := range frames {
		if len(f) > 255 {
			f = f[:255]
		}
		b = append(b, byte(len(f)))
		b = append(b, f...)
	}
	return b
}

func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) > 0 {
		n := int(b[0])
		b = b[1:]
		if n > len(b) {
			n = len(b)
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames
}

// FuzzFrames checks that the live and replay parsers never panic, never return a payload over
// the limit, return sub-slices of their input, and agree with the frame-count rules.
func FuzzFrames(f *testing.F) {
	seed := [][][]byte{
		{{}, be8(0), []byte("p")},
		{[]byte("kv-events"), be8(3), []byte("p")},
		{{}, be8(endSeq), {}},
		{{}, {}, be8(endSeq), {}},
		{{}, []byte("kv"), be8(1), []byte("payload")},
		{be8(1)},
	}
	if vec, err := os.ReadFile("testdata/stream/frames_replay_new_layout.bin"); err == nil {
		f.Add(vec, 16)
	}
	for _, s := range seed {
		f.Add(joinFrames(s), 16)
	}
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 {
			max = -max
		}
		max %= 512
		frames := splitFrames(data)
		seq, payload, reason := ParseLive(frames, max)
		if reason == "" {
			if len(frames) != 3 || len(frames[1]) != 8 || len(payload) > max {
				t.Fatalf("live accepted %d frames, seq frame %d bytes, payload %d > %d", len(frames), len(frames[1]), len(payload), max)
			}
			if seq != binary.BigEndian.Uint64(frames[1]) {
				t.Fatalf("live seq %d != frame", seq)
			}
		}
		_, payload, kind, err := ParseReplay(frames, max)
		switch kind {
		case ReplyData:
			if len(payload) == 0 || len(payload) > max {
				t.Fatalf("replay data payload of %d bytes (limit %d)", len(payload), max)
			}
		case ReplyMalformed:
			if err == nil {
				t.Fatal("malformed replay reply without an error")
			}
		case ReplyEnd, ReplyTooLarge:
		default:
			t.Fatalf("replay kind %d", kind)
		}
	})
}
