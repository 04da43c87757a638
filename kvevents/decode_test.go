package kvevents

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// Expectations written by testdata/gen_fixtures.py next to each *_msgspec.bin fixture.
type fixtureFile struct {
	MsgspecVersion string        `json:"msgspec_version"`
	Fixtures       []fixtureWant `json:"fixtures"`
}

type fixtureWant struct {
	File   string      `json:"file"`
	Error  string      `json:"error"` // non-empty: the batch must fail to decode
	TS     float64     `json:"ts"`
	Rank   *int64      `json:"rank"`
	Events []eventWant `json:"events"`
}

// eventWant mirrors Event with the generator's JSON names; nil pointers mean nil on the wire.
type eventWant struct {
	Kind        string   `json:"kind"` // BlockStored, BlockRemoved, AllBlocksCleared, unknown, malformed
	Hashes      []uint64 `json:"hashes"`
	Parent      *uint64  `json:"parent"`
	Tokens      []uint32 `json:"tokens"`
	Bigram      bool     `json:"bigram,omitempty"`
	BlockSize   int64    `json:"block_size"`
	LoRAID      *int64   `json:"lora_id"`
	Medium      *string  `json:"medium"`
	LoRAName    *string  `json:"lora_name"`
	GroupIdx    *int64   `json:"group_idx"`
	SpecKind    *string  `json:"spec_kind"`
	Window      *int64   `json:"window"`
	Locality    *string  `json:"locality"`
	PlainBlocks int      `json:"plain_blocks"`
	Salt        *string  `json:"salt,omitempty"`
	UnknownTag  string   `json:"unknown_tag"`
}

func loadFixtures(t testing.TB) []fixtureWant {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "expectations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ff fixtureFile
	if err := json.Unmarshal(raw, &ff); err != nil {
		t.Fatal(err)
	}
	if len(ff.Fixtures) == 0 {
		t.Fatal("testdata/expectations.json lists no fixtures")
	}
	return ff.Fixtures
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func optStr(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func optInt(v int64, ok bool) *int64 {
	if !ok {
		return nil
	}
	return &v
}

// gotEvent renders ev in the generator's expectation shape.
func gotEvent(ev *Event) eventWant {
	switch {
	case ev.Malformed:
		return eventWant{Kind: "malformed"}
	case ev.Kind == KindUnknown:
		return eventWant{Kind: "unknown", UnknownTag: string(ev.UnknownTag)}
	case ev.Kind == KindAllBlocksCleared:
		return eventWant{Kind: ev.Kind.String()}
	}
	w := eventWant{Kind: ev.Kind.String(), Hashes: ev.Hashes, Medium: optStr(ev.Medium),
		GroupIdx: optInt(ev.GroupIdx, ev.HasGroup), Locality: optStr(ev.Locality)}
	if len(w.Hashes) == 0 {
		w.Hashes = nil
	}
	if ev.Kind == KindBlockStored {
		if ev.HasParent {
			p := ev.Parent
			w.Parent = &p
		}
		w.Tokens, w.Bigram = ev.Tokens, ev.Bigram
		if len(w.Tokens) == 0 {
			w.Tokens = nil
		}
		w.BlockSize, w.LoRAID = ev.BlockSize, optInt(ev.LoRAID, ev.HasLoRAID)
		w.LoRAName, w.SpecKind = optStr(ev.LoRAName), optStr(ev.SpecKind)
		w.Window, w.PlainBlocks = optInt(ev.SlidingWindow, ev.HasWindow), ev.PlainBlocks
		w.Salt = optStr(ev.Salt)
	}
	return w
}

func normWant(w eventWant) eventWant {
	if len(w.Hashes) == 0 {
		w.Hashes = nil
	}
	if len(w.Tokens) == 0 {
		w.Tokens = nil
	}
	return w
}

// TestDecodeFixtures decodes every msgspec fixture (vllm-kv-events.md §8 "Decoding") and
// compares the whole result with the generator's expectations.
func TestDecodeFixtures(t *testing.T) {
	var b Batch // one Batch reused across fixtures, as the Applier does
	for _, fx := range loadFixtures(t) {
		t.Run(strings.TrimSuffix(fx.File, "_msgspec.bin"), func(t *testing.T) {
			payload := readFixture(t, fx.File)
			err := DecodeBatch(payload, &b)
			if fx.Error != "" {
				var de *DecodeError
				if !errors.Is(err, ErrMalformedBatch) || !errors.As(err, &de) {
					t.Fatalf("DecodeBatch = %v, want a DecodeError wrapping ErrMalformedBatch (%s)", err, fx.Error)
				}
				if de.Offset < 0 || de.Offset > len(payload) {
					t.Fatalf("error offset %d outside payload of %d bytes", de.Offset, len(payload))
				}
				if len(b.Events) != 0 {
					t.Fatalf("failed decode left %d events", len(b.Events))
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			if b.TS != fx.TS {
				t.Errorf("ts = %v, want %v", b.TS, fx.TS)
			}
			if gotRank := optInt(b.Rank, b.HasRank); !reflect.DeepEqual(gotRank, fx.Rank) {
				t.Errorf("rank = %v, want %v", fmtPtr(gotRank), fmtPtr(fx.Rank))
			}
			if len(b.Events) != len(fx.Events) {
				t.Fatalf("%d events, want %d", len(b.Events), len(fx.Events))
			}
			for i := range b.Events {
				got, want := gotEvent(&b.Events[i]), normWant(fx.Events[i])
				if !reflect.DeepEqual(got, want) {
					gj, _ := json.Marshal(got)
					wj, _ := json.Marshal(want)
					t.Errorf("event %d (malformed field %q):\n got %s\nwant %s", i, b.Events[i].MalformedField, gj, wj)
				}
			}
		})
	}
}

func fmtPtr(p *int64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// The spec's test vectors, byte for byte (§2.6); the fixtures must hold exactly these bytes.
var specVectors = map[string]string{
	"vector_a_array12_msgspec.bin": "93cb41d954fc40200000939cab426c6f636b53746f726564927bcfffffffffffffffffc0940102030402c0a3475055c0" +
		"92c0c000ae66756c6c5f617474656e74696f6ec094ac426c6f636b52656d6f766564917ba34750550091b0416c6c426c" +
		"6f636b73436c656172656400",
	"vector_c_original_msgspec.bin": "92cb41d954fc402000009296ab426c6f636b53746f72656492fe05c0940102030402c092ac426c6f636b52656d6f7665" +
		"6491fe",
	"vector_d_map_bin_cpu_msgspec.bin": "93cb41d954fc402000009183a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391c420aaaa" +
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa0102030405060708a66d656469756da343505503",
}

func TestSpecVectorsMatchFixtures(t *testing.T) {
	for name, hx := range specVectors {
		want, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		if got := readFixture(t, name); string(got) != string(want) {
			t.Errorf("%s differs from the spec vector:\n got %x\nwant %x", name, got, want)
		}
	}
	b := readFixture(t, "vector_b_map_msgspec.bin")
	if len(b) != 269 || b[11] != 0x8b {
		t.Errorf("vector B: %d bytes, first event header %#x; want 269 bytes and 0x8b", len(b), b[11])
	}
}

// TestDecodeVectorsAgree checks §2.6: vectors A (array form) and B (map form) decode to the same
// events.
func TestDecodeVectorsAgree(t *testing.T) {
	var a, b Batch
	if err := DecodeBatch(readFixture(t, "vector_a_array12_msgspec.bin"), &a); err != nil {
		t.Fatal(err)
	}
	if err := DecodeBatch(readFixture(t, "vector_b_map_msgspec.bin"), &b); err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 3 || len(b.Events) != 3 {
		t.Fatalf("events: A %d, B %d; want 3", len(a.Events), len(b.Events))
	}
	for i := range a.Events {
		if ga, gb := gotEvent(&a.Events[i]), gotEvent(&b.Events[i]); !reflect.DeepEqual(ga, gb) {
			t.Errorf("event %d: A %+v, B %+v", i, ga, gb)
		}
	}
}

// mp builds msgpack test payloads with msgp's appenders.
type mp []byte

func (m mp) arr(n uint32) mp        { return msgp.AppendArrayHeader(m, n) }
func (m mp) mapN(n uint32) mp       { return msgp.AppendMapHeader(m, n) }
func (m mp) str(s string) mp        { return msgp.AppendString(m, s) }
func (m mp) u64(v uint64) mp        { return msgp.AppendUint64(m, v) }
func (m mp) i64(v int64) mp         { return msgp.AppendInt64(m, v) }
func (m mp) f64(v float64) mp       { return msgp.AppendFloat64(m, v) }
func (m mp) nilv() mp               { return msgp.AppendNil(m) }
func (m mp) bin(b []byte) mp        { return msgp.AppendBytes(m, b) }
func (m mp) raw(b ...byte) mp       { return append(m, b...) }
func (m mp) batch(events uint32) mp { return m.arr(3).f64(1).arr(events) }

// TestDecodeBatchErrors covers batch-level failures (§2.4 rules 1 and 6): each must name the
// field and the byte offset where decoding stopped.
func TestDecodeBatchErrors(t *testing.T) {
	stored := mp(nil).arr(6).str("BlockStored").arr(1).u64(1).nilv().arr(2).u64(1).u64(2).u64(2).nilv()
	cases := []struct {
		name       string
		spec       string
		payload    []byte
		wantField  string
		wantOffset int
		wantIs     error
	}{
		{"empty_payload", "§2.4 rule 1", nil, "batch", 0, msgp.ErrShortBytes},
		{"outer_int", "§2.4 rule 1", mp(nil).u64(5), "batch", 0, nil},
		{"outer_array_of_one", "§2.4 rule 1", mp(nil).arr(1).f64(1), "batch", 0, nil},
		{"ts_string", "§2.4 rule 7", mp(nil).arr(2).str("x").arr(0), "ts", 1, nil},
		{"events_nil", "§2.4 rule 1", mp(nil).arr(2).f64(1).nilv(), "events", 10, nil},
		{"rank_float", "§1.3", mp(nil).arr(3).f64(1).arr(0).f64(2), "data_parallel_rank", 11, nil},
		{"map_without_events", "§2.1", mp(nil).mapN(1).str("ts").f64(1), "events", 0, nil},
		{"events_count_beyond_payload", "§2.4 rule 6", mp(nil).batch(1000).raw(0xc0), "events", 10, msgp.ErrShortBytes},
		{"truncated_inside_tokens", "§2.4 rule 6", append(mp(nil).batch(1), stored[:len(stored)-4]...), "token_ids", 11 + 16, msgp.ErrShortBytes},
		{"invalid_prefix_in_event", "§2.4 rule 6", mp(nil).batch(1).raw(0xc1), "event", 11, nil},
		{"trailing_bytes", "§2.4 rule 6", append(mp(nil).batch(0).nilv(), 0x00), "batch", 12, nil},
	}
	var b Batch
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeBatch(tc.payload, &b)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("DecodeBatch = %v, want a DecodeError wrapping ErrMalformedBatch", err)
			}
			if de.Field != tc.wantField || de.Offset != tc.wantOffset {
				t.Errorf("error at %s byte %d, want %s byte %d (%v)", de.Field, de.Offset, tc.wantField, tc.wantOffset, err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), "byte") {
				t.Errorf("error %q does not name the offset", err)
			}
		})
	}
}

// TestDecodeLimits checks that every Limits field rejects the batch with ErrLimit.
func TestDecodeLimits(t *testing.T) {
	lim := Limits{MaxEvents: 2, MaxHashes: 3, MaxTokens: 4}
	hashes := func(n int) mp {
		m := mp(nil).batch(1).arr(4).str("BlockRemoved").arr(uint32(n))
		for i := range n {
			m = m.u64(uint64(i))
		}
		return m.nilv().nilv().nilv()
	}
	tokens := func(n int) mp {
		m := mp(nil).batch(1).arr(6).str("BlockStored").arr(0).nilv().arr(uint32(n))
		for i := range n {
			m = m.u64(uint64(i))
		}
		return m.u64(2).nilv().nilv()
	}
	events := func(n int) mp {
		m := mp(nil).batch(uint32(n))
		for range n {
			m = m.arr(1).str("AllBlocksCleared")
		}
		return m.nilv()
	}
	cases := []struct {
		name    string
		payload []byte
		wantErr bool
	}{
		{"events_at_limit", events(2), false},
		{"events_over_limit", events(3), true},
		{"hashes_at_limit", hashes(3), false},
		{"hashes_over_limit", hashes(4), true},
		{"tokens_at_limit", tokens(4), false},
		{"tokens_over_limit", tokens(5), true},
	}
	var b Batch
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.DecodeBatch(tc.payload, &b)
			if tc.wantErr != (err != nil) {
				t.Fatalf("DecodeBatch = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && (!errors.Is(err, ErrLimit) || !errors.Is(err, ErrMalformedBatch)) {
				t.Fatalf("error %v does not wrap ErrLimit and ErrMalformedBatch", err)
			}
		})
	}
	if got := (Limits{}).withDefaults(); got != (Limits{DefaultMaxEvents, DefaultMaxHashes, DefaultMaxTokens}) {
		t.Errorf("defaults = %+v", got)
	}
}

// TestNormaliseHash checks §2.5 on every msgpack encoding of a hash.
func TestNormaliseHash(t *testing.T) {
	cases := []struct {
		name string
		wire []byte
		want uint64
		st   status
	}{
		{"fixint", mp(nil).u64(5), 5, valOK},
		{"uint8", mp(nil).raw(0xcc, 0xc8), 200, valOK},
		{"uint16", mp(nil).raw(0xcd, 0x12, 0x34), 0x1234, valOK},
		{"uint32", mp(nil).raw(0xce, 0, 1, 0, 0), 0x10000, valOK},
		{"uint64_above_2^63", mp(nil).u64(1<<63 + 7), 1<<63 + 7, valOK},
		{"uint64_max", mp(nil).u64(^uint64(0)), ^uint64(0), valOK},
		{"negative_fixint", mp(nil).raw(0xff), ^uint64(0), valOK},
		{"int8_negative", mp(nil).raw(0xd0, 0x9c), uint64(0xffffffffffffff9c), valOK},
		{"int16_negative", mp(nil).raw(0xd1, 0x80, 0x00), uint64(0xffffffffffff8000), valOK},
		{"int32_positive", mp(nil).raw(0xd2, 0, 0, 1, 0), 256, valOK},
		{"int64_min", mp(nil).i64(-1 << 63), 1 << 63, valOK},
		{"bin8", mp(nil).bin([]byte{1, 2, 3, 4, 5, 6, 7, 8}), 0x0102030405060708, valOK},
		{"bin16", mp(nil).bin([]byte{9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8}), 0x0102030405060708, valOK},
		{"bin32", mp(nil).bin(append(make([]byte, 24), 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1)), 0xdeadbeef00000001, valOK},
		{"bin64", mp(nil).bin(append(make([]byte, 56), 1, 0, 0, 0, 0, 0, 0, 0)), 1 << 56, valOK},
		{"bin3_left_padded", mp(nil).bin([]byte{1, 2, 3}), 0x010203, valOK},
		{"bin_empty", mp(nil).bin(nil), 0, valOK},
		{"nil", mp(nil).nilv(), 0, valNil},
		{"str_is_bad", mp(nil).str("abc"), 0, valBad},
		{"float_is_bad", mp(nil).f64(1.5), 0, valBad},
		{"array_is_bad", mp(nil).arr(1).u64(1), 0, valBad},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, st, rest, err := readHash(append(tc.wire, 0xc0))
			if err != nil || st != tc.st || (st == valOK && h != tc.want) || len(rest) != 1 {
				t.Fatalf("readHash = %#x, %d, rest %d, %v; want %#x, %d, rest 1", h, st, len(rest), err, tc.want, tc.st)
			}
		})
	}
}

// TestDecodeMalformedKeepsOffsets: a malformed event consumes exactly its own bytes, so the
// following events decode (§2.4 rule 5).
func TestDecodeMalformedKeepsOffsets(t *testing.T) {
	p := mp(nil).batch(3).
		arr(7).str("BlockStored").arr(2).u64(1).str("bad-hash").nilv().arr(2).u64(1).arr(3).u64(1).u64(2).u64(3).u64(1).nilv().nilv().
		mapN(3).str("block_hashes").arr(1).u64(9).str("type").str("BlockRemoved").str("medium").str("CPU").
		arr(1).str("AllBlocksCleared").u64(0)
	var b Batch
	if err := DecodeBatch(p, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 3 || !b.Events[0].Malformed || b.Events[0].MalformedField != "block_hashes" {
		t.Fatalf("events %+v", b.Events)
	}
	if e := b.Events[1]; e.Malformed || e.Kind != KindBlockRemoved || !reflect.DeepEqual(e.Hashes, []uint64{9}) || string(e.Medium) != "CPU" {
		t.Errorf("event 1 = %+v", e)
	}
	if b.Events[2].Kind != KindAllBlocksCleared {
		t.Errorf("event 2 kind %v", b.Events[2].Kind)
	}
}

// TestDecodeReuseDoesNotAllocate checks the zero-allocation steady state on warm Batches.
func TestDecodeReuseDoesNotAllocate(t *testing.T) {
	payloads := [][]byte{}
	for _, fx := range loadFixtures(t) {
		if fx.Error == "" {
			payloads = append(payloads, readFixture(t, fx.File))
		}
	}
	var b Batch
	for _, p := range payloads { // warm the arenas
		if err := DecodeBatch(p, &b); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		for _, p := range payloads {
			_ = DecodeBatch(p, &b)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per pass over %d warm fixtures, want 0", allocs, len(payloads))
	}
}

// TestAppendTokensMatchesNaive checks appendTokens (its fast path and the EAGLE pair rules)
// against a plain model of token_ids, on random lists mixing every int encoding (minimal or
// not), negative and oversized values, chained EAGLE pairs, broken chains, pairs of the wrong
// length and lists mixing ints with pairs.
func TestAppendTokensMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 2000 {
		n := rng.IntN(40)
		asPairs := rng.IntN(2) == 0
		bad := rng.IntN(3) == 0 // plant one defect
		var m mp
		var want []uint32
		wantBad := false
		prev := uint64(rng.IntN(200000))
		for i := range n {
			v := uint64(rng.IntN(200000))
			defect := bad && rng.IntN(n) == 0
			if asPairs {
				a, b := prev, v
				switch {
				case defect && rng.IntN(4) == 0:
					m = m.arr(3).u64(a).u64(b).u64(b) // not a pair
					wantBad = true
				case defect && rng.IntN(3) == 0 && i > 0:
					m = m.u64(a) // an int among pairs
					wantBad = true
				case defect && rng.IntN(2) == 0 && i > 0:
					m = m.arr(2).u64(a + 1).u64(b) // does not continue the pair before
					wantBad = true
				case defect:
					m = m.arr(2).u64(a).u64(1<<32 + b) // out of range
					wantBad = true
				case rng.IntN(5) == 0:
					m = m.arr(2).raw(0xcf).raw(binary.BigEndian.AppendUint64(nil, a)...).u64(b) // non-minimal
				default:
					m = m.arr(2).u64(a).u64(b)
				}
				want = append(want, uint32(a))
				prev = b
				continue
			}
			switch {
			case defect && rng.IntN(3) == 0:
				m = m.i64(-int64(rng.IntN(1000)) - 1) // negative
				wantBad = true
			case defect && rng.IntN(2) == 0:
				m = m.u64(1<<32 + v) // above 2^32-1
				wantBad = true
			case defect && i > 0:
				m = m.arr(2).u64(v).u64(v + 1) // a pair among ints
				wantBad = true
			case rng.IntN(10) == 0:
				m = m.raw(0xcf).raw(binary.BigEndian.AppendUint64(nil, v)...) // non-minimal uint64
			case rng.IntN(10) == 0:
				m = m.raw(0xd2).raw(binary.BigEndian.AppendUint32(nil, uint32(v))...) // int32
			default:
				m = m.u64(v)
			}
			want = append(want, uint32(v))
		}
		wantPairs := asPairs && n > 0
		if wantPairs {
			want = append(want, uint32(prev))
		}
		tail := rng.IntN(9)
		m = m.raw(0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0)[:len(m)+tail] // vary the tail length
		got, rest, pairs, st, err := appendTokens(make([]uint32, 0, n+1), m, uint32(n))
		switch {
		case err != nil || len(rest) != tail:
			t.Fatalf("round %d: err %v, %d bytes left, want %d", round, err, len(rest), tail)
		case wantBad:
			if st != valBad {
				t.Fatalf("round %d: a list with a defect decoded as valid: %v", round, got)
			}
			if d := badTokenDetail(m, uint32(n)); !strings.HasPrefix(d, "token_ids[") {
				t.Fatalf("round %d: detail %q does not name the entry", round, d)
			}
		case st != valOK || pairs != wantPairs || !slices.Equal(got, want):
			t.Fatalf("round %d: got %v pairs=%v status %d; want %v pairs=%v", round, got, pairs, st, want, wantPairs)
		}
	}
}

// TestBadTokenDetail pins the message of each way token_ids can be wrong.
func TestBadTokenDetail(t *testing.T) {
	for _, c := range []struct {
		name string
		list mp
		n    uint32
		want string
	}{
		{"negative id", mp(nil).u64(5).i64(-7), 2, "token_ids[1] = -7: token ids are unsigned 32-bit integers"},
		{"broken chain", mp(nil).arr(2).u64(1).u64(2).arr(2).u64(3).u64(4), 2,
			"token_ids[1] = [3, 4] does not continue token_ids[0] = [1, 2]: EAGLE pairs are (t_j, t_j+1) of one sequence, so each pair starts with the token the one before ends with"},
		{"int after pairs", mp(nil).arr(2).u64(1).u64(2).u64(2), 2,
			"token_ids[1] is an int after EAGLE pairs: token_ids holds either ints or [token, token] pairs, not both"},
		{"pair after ints", mp(nil).u64(1).arr(2).u64(2).u64(3), 2,
			"token_ids[1] = [2, 3] is a pair after int entries: token_ids holds either ints or EAGLE [token, token] pairs, not both"},
		{"triple", mp(nil).arr(3).u64(1).u64(2).u64(3), 1,
			"token_ids[0] = [1,2,3]: an EAGLE pair is exactly two unsigned 32-bit token ids"},
		{"pair out of range", mp(nil).arr(2).u64(1).i64(-2), 1,
			"token_ids[0] = [1,-2]: an EAGLE pair is exactly two unsigned 32-bit token ids"},
	} {
		if got := badTokenDetail(c.list, c.n); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		if _, _, _, st, err := appendTokens(nil, c.list, c.n); err != nil || st != valBad {
			t.Errorf("%s: appendTokens status %d err %v, want valBad", c.name, st, err)
		}
	}
}
