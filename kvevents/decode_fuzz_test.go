package kvevents

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// fixturePayloads returns every *_msgspec.bin under testdata/ (valid and invalid batches).
func fixturePayloads(f *testing.F) [][]byte {
	names, err := filepath.Glob(filepath.Join("testdata", "*_msgspec.bin"))
	if err != nil || len(names) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzDecodeBatch: decoding never panics; a failure is a DecodeError wrapping
// ErrMalformedBatch at an offset inside the payload; a success holds no more events, hashes or
// tokens than the payload has bytes, reserves memory in proportion to the payload, and decodes
// the same into a fresh Batch and into a warm one.
func FuzzDecodeBatch(f *testing.F) {
	for _, p := range fixturePayloads(f) {
		f.Add(p)
	}
	// The payloads recorded from SGLang's and Dynamo's publishers (top-level cache_salt).
	recorded, err := filepath.Glob(filepath.Join("testdata", "publishers", "*.payload.bin"))
	if err != nil || len(recorded) == 0 {
		f.Fatalf("no recorded publisher payloads: %v", err)
	}
	for _, n := range recorded {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	warm := readFixtureF(f, "hash_widths_ints_bins_msgspec.bin")
	f.Fuzz(func(t *testing.T, payload []byte) {
		var fresh Batch
		err := DecodeBatch(payload, &fresh)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("error %v is not a DecodeError wrapping ErrMalformedBatch", err)
			}
			if de.Offset < 0 || de.Offset > len(payload) || !strings.Contains(err.Error(), "byte") {
				t.Fatalf("error %q: offset %d outside payload of %d bytes", err, de.Offset, len(payload))
			}
			if len(fresh.Events) != 0 {
				t.Fatalf("failed decode left %d events", len(fresh.Events))
			}
			return
		}
		hashes, tokens := 0, 0
		for i := range fresh.Events {
			e := &fresh.Events[i]
			hashes += len(e.Hashes)
			tokens += len(e.Tokens)
			if e.Kind == KindBlockStored && !e.Malformed && (e.PlainBlocks < 0 || e.PlainBlocks > len(e.Hashes)) {
				t.Fatalf("event %d: PlainBlocks %d outside [0, %d]", i, e.PlainBlocks, len(e.Hashes))
			}
			if e.Bigram && !e.Malformed && len(e.Tokens) < 2 {
				t.Fatalf("event %d: EAGLE pairs decoded into %d tokens; a pair is two", i, len(e.Tokens))
			}
			if e.Malformed && e.MalformedField == "token_ids" && e.MalformedDetail() == "" {
				t.Fatalf("event %d: malformed token_ids without a detail", i)
			}
		}
		if n := len(fresh.Events) + hashes + tokens; n > len(payload) {
			t.Fatalf("%d events, %d hashes, %d tokens from %d bytes", len(fresh.Events), hashes, tokens, len(payload))
		}
		if c := cap(fresh.hashes) + cap(fresh.tokens) + cap(fresh.Events); c > 4*len(payload)+8 {
			t.Fatalf("reserved %d entries for a %d-byte payload", c, len(payload))
		}
		var reused Batch
		if err := DecodeBatch(warm, &reused); err != nil {
			t.Fatal(err)
		}
		if err := DecodeBatch(payload, &reused); err != nil {
			t.Fatalf("decodes fresh but not into a warm Batch: %v", err)
		}
		if !reflect.DeepEqual(render(&fresh), render(&reused)) {
			t.Fatalf("fresh and warm decodes differ:\n%+v\n%+v", render(&fresh), render(&reused))
		}
	})
}

func render(b *Batch) []eventWant {
	out := make([]eventWant, len(b.Events))
	for i := range b.Events {
		out[i] = gotEvent(&b.Events[i])
	}
	return out
}

func readFixtureF(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzNormaliseHash checks readHash (§2.5) against a naive reading through msgp's generic
// decoder: same value, same bytes consumed, and valBad exactly for non-hash types.
func FuzzNormaliseHash(f *testing.F) {
	p := readFixtureF(f, "hash_widths_ints_bins_msgspec.bin")
	for i := range p { // every suffix: each hash encoding of the fixture starts somewhere
		f.Add(p[i:])
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		h, st, rest, err := readHash(wire)
		want, wantRest, werr := msgp.ReadIntfBytes(wire)
		if err != nil {
			if werr == nil {
				t.Fatalf("readHash failed (%v) on a value msgp reads as %v", err, want)
			}
			return
		}
		if werr != nil {
			// Only a value inside a container (skipped as valBad) can be wrong where a bare
			// read is strict, e.g. an invalid extension; it must not read as a hash.
			if st != valBad {
				t.Fatalf("readHash = %#x, %d on a value msgp rejects (%v)", h, st, werr)
			}
			return
		}
		if len(rest) != len(wantRest) {
			t.Fatalf("readHash consumed %d bytes, msgp %d", len(wire)-len(rest), len(wire)-len(wantRest))
		}
		var wantH uint64
		wantSt := valOK
		switch v := want.(type) {
		case int64:
			wantH = uint64(v)
		case uint64:
			wantH = v
		case []byte:
			var buf [8]byte
			if len(v) >= 8 {
				copy(buf[:], v[len(v)-8:])
			} else {
				copy(buf[8-len(v):], v)
			}
			wantH = binary.BigEndian.Uint64(buf[:])
		case nil:
			wantSt = valNil
		default:
			wantSt = valBad
		}
		if st != wantSt || (st == valOK && h != wantH) {
			t.Fatalf("readHash = %#x, %d; want %#x, %d (msgp value %T %v)", h, st, wantH, wantSt, want, want)
		}
	})
}

// FuzzAppendTokens checks appendTokens against a plain reading of the same entries: all valid
// ints give the ints, all valid pairs that chain give the tokens they are made of, anything
// else is valBad with a detail naming an entry; the input is consumed exactly as msgp.Skip
// consumes n values, and at most n+1 tokens are appended.
func FuzzAppendTokens(f *testing.F) {
	f.Add([]byte{0x05, 0xcc, 0x80, 0xcd, 0x01, 0x00}, uint8(3))
	f.Add([]byte{0x92, 0x01, 0x02, 0x92, 0x02, 0x03}, uint8(2))
	f.Add([]byte{0x92, 0x01, 0x02, 0x92, 0x03, 0x04}, uint8(2))
	f.Add([]byte{0x01, 0x92, 0x01, 0x02}, uint8(2))
	f.Add([]byte{0x93, 0x01, 0x02, 0x03}, uint8(1))
	f.Fuzz(func(t *testing.T, p []byte, n8 uint8) {
		n := uint32(n8 % 40)
		// The plain reading: each entry an int token or a [a, b] pair.
		var ints, firsts []uint32
		var seconds []uint32
		nInts, nPairs, bad := 0, 0, false
		q := p
		for range n {
			if len(q) == 0 {
				return // truncated: appendTokens may read past what Skip checks; not this test's case
			}
			if msgp.NextType(q) == msgp.ArrayType {
				a, b, st, rest, err := readPair(q)
				if err != nil {
					return
				}
				q, nPairs = rest, nPairs+1
				if st != valOK {
					bad = true
					continue
				}
				firsts, seconds = append(firsts, a), append(seconds, b)
				continue
			}
			v, st, rest, err := readTokenInt(q)
			if err != nil {
				return
			}
			q, nInts = rest, nInts+1
			if st != valOK {
				bad = true
				continue
			}
			ints = append(ints, v)
		}
		var want []uint32
		wantPairs := nPairs > 0
		switch {
		case bad || nInts > 0 && nPairs > 0:
			bad = true
		case wantPairs:
			for j := 1; j < len(firsts); j++ {
				if firsts[j] != seconds[j-1] {
					bad = true
				}
			}
			want = append(append(want, firsts...), seconds[len(seconds)-1])
		default:
			want = ints
		}
		got, rest, pairs, st, err := appendTokens(make([]uint32, 0, n+1), p, n)
		if err != nil {
			t.Fatalf("error %v on input the plain reading read whole", err)
		}
		if len(rest) != len(q) {
			t.Fatalf("%d bytes left, the plain reading left %d", len(rest), len(q))
		}
		if len(got) > int(n)+1 {
			t.Fatalf("%d tokens appended for %d entries", len(got), n)
		}
		if bad {
			if st != valBad {
				t.Fatalf("accepted %v (pairs %v) where the plain reading finds a defect", got, pairs)
			}
			if d := badTokenDetail(p, n); !strings.HasPrefix(d, "token_ids[") {
				t.Fatalf("detail %q names no entry", d)
			}
			return
		}
		if st != valOK || pairs != wantPairs || !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("got %v pairs=%v status %d, want %v pairs=%v", got, pairs, st, want, wantPairs)
		}
	})
}
