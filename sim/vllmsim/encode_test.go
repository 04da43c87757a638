package vllmsim

import (
	"reflect"
	"testing"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/sim"
)

func TestEncoderDecodesWithKVEvents(t *testing.T) {
	events := []sim.Event{
		{Kind: sim.EventBlockStored, Hashes: []uint64{7, 1<<64 - 1}, Tokens: seqTokens(4, 1)},
		{Kind: sim.EventBlockStored, Hashes: []uint64{9}, Parent: 1<<64 - 1, HasParent: true, Tokens: seqTokens(2, 50)},
		{Kind: sim.EventBlockRemoved, Hashes: []uint64{7}},
		{Kind: sim.EventAllBlocksCleared},
	}
	for _, tc := range []struct {
		name   string
		spec   string
		format EventFormat
		hashes HashEncoding
	}{
		{"array_int", "vllm-kv-events.md §2.2 array form, §2.5 int hash", FormatArray, HashInt},
		{"array_bytes", "§2.2 array form, §2.5 bin hash", FormatArray, HashBytes},
		{"map_int", "§2.2 map form, int hash", FormatMap, HashInt},
		{"map_bytes", "§2.2 map form, bin hash", FormatMap, HashBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := Encoder{Format: tc.format, Hashes: tc.hashes, BlockSize: 2, Rank: 3}
			payload := enc.AppendBatch(nil, 1700000000.5, events)
			var b kvevents.Batch
			if err := kvevents.DecodeBatch(payload, &b); err != nil {
				t.Fatalf("%s: DecodeBatch: %v", tc.spec, err)
			}
			if b.TS != 1700000000.5 || !b.HasRank || b.Rank != 3 || len(b.Events) != 4 {
				t.Fatalf("%s: batch ts=%v rank=%v/%d events=%d", tc.spec, b.TS, b.HasRank, b.Rank, len(b.Events))
			}
			st := b.Events[0]
			if st.Kind != kvevents.KindBlockStored || st.Malformed || !reflect.DeepEqual(st.Hashes, []uint64{7, 1<<64 - 1}) ||
				st.HasParent || !reflect.DeepEqual(st.Tokens, seqTokens(4, 1)) || st.BlockSize != 2 ||
				string(st.Medium) != "GPU" || st.HasLoRAName && st.LoRAName != nil || string(st.SpecKind) != "full_attention" ||
				st.PlainBlocks != 2 || st.GroupIdx != 0 {
				t.Fatalf("%s: store decoded as %+v", tc.spec, st)
			}
			if ch := b.Events[1]; !ch.HasParent || ch.Parent != 1<<64-1 || ch.Hashes[0] != 9 {
				t.Fatalf("%s: chained store decoded as %+v", tc.spec, ch)
			}
			if rm := b.Events[2]; rm.Kind != kvevents.KindBlockRemoved || rm.Malformed || !reflect.DeepEqual(rm.Hashes, []uint64{7}) || string(rm.Medium) != "GPU" {
				t.Fatalf("%s: remove decoded as %+v", tc.spec, rm)
			}
			if b.Events[3].Kind != kvevents.KindAllBlocksCleared {
				t.Fatalf("%s: clear decoded as %+v", tc.spec, b.Events[3])
			}
		})
	}
}

// TestEncoderArrayShape checks the array form against the bytes of vllm-kv-events.md
// §2.6 vector A for the event layout both share (12-element BlockStored, 4-element
// BlockRemoved); vector A differs only in extra_keys ([nil, nil] there, nil here).
func TestEncoderArrayShape(t *testing.T) {
	enc := Encoder{Format: FormatArray, BlockSize: 2}
	got := enc.appendEvent(nil, &sim.Event{Kind: sim.EventBlockRemoved, Hashes: []uint64{123}})
	want := []byte("\x94\xacBlockRemoved\x91\x7b\xa3GPU\x00")
	if string(got) != string(want) {
		t.Fatalf("§2.6 vector A BlockRemoved: got % x, want % x", got, want)
	}
	got = enc.appendEvent(nil, &sim.Event{Kind: sim.EventAllBlocksCleared})
	if want := []byte("\x91\xb0AllBlocksCleared"); string(got) != string(want) {
		t.Fatalf("§2.6 vector A AllBlocksCleared: got % x", got)
	}
	got = enc.appendStored(nil, &sim.Event{Kind: sim.EventBlockStored, Hashes: []uint64{123, 1<<64 - 1}, Tokens: []uint32{1, 2, 3, 4}})
	want = []byte("\x9c\xabBlockStored\x92\x7b\xcf\xff\xff\xff\xff\xff\xff\xff\xff\xc0\x94\x01\x02\x03\x04\x02\xc0\xa3GPU\xc0\xc0\x00\xaefull_attention\xc0")
	if string(got) != string(want) {
		t.Fatalf("§2.6 vector A BlockStored (extra_keys nil):\n got % x\nwant % x", got, want)
	}
}

func FuzzEncoderRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint32(5), uint8(0), true)
	f.Add(uint64(1<<63), uint64(0), uint32(1<<31), uint8(3), false)
	f.Fuzz(func(t *testing.T, h1, h2 uint64, tok uint32, mode uint8, parent bool) {
		enc := Encoder{Format: EventFormat(mode & 1), Hashes: HashEncoding(mode >> 1 & 1), BlockSize: 1}
		ev := []sim.Event{{Kind: sim.EventBlockStored, Hashes: []uint64{h1, h2}, Parent: h2, HasParent: parent, Tokens: []uint32{tok, tok + 1}}}
		var b kvevents.Batch
		if err := kvevents.DecodeBatch(enc.AppendBatch(nil, 1, ev), &b); err != nil {
			t.Fatal(err)
		}
		got := b.Events[0]
		if !reflect.DeepEqual(got.Hashes, []uint64{h1, h2}) || got.HasParent != parent || parent && got.Parent != h2 || got.Tokens[1] != tok+1 {
			t.Fatalf("round trip: %+v", got)
		}
	})
}
