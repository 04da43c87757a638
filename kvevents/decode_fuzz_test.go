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
