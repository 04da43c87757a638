package pool

import (
	"math/rand/v2"
	"net"
	"testing"
)

// TestHostPortMatchesNet checks splitHostPort and joinHostPort against the net package they
// stand in for, on chosen cases and on random strings over the characters that matter.
func TestHostPortMatchesNet(t *testing.T) {
	inputs := []string{"", ":", "a", "a:1", ":80", "[::1]:80", "[::1]", "[::1]80", "[::1]:80:", "::1:80",
		"[fe80::1%eth0]:8000", "a]:1", "[a:1", "[a]b:1", "[a]:1]", "host.svc:8000", "10.0.0.1:8000", "[10.0.0.1]:8000"}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab1:[]%."
	for range 20000 {
		b := make([]byte, r.IntN(9))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		host, port, ok := splitHostPort(in)
		wantHost, wantPort, err := net.SplitHostPort(in)
		if ok != (err == nil) || (ok && (host != wantHost || port != wantPort)) {
			t.Fatalf("splitHostPort(%q) = %q, %q, %v; net.SplitHostPort = %q, %q, %v", in, host, port, ok, wantHost, wantPort, err)
		}
		if ok {
			if got, want := joinHostPort(host, port), net.JoinHostPort(host, port); got != want {
				t.Fatalf("joinHostPort(%q, %q) = %q, want %q", host, port, got, want)
			}
		}
	}
}
