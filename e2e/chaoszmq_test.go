package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/goczmq/v4"
	"github.com/tinylib/msgp/msgp"

	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/sim/vllmsim"
)

// hostilePublisher stands where a worker's engine publishes KV events (its PUB endpoint) and
// answers its replay requests (ROUTER), sending what no engine would: every socket is owned by
// the one goroutine that runs it.
type hostilePublisher struct {
	pub, replay string // tcp://127.0.0.1:port endpoints to bind
	replays     atomic.Int64
}

// maxPayloadBytes is the router's default kv_events payload limit (kvzmq MaxPayloadBytes);
// frames up to 64 KiB above it pass libzmq's size check and meet the payload check.
const maxPayloadBytes = 16 << 20

// garbage returns the hostile messages, in order: malformed framing, bad sequence numbers,
// payloads that are not a KVEventBatch, a payload one byte over the limit, and a frame far over
// libzmq's maxmsgsize (the router's SUB drops the connection before allocating it).
func garbageMessages() [][][]byte {
	seq := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	random := func(n int) []byte { // 64 MiB in all: a byte-by-byte loop took 11 s under -race
		b := make([]byte, n)
		seed := [32]byte{7}
		binary.BigEndian.PutUint64(seed[8:], uint64(n))
		_, _ = rand.NewChaCha8(seed).Read(b)
		return b
	}
	wrongShape := msgp.AppendArrayHeader(nil, 3)
	wrongShape = msgp.AppendString(wrongShape, "not a timestamp")
	wrongShape = msgp.AppendMapHeader(wrongShape, 1)
	wrongShape = msgp.AppendString(wrongShape, "k")
	wrongShape = msgp.AppendInt64(wrongShape, -1)
	badEvents := msgp.AppendArrayHeader(nil, 3)
	badEvents = msgp.AppendFloat64(badEvents, 1)
	badEvents = msgp.AppendArrayHeader(badEvents, 2)
	badEvents = msgp.AppendArrayHeader(badEvents, 2)
	badEvents = msgp.AppendString(badEvents, "BlockStored")
	badEvents = msgp.AppendArrayHeader(badEvents, math.MaxUint32) // claims 4 G elements
	badEvents = msgp.AppendString(badEvents, "NoSuchEvent")
	badEvents = msgp.AppendInt64(badEvents, 0)
	return [][][]byte{
		{[]byte("one frame")},
		{{}, []byte("two frames")},
		{{}, []byte{1, 2, 3}, []byte("short seq")},
		{{}, seq(10), random(1 << 10)},
		{{}, seq(11), msgp.AppendNil(nil)},
		{{}, seq(12), wrongShape},
		{{}, seq(13), badEvents},
		{{}, seq(14), {}, {}, []byte("five frames")},
		{{}, seq(1 << 40), random(64)}, // a gap of 2^40: a replay the hostile ROUTER answers
		{{}, seq(math.MaxUint64), nil}, // the largest seq, empty payload
		{{}, seq(3), random(16)},       // back again: a "restart"
		{{}, seq(15), random(maxPayloadBytes + 1)},
		{{}, seq(16), random(48 << 20)},
	}
}

// validBatch is one BlockStored batch of two full blocks of tokens, as vllm-sim would
// publish it: after the garbage, the stream must still apply it.
func validBatch() []byte {
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(1000 + i)
	}
	enc := vllmsim.Encoder{Format: vllmsim.FormatMap, Hashes: vllmsim.HashInt, BlockSize: 16}
	return enc.AppendBatch(nil, float64(time.Now().UnixNano())/1e9,
		[]sim.Event{{Kind: sim.EventBlockStored, Hashes: []uint64{0xc0ffee, 0xc0ffef}, Tokens: toks}})
}

// run binds both sockets and sends a one-frame probe every 100 ms until proceed is closed (the
// router has counted one: it is subscribed, so nothing that follows is lost to the slow-joiner
// window), then the garbage; it closes sent and publishes valid batches as a restarted engine
// would (seq 0, 1, 2 …) until ctx ends, answering every replay request with junk throughout. It returns the
// bind error, if any.
func (h *hostilePublisher) run(ctx context.Context, proceed <-chan struct{}, sent chan<- struct{}) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pub, err := goczmq.NewPub(h.pub, goczmq.SockSetLinger(0), goczmq.SockSetSndhwm(100000))
	if err != nil {
		return fmt.Errorf("chaos: bind hostile PUB %s: %w", h.pub, err)
	}
	defer pub.Destroy()
	router, err := goczmq.NewRouter(h.replay, goczmq.SockSetLinger(0))
	if err != nil {
		return fmt.Errorf("chaos: bind hostile ROUTER %s: %w", h.replay, err)
	}
	defer router.Destroy()
	garbage := garbageMessages() // made before the test waits for it, not while
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for probing := true; probing; {
		_ = pub.SendMessage([][]byte{[]byte("probe")})
		select {
		case <-proceed:
			probing = false
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	for _, m := range garbage {
		_ = pub.SendMessage(m)
		h.answerReplays(router)
	}
	close(sent)
	// A restarted engine: seq from 0 up, one valid batch every 200 ms.
	for i := uint64(0); ; i++ {
		h.answerReplays(router)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if i%2 == 0 {
				_ = pub.SendMessage([][]byte{{}, binary.BigEndian.AppendUint64(nil, i/2), validBatch()})
			}
		}
	}
}

// answerReplays answers every replay request already waiting (it never blocks: a blocked cgo
// receive cannot be interrupted) with malformed replies and a reply from an impossible seq.
// (Sock.Pollin compares the event mask for equality, so a ROUTER that is also writable would
// never look readable; the bit is tested here.)
func (h *hostilePublisher) answerReplays(router *goczmq.Sock) {
	for goczmq.Events(router)&goczmq.Pollin != 0 {
		msg, err := router.RecvMessage()
		if err != nil || len(msg) == 0 {
			return
		}
		h.replays.Add(1)
		id := msg[0]
		_ = router.SendMessage([][]byte{id, []byte("junk")})
		_ = router.SendMessage([][]byte{id, {}, {9, 9}, []byte("junk")})
		_ = router.SendMessage([][]byte{id, {}, binary.BigEndian.AppendUint64(nil, 1<<62), []byte{0xc1}})
	}
}
