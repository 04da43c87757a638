// Package testport hands tests blocks of consecutive loopback ports for processes that must be
// told their ports before they bind them (vLLM's data-parallel rank ports, a kube-apiserver and
// its etcd).
//
// Binding port 0 and closing it again does not reserve anything: the kernel hands a released
// ephemeral port to the next bind(0) or outgoing connection of any process, so a test running
// beside this one could take it before the child binds it. Blocks are therefore drawn at
// random below the kernel's ephemeral range (ip_local_port_range), which neither bind(0) nor
// connect ever use, checked free, and never handed out twice in one process.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port a block may start at: below it live the well-known and
// registered services a developer machine may run.
const lowest = 15000

var (
	mu   sync.Mutex
	used = map[int]bool{} // ports handed out by this process
)

// Block returns a base port p such that p .. p+n-1 were free on 127.0.0.1 when checked, lie
// outside the ephemeral range, and were not returned before in this process. It fails t when
// no such block is found.
func Block(t testing.TB, n int) int {
	t.Helper()
	if n < 1 || n > 100 {
		t.Fatalf("testport: a block of %d ports; want 1..100", n)
	}
	top := ephemeralLow() - n // the block must end below the ephemeral range
	if top <= lowest {
		t.Fatalf("testport: the ephemeral range starts at %d, leaving no room below it", top+n)
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		base := lowest + rand.IntN(top-lowest)
		if free(base, n) {
			for p := base; p < base+n; p++ {
				used[p] = true
			}
			return base
		}
	}
	t.Fatalf("testport: no %d consecutive free ports in [%d, %d)", n, lowest, top+n)
	return 0
}

// free reports whether ports base .. base+n-1 are unused here and bindable on 127.0.0.1.
func free(base, n int) bool {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		if used[p] {
			return false
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		lns = append(lns, l)
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default where the
// file cannot be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return linuxDefault
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return linuxDefault
	}
	return lo
}
