package bookbus

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/pool"
)

func wireSamples() []message {
	return []message{
		{replica: "router-0", incarnation: 1 << 60, model: "qwen", d: pool.PeerDelta{Kind: pool.PeerBook, Lease: 10 * time.Second,
			Booking: pool.Booking{RequestID: "req-1", Mode: pool.ModeBypass, Decode: "decode-0/dp1", Keys: []uint64{1, 2, 1 << 63}, ISL: 50, PrefillTokens: 18}}},
		{replica: "r", model: "", d: pool.PeerDelta{Kind: pool.PeerBook, Lease: time.Second,
			Booking: pool.Booking{RequestID: "x", Mode: pool.ModeRemote, Decode: "d", Prefill: "p", ISL: 7, PrefillTokens: 7}}},
		{replica: "r", d: pool.PeerDelta{Kind: pool.PeerRelease, RequestID: "x", Lease: time.Second}},
		{replica: "r", d: pool.PeerDelta{Kind: pool.PeerReleasePrefill, RequestID: "x", Lease: time.Second}},
		{replica: "r", d: pool.PeerDelta{Kind: pool.PeerRenew, Lease: 3 * time.Second, Open: []string{"a", "b", ""}, Complete: true}},
		{replica: "r", d: pool.PeerDelta{Kind: pool.PeerRenew, Lease: 3 * time.Second}},
		{replica: "r", d: pool.PeerDelta{Kind: pool.PeerGone, Lease: time.Second}},
		{replica: "r", incarnation: 5, d: pool.PeerDelta{Kind: kindHello, Lease: time.Second}},
	}
}

// TestWireRoundTrip: decode(encode(m)) is m for every kind.
func TestWireRoundTrip(t *testing.T) {
	for _, m := range wireSamples() {
		m.d.Replica = m.replica
		got, err := decode(encode(nil, &m))
		if err != nil {
			t.Fatalf("%v: %v", m.d.Kind, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
	// A booking of 8k tokens is about 4 KiB: the keys dominate.
	b := wireSamples()[0]
	b.d.Booking.Keys = make([]uint64, 512)
	if n := len(encode(nil, &b)); n > 512*8+64 {
		t.Errorf("an 8k-token bypass encodes to %d bytes", n)
	}
}

// TestWireRefusesMalformed: each malformed input is an error naming its field.
func TestWireRefusesMalformed(t *testing.T) {
	good := encode(nil, &wireSamples()[0])
	nk := wireSamples()[1]
	noKeys := encode(nil, &nk) // ends with the key count 0
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "decode version: truncated"},
		{"version", append([]byte{2}, good[1:]...), "version 2"},
		{"kind", append([]byte{1, 9}, good[2:]...), "kind 9"},
		{"truncated_keys", good[:len(good)-3], "decode keys: truncated"},
		{"trailing", append(append([]byte{}, good...), 0), "1 trailing bytes"},
		{"huge_key_count", slices.Concat(noKeys[:len(noKeys)-1], []byte{0xff, 0xff, 0xff, 0x7f}), "decode keys: 268435455 is above 131072"},
		{"key_count_past_the_end", slices.Concat(noKeys[:len(noKeys)-1], []byte{0x80, 0x01}), "decode keys: truncated"},
	} {
		_, err := decode(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// FuzzDecode: no panic, allocation bounded by the input (keys and ids are checked against the
// bytes left before they are allocated), and what decodes encodes back to something that
// decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, m := range wireSamples() {
		f.Add(encode(nil, &m))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := decode(in)
		if err != nil {
			return
		}
		if len(m.d.Booking.Keys)*8 > len(in) || len(m.d.Open) > len(in) {
			t.Fatalf("decoded %d keys and %d ids from %d bytes", len(m.d.Booking.Keys), len(m.d.Open), len(in))
		}
		again, err := decode(encode(nil, &m))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("re-decode differs:\n%+v\n%+v", again, m)
		}
	})
}
