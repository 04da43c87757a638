//go:build unix

package envoy

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// deadEndpoint returns a loopback address that refuses every connection until the test ends:
// a TCP socket bound to a port the kernel picks, never listening, closed by the test's cleanup.
//
// The port is held, not merely found free: a port released after a listen on :0 goes to the
// next bind of port 0 by any process on the machine, and an Envoy that still dials it as
// condisagg then reaches that stranger, for instance another test's canary, which counted
// Envoy's gRPC preface (its health checks and ext_proc streams) as requests it must never get.
// The socket leaves SO_REUSEADDR unset, so no other socket can bind the port (nor the kernel
// pick it for a bind of port 0 or an outgoing connection); with no listener on it, a
// connection attempt is refused, as it is when condisagg is down.
func deadEndpoint(t *testing.T) Endpoint {
	t.Helper()
	syscall.ForkLock.RLock() // no child started meanwhile may inherit the socket
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatalf("dead endpoint: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("dead endpoint: bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("dead endpoint: getsockname: %v", err)
	}
	return Endpoint{Host: "127.0.0.1", Port: sa.(*syscall.SockaddrInet4).Port}
}

// TestDeadEndpointIsHeld: the dead endpoint refuses connections and no listener can take its
// port while the test runs.
func TestDeadEndpointIsHeld(t *testing.T) {
	t.Parallel()
	e := deadEndpoint(t)
	if c, err := net.Dial("tcp", e.String()); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v; want connection refused", e, err)
	}
	if l, err := net.Listen("tcp", e.String()); !errors.Is(err, syscall.EADDRINUSE) {
		if l != nil {
			l.Close()
		}
		t.Errorf("listen on %s: %v; want address in use (the port is held)", e, err)
	}
}
