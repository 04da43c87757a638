package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestBlock: blocks lie below the ephemeral range, are bindable, and never overlap within a
// process, even while the earlier ones are still unbound.
func TestBlock(t *testing.T) {
	lo := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		base := Block(t, 3)
		if base < lowest || base+3 > lo {
			t.Fatalf("block %d..%d is outside [%d, %d)", base, base+2, lowest, lo)
		}
		for p := base; p < base+3; p++ {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	// A bound port is never handed out.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(l.Addr().(*net.TCPAddr).Port, 1) {
		t.Fatalf("port %d is bound, free says it is not", l.Addr().(*net.TCPAddr).Port)
	}
	base := Block(t, 1)
	if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base)); err != nil {
		t.Fatalf("handed-out port %d cannot be bound: %v", base, err)
	} else {
		l2.Close()
	}
}
