package kvzmq

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/goczmq/v4"
	"github.com/tinylib/msgp/msgp"
)

// testPublisher speaks vLLM's KV event protocol (vllm-kv-events.md §1): a PUB socket (an XPUB,
// so tests can wait for the subscription; subscribers see no difference) sending
// [topic, seq, payload], and a ROUTER replay socket keeping the last bufferSteps batches and
// answering [identity, "", start] with one message per retained batch and an end marker, in the
// old 3-frame or the >= 0.26 4-frame layout. One goroutine owns both sockets; tests talk to it
// through a command channel.
type testPublisher struct {
	PubEndpoint    string
	ReplayEndpoint string // "" when replay is off

	cmds chan pubCmd
	done chan struct{}
}

type pubOptions struct {
	pubPort, replayPort int // 0 = ephemeral
	topic               string
	bufferSteps         int
	newLayout           bool // vLLM >= 0.26 replay reply layout
	noReplay            bool
	connectLater        bool // the PUB neither binds nor connects until ConnectPub (centralized topology)
	silentReplay        bool // receive replay requests but never answer (a stuck endpoint)
}

type pubCmdKind uint8

const (
	cmdPublish pubCmdKind = iota + 1
	cmdPublishDropped
	cmdWaitSubscribed
	cmdRaw
	cmdBounce
	cmdConnect
	cmdStop
)

type pubCmd struct {
	kind    pubCmdKind
	payload []byte
	frames  [][]byte
	reply   chan uint64
}

type pubRecord struct {
	seq     uint64
	payload []byte
}

// startPublisher binds the sockets on 127.0.0.1 and starts the owner goroutine; the test's
// cleanup stops it.
func startPublisher(t *testing.T, o pubOptions) *testPublisher {
	t.Helper()
	p := &testPublisher{cmds: make(chan pubCmd), done: make(chan struct{})}
	ready := make(chan error, 1)
	go p.run(o, ready)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func (p *testPublisher) run(o pubOptions, ready chan<- error) {
	defer close(p.done)
	xpub := goczmq.NewSock(goczmq.XPub, goczmq.SockSetLinger(0), goczmq.SockSetSndhwm(100000))
	defer xpub.Destroy()
	port := 0
	if !o.connectLater {
		var err error
		if port, err = bindRetry(xpub, o.pubPort); err != nil {
			ready <- fmt.Errorf("publisher: bind PUB port %d: %w", o.pubPort, err)
			return
		}
		p.PubEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", port)
	}
	socks := []*goczmq.Sock{xpub}
	var router *goczmq.Sock
	if !o.noReplay {
		router = goczmq.NewSock(goczmq.Router, goczmq.SockSetLinger(0), goczmq.SockSetSndhwm(0))
		defer router.Destroy()
		rport, err := bindRetry(router, o.replayPort)
		if err != nil {
			ready <- fmt.Errorf("publisher: bind ROUTER port %d: %w", o.replayPort, err)
			return
		}
		p.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", rport)
		socks = append(socks, router)
	}
	poller, err := goczmq.NewPoller(socks...)
	if err != nil {
		ready <- err
		return
	}
	defer poller.Destroy()
	ready <- nil

	st := pubState{o: o, xpub: xpub, router: router, endpoint: p.PubEndpoint, port: port}
	for {
		if _, err := poller.Wait(2); err != nil {
			return
		}
		st.serve()
		select {
		case c := <-p.cmds:
			if c.kind == cmdStop {
				close(c.reply)
				return
			}
			st.handle(c)
		default:
		}
	}
}

// endSeq is the replay end marker: -1 as a signed 8-byte big-endian integer (§1.5). The test
// publisher spells the wire format out itself, like vLLM, instead of borrowing the parser's.
const endSeq = ^uint64(0)

// be8 encodes v as the 8-byte big-endian seq frame.
func be8(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// bindRetry binds 127.0.0.1:port (0 = ephemeral). libzmq closes a destroyed socket's listener
// asynchronously on its I/O thread, so rebinding the port of a just-stopped publisher (a restart)
// is retried until a deadline: the one wait here is on that external release, not on our code.
func bindRetry(s *goczmq.Sock, port int) (int, error) {
	if port == 0 {
		return s.Bind("tcp://127.0.0.1:*")
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		p, err := s.Bind(fmt.Sprintf("tcp://127.0.0.1:%d", port))
		if err == nil || time.Now().After(deadline) {
			return p, err
		}
		<-time.After(5 * time.Millisecond)
	}
}

type pubState struct {
	o          pubOptions
	endpoint   string
	port       int
	xpub       *goczmq.Sock
	router     *goczmq.Sock
	seq        uint64
	ring       []pubRecord
	subscribed bool
	waiters    []chan uint64
}

func (s *pubState) serve() {
	for readable(s.xpub) {
		f, err := s.xpub.RecvMessage()
		if err == nil && len(f) == 1 && len(f[0]) > 0 && f[0][0] == 1 {
			s.subscribed = true
		}
	}
	if s.subscribed {
		for _, w := range s.waiters {
			close(w)
		}
		s.waiters = nil
	}
	for s.router != nil && readable(s.router) {
		f, err := s.router.RecvMessage()
		if err != nil || s.o.silentReplay {
			continue
		}
		if len(f) != 3 || len(f[1]) != 0 || len(f[2]) != 8 {
			continue // vLLM logs "Invalid replay request" and sends nothing
		}
		s.reply(f[0], binary.BigEndian.Uint64(f[2]))
	}
}

func (s *pubState) reply(id []byte, start uint64) {
	send := func(seq []byte, payload []byte) {
		msg := [][]byte{id, {}}
		if s.o.newLayout {
			msg = append(msg, []byte(s.o.topic))
		}
		_ = s.router.SendMessage(append(msg, seq, payload))
	}
	for _, r := range s.ring {
		if r.seq >= start {
			send(be8(r.seq), r.payload)
		}
	}
	if s.o.newLayout {
		_ = s.router.SendMessage([][]byte{id, {}, {}, be8(endSeq), {}})
		return
	}
	send(be8(endSeq), nil)
}

func (s *pubState) handle(c pubCmd) {
	switch c.kind {
	case cmdWaitSubscribed:
		if s.subscribed {
			close(c.reply)
		} else {
			s.waiters = append(s.waiters, c.reply)
		}
		return
	case cmdRaw:
		_ = s.xpub.SendMessage(c.frames)
		c.reply <- 0
	case cmdConnect:
		_ = s.xpub.Connect(string(c.payload))
		c.reply <- 0
	case cmdBounce:
		// Unbinding closes the accepted connections; rebinding lets the subscriber reconnect to
		// the same process (a network blip: same seq, same replay ring).
		if err := s.xpub.Unbind(s.endpoint); err == nil {
			_, _ = bindRetry(s.xpub, s.port)
		}
		s.subscribed = false
		c.reply <- 0
	case cmdPublish, cmdPublishDropped:
		seq := s.seq
		s.seq++
		if s.o.bufferSteps > 0 {
			s.ring = append(s.ring, pubRecord{seq, c.payload})
			if len(s.ring) > s.o.bufferSteps {
				s.ring = s.ring[1:]
			}
		}
		if c.kind == cmdPublish {
			_ = s.xpub.SendMessage([][]byte{[]byte(s.o.topic), be8(seq), c.payload})
		}
		c.reply <- seq
	}
}

func (p *testPublisher) call(kind pubCmdKind, payload []byte) (uint64, bool) {
	c := pubCmd{kind: kind, payload: payload, reply: make(chan uint64, 1)}
	select {
	case p.cmds <- c:
	case <-p.done:
		return 0, false
	}
	select {
	case seq, ok := <-c.reply:
		return seq, ok
	case <-p.done:
		return 0, false
	}
}

// Publish sends one batch and returns its seq.
func (p *testPublisher) Publish(payload []byte) uint64 {
	seq, _ := p.call(cmdPublish, payload)
	return seq
}

// PublishDropped consumes a seq and keeps the batch for replay without sending it, like a
// failed send or a full subscriber pipe in vLLM (§1.2, §1.4).
func (p *testPublisher) PublishDropped(payload []byte) uint64 {
	seq, _ := p.call(cmdPublishDropped, payload)
	return seq
}

// Raw sends frames as they are (malformed messages).
func (p *testPublisher) Raw(frames [][]byte) {
	c := pubCmd{kind: cmdRaw, frames: frames, reply: make(chan uint64, 1)}
	p.cmds <- c
	<-c.reply
}

// ConnectPub connects the PUB to a binding subscriber (centralized topology).
func (p *testPublisher) ConnectPub(endpoint string) {
	p.call(cmdConnect, []byte(endpoint))
}

// Bounce drops the PUB connections and listens again on the same port.
func (p *testPublisher) Bounce() {
	c := pubCmd{kind: cmdBounce, reply: make(chan uint64, 1)}
	p.cmds <- c
	<-c.reply
}

// WaitSubscribed returns once a subscription reached the publisher, or fails the test.
func (p *testPublisher) WaitSubscribed(t *testing.T) {
	t.Helper()
	c := pubCmd{kind: cmdWaitSubscribed, reply: make(chan uint64)}
	p.cmds <- c
	select {
	case <-c.reply:
	case <-time.After(5 * time.Second):
		t.Fatal("publisher: no subscription within 5s")
	}
}

// Stop closes the sockets and waits for the goroutine. It may be called more than once.
func (p *testPublisher) Stop() {
	c := pubCmd{kind: cmdStop, reply: make(chan uint64)}
	select {
	case p.cmds <- c:
		<-p.done
	case <-p.done:
	}
}

// chain describes a chain of full blocks of blockSize tokens; batch i stores block i.
type chain struct {
	tokens    []uint32
	blockSize int
	hashBase  uint64 // engine hashes are hashBase+i (opaque per publisher process)
	rank      int64
}

func newChain(n, blockSize int, tokenBase uint32, hashBase uint64) chain {
	c := chain{tokens: make([]uint32, n*blockSize), blockSize: blockSize, hashBase: hashBase}
	for i := range c.tokens {
		c.tokens[i] = tokenBase + uint32(i)
	}
	return c
}

// batch encodes batch i: [ts, [["BlockStored", [h_i], parent, tokens, block_size, nil,
// "GPU"]], rank] (the array form of vLLM 0.10 – 0.23, written with msgp's append functions).
func (c chain) batch(i int) []byte {
	b := msgp.AppendArrayHeader(nil, 3)
	b = msgp.AppendFloat64(b, 1700000000.5)
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendArrayHeader(b, 7)
	b = msgp.AppendString(b, "BlockStored")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendUint64(b, c.hashBase+uint64(i))
	if i == 0 {
		b = msgp.AppendNil(b)
	} else {
		b = msgp.AppendUint64(b, c.hashBase+uint64(i-1))
	}
	blk := c.tokens[i*c.blockSize : (i+1)*c.blockSize]
	b = msgp.AppendArrayHeader(b, uint32(len(blk)))
	for _, t := range blk {
		b = msgp.AppendUint32(b, t)
	}
	b = msgp.AppendInt(b, c.blockSize)
	b = msgp.AppendNil(b)
	b = msgp.AppendString(b, "GPU")
	return msgp.AppendInt64(b, c.rank)
}
