package kvzmq

/*
#cgo pkg-config: libczmq libzmq
#include <czmq.h>

// condisagg_monitor starts (endpoint != NULL) or stops (endpoint == NULL) a libzmq socket
// monitor on a CZMQ socket. It returns -2 if sock is not a live zsock_t.
static int condisagg_monitor(void *sock, const char *endpoint, int events) {
	if (sock == NULL || !zsock_is(sock)) return -2;
	return zmq_socket_monitor(zsock_resolve(sock), endpoint, events);
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"unsafe"

	"github.com/go-zeromq/goczmq/v4"
)

// Transport reconnect detection (vllm-kv-events.md §1.6 "Reconnect").
//
// goczmq v4.2.2 does not wrap zmq_socket_monitor or CZMQ's zmonitor actor, so the monitor is
// started here through cgo on the SUB's underlying zsock_t. goczmq keeps that pointer in the
// unexported first field of Sock; zsockOf reads it and the C side checks it with zsock_is (the
// CZMQ tag) before use, so a layout change in a future goczmq disables reconnect detection
// (reported by openMonitor) instead of corrupting memory. TestSubscriberFastRestartReconnectCheck
// and TestSubscriberReconnectSamePublisher fail if reconnects stop being detected.
//
// The monitor publishes on an inproc PAIR endpoint that the same goroutine reads, so the SUB,
// the monitor and its PAIR all have one owner. Events used: ZMQ_EVENT_HANDSHAKE_SUCCEEDED (the
// ZMTP session to the publisher is up; every one after the first is a reconnect) and
// ZMQ_EVENT_DISCONNECTED (for the Connected flag). Detected: every new ZMTP session after the
// first, i.e. publisher restarts (a new process always means a new connection) and reconnects
// after a closed connection (FIN or RST), and, with ZMTP heartbeats on the SUB
// (Config.HeartbeatInterval), after silent connection loss once the heartbeat times out.
// Not detected: loss inside a connection that stays up (PUB HWM drops, failed sends in vLLM);
// those show up as seq gaps (§1.6 rule 4). If the monitor cannot start, StreamStatus.Monitored
// is false and reconnects are seen only through seq (rule 5 still catches restarts whose seq
// restarts below expect).
const (
	monitorEvents = C.ZMQ_EVENT_HANDSHAKE_SUCCEEDED | C.ZMQ_EVENT_DISCONNECTED

	monEventConnected    = uint16(C.ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
	monEventDisconnected = uint16(C.ZMQ_EVENT_DISCONNECTED)
)

// zsockOf returns goczmq's underlying zsock_t pointer (the first field of goczmq.Sock v4.2.2).
func zsockOf(s *goczmq.Sock) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(s))
}

// monitor is a socket monitor and the PAIR socket that receives its events. It belongs to the
// goroutine that owns the monitored socket.
type monitor struct {
	target *goczmq.Sock
	pair   *goczmq.Sock
}

// openMonitor starts monitoring sock. The endpoint name is unique: the socket's address plus a
// random suffix (a destroyed socket's inproc name stays registered until libzmq's reaper closes
// it, and a new socket may reuse the address).
func openMonitor(sock *goczmq.Sock) (*monitor, error) {
	endpoint := fmt.Sprintf("inproc://condisagg-monitor-%p-%016x", zsockOf(sock), rand.Uint64())
	cEndpoint := C.CString(endpoint)
	defer C.free(unsafe.Pointer(cEndpoint))
	if rc := C.condisagg_monitor(zsockOf(sock), cEndpoint, C.int(monitorEvents)); rc != 0 {
		return nil, fmt.Errorf("kvzmq: start socket monitor endpoint=%s: rc=%d", endpoint, int(rc))
	}
	pair := goczmq.NewSock(goczmq.Pair, goczmq.SockSetLinger(0))
	if err := pair.Connect(endpoint); err != nil {
		C.condisagg_monitor(zsockOf(sock), nil, 0)
		pair.Destroy()
		return nil, fmt.Errorf("kvzmq: connect socket monitor endpoint=%s: %w", endpoint, err)
	}
	return &monitor{target: sock, pair: pair}, nil
}

// close stops the monitor; it must run before the monitored socket is destroyed.
func (m *monitor) close() {
	if m == nil {
		return
	}
	C.condisagg_monitor(zsockOf(m.target), nil, 0)
	m.pair.Destroy()
}

// parseMonitorEvent decodes a libzmq (v1) monitor message: [event u16 + value u32 in host
// order (little-endian on every supported platform), endpoint].
func parseMonitorEvent(frames [][]byte) (event uint16, ok bool) {
	if len(frames) != 2 || len(frames[0]) != 6 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(frames[0]), true
}
