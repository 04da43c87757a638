package vllmsim

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zeromq/goczmq/v4"
)

// KVEventsConfig is vLLM's KVEventsConfig, the JSON of --kv-events-config
// (vllm-kv-events.md §5).
type KVEventsConfig struct {
	EnableKVCacheEvents bool    `json:"enable_kv_cache_events"`
	Publisher           string  `json:"publisher"`
	Endpoint            string  `json:"endpoint"`
	ReplayEndpoint      *string `json:"replay_endpoint"`
	Topic               string  `json:"topic"`
	BufferSteps         int     `json:"buffer_steps"`
	HWM                 int     `json:"hwm"`
	MaxQueueSize        int     `json:"max_queue_size"`
}

// ParseKVEventsConfig parses --kv-events-config JSON and fills vLLM's defaults.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}
	if strings.TrimSpace(s) != "" {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("vllmsim: --kv-events-config %q: %w", s, err)
		}
	}
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	var errs []error
	if c.Publisher != "zmq" && c.Publisher != "null" {
		errs = append(errs, fmt.Errorf("publisher: %q is not zmq or null", c.Publisher))
	}
	if c.BufferSteps < 0 || c.HWM < 0 || c.MaxQueueSize < 1 {
		errs = append(errs, fmt.Errorf("buffer_steps %d, hwm %d, max_queue_size %d: want >= 0, >= 0, >= 1", c.BufferSteps, c.HWM, c.MaxQueueSize))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vllmsim: --kv-events-config: %w", err)
	}
	return c, nil
}

// ForRank is the configuration of data-parallel rank rank's publisher: the endpoint and the
// replay endpoint offset as vLLM's ZmqEventPublisher.offset_endpoint_port does (rank 0
// unchanged; tcp: port + rank; inproc: suffix "_dp<rank>"; anything else is an error).
// Departures: a tcp port 0 (ephemeral) stays 0 for every rank instead of becoming port rank,
// and czmq's range form "*[lo-hi]" (which vLLM cannot offset) shifts to "*[lo+rank-hi+rank]".
func (c KVEventsConfig) ForRank(rank int) (KVEventsConfig, error) {
	var err error
	if c.Endpoint, err = offsetEndpoint(c.Endpoint, rank); err != nil {
		return c, err
	}
	if c.ReplayEndpoint != nil {
		r, err := offsetEndpoint(*c.ReplayEndpoint, rank)
		if err != nil {
			return c, err
		}
		c.ReplayEndpoint = &r
	}
	return c, nil
}

// offsetEndpoint is vLLM's offset_endpoint_port for one endpoint.
func offsetEndpoint(ep string, rank int) (string, error) {
	switch {
	case ep == "" || rank == 0:
		return ep, nil
	case strings.Contains(ep, "inproc"):
		return ep + "_dp" + strconv.Itoa(rank), nil
	case strings.Contains(ep, "tcp"):
		i := strings.LastIndexByte(ep, ':')
		if lo, hi, ok := czmqRange(ep[i+1:]); ok { // vllm-sim only: czmq's "*[lo-hi]" shifts whole
			return fmt.Sprintf("%s*[%d-%d]", ep[:i+1], lo+rank, hi+rank), nil
		}
		port, err := strconv.Atoi(ep[i+1:])
		if i < 0 || err != nil {
			return "", fmt.Errorf("vllmsim: endpoint %q rank %d: no port to offset", ep, rank)
		}
		if port == 0 {
			return ep, nil
		}
		return ep[:i+1] + strconv.Itoa(port+rank), nil
	}
	return "", fmt.Errorf("vllmsim: endpoint %q rank %d: must contain 'inproc' or 'tcp' (vLLM's rule)", ep, rank)
}

// czmqRange parses czmq's bind range "*[lo-hi]" (a port of the range; the e2e stack uses
// "*[N-N]" to bind exactly N on loopback).
func czmqRange(p string) (lo, hi int, ok bool) {
	inner, found := strings.CutPrefix(p, "*[")
	if inner, found = strings.CutSuffix(inner, "]"); !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(inner, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	return lo, hi, found && err1 == nil && err2 == nil
}

// Enabled reports whether events are published over ZeroMQ.
func (c KVEventsConfig) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// pubBinds is vLLM's rule: the PUB binds when the endpoint has '*' or "::" or is ipc:// or
// inproc://, and connects otherwise (vllm-kv-events.md §1.1).
func pubBinds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// replayEnd is the END marker of a replay reply: -1 as a signed 8-byte big-endian integer.
const replayEnd = ^uint64(0)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	KVEventsConfig
	// OldReplayLayout answers replays in the layout of vLLM < 0.26 ([seq, payload] and
	// [END, ""]) instead of [topic, seq, payload] and ["", END, ""].
	OldReplayLayout bool
}

// Publisher publishes KVEventBatch payloads like vLLM's ZmqEventPublisher: a PUB socket sending
// [topic, seq 8B BE, payload] with seq from 0, and an optional ROUTER that replays the last
// buffer_steps batches. Run owns the PUB socket on its goroutine and the ROUTER on a second
// goroutine it starts and waits for; Publish, Flush and Ready are safe for concurrent use.
type Publisher struct {
	cfg     PublisherConfig
	in      chan queued
	ready   chan struct{}
	stopped chan struct{} // closed when Run returns
	err     error         // set before ready closes

	pubEndpoint, replayEndpoint string // resolved; set before ready closes

	mu   sync.Mutex // guards ring, next
	ring []record   // the last BufferSteps batches, oldest first
	next int        // ring write position once full
}

type record struct {
	seq     uint64
	payload []byte
}

// queued is one entry of the publish queue: a payload, or a Flush marker (flushed non-nil) that
// Run closes when it reaches it.
type queued struct {
	payload []byte
	flushed chan struct{}
}

// ErrPublisherStopped is returned by Flush once Run has returned.
var ErrPublisherStopped = errors.New("vllmsim: publisher stopped")

// NewPublisher returns a publisher; nothing runs until Run.
func NewPublisher(cfg PublisherConfig) *Publisher {
	return &Publisher{cfg: cfg, in: make(chan queued, max(cfg.MaxQueueSize, 1)),
		ready: make(chan struct{}), stopped: make(chan struct{})}
}

// Ready waits until Run has set up its sockets and returns the resolved PUB and replay
// endpoints (a bound tcp port 0 or '*' is replaced by the real port; "" = no replay).
func (p *Publisher) Ready(ctx context.Context) (pub, replay string, err error) {
	select {
	case <-p.ready:
		return p.pubEndpoint, p.replayEndpoint, p.err
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
}

// Publish queues one payload; it blocks while the queue holds max_queue_size batches (vLLM's
// scheduler blocks the same way). The payload must not be modified afterwards.
func (p *Publisher) Publish(ctx context.Context, payload []byte) error {
	select {
	case p.in <- queued{payload: payload}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until Run has taken every payload queued before the call: each has its seq, sits
// in the replay buffer (while among the last buffer_steps) and was handed to the PUB socket, so
// a replay request sent after Flush returns covers them. Publish alone says nothing about that:
// it returns once the payload is queued. The marker Flush queues takes a slot like a payload.
func (p *Publisher) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.in <- queued{flushed: done}:
	case <-p.stopped:
		return ErrPublisherStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-p.stopped:
		return ErrPublisherStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run binds or connects the sockets and publishes until ctx ends. It returns the setup error,
// if any, else nil after ctx ends. Run must be called once.
func (p *Publisher) Run(ctx context.Context) error {
	defer close(p.stopped)
	pub, err := p.openPub()
	if err != nil {
		p.err = err
		close(p.ready)
		return err
	}
	defer pub.Destroy()
	var wg sync.WaitGroup
	if p.cfg.ReplayEndpoint != nil && *p.cfg.ReplayEndpoint != "" {
		router, err := p.openRouter()
		if err != nil {
			p.err = err
			close(p.ready)
			return err
		}
		// The router socket is handed to the replay goroutine, which alone uses and destroys it.
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer router.Destroy()
			p.serveReplays(ctx, router)
		}()
	}
	close(p.ready)
	defer wg.Wait()
	topic := []byte(p.cfg.Topic)
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case q := <-p.in:
			if q.flushed != nil {
				close(q.flushed)
				continue
			}
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], seq)
			// Kept for replay first, so a subscriber that saw the batch can replay it; a failed
			// send still consumes the seq, as in vLLM (§1.2).
			p.keep(seq, q.payload)
			_ = pub.SendMessage([][]byte{topic, sb[:], q.payload})
			seq++
		}
	}
}

func (p *Publisher) openPub() (*goczmq.Sock, error) {
	ep := p.cfg.Endpoint
	s := goczmq.NewSock(goczmq.Pub, goczmq.SockSetLinger(0), goczmq.SockSetSndhwm(p.cfg.HWM), goczmq.SockSetRcvhwm(p.cfg.HWM))
	if !pubBinds(ep) {
		if err := s.Connect(ep); err != nil {
			s.Destroy()
			return nil, fmt.Errorf("vllmsim: connect PUB %s: %w", ep, err)
		}
		p.pubEndpoint = ep
		return s, nil
	}
	port, err := s.Bind(ep)
	if err != nil {
		s.Destroy()
		return nil, fmt.Errorf("vllmsim: bind PUB %s: %w", ep, err)
	}
	p.pubEndpoint = withPort(ep, port)
	return s, nil
}

func (p *Publisher) openRouter() (*goczmq.Sock, error) {
	ep := *p.cfg.ReplayEndpoint
	s := goczmq.NewSock(goczmq.Router, goczmq.SockSetLinger(0), goczmq.SockSetSndhwm(p.cfg.BufferSteps+2))
	port, err := s.Bind(ep)
	if err != nil {
		s.Destroy()
		return nil, fmt.Errorf("vllmsim: bind replay ROUTER %s: %w", ep, err)
	}
	p.replayEndpoint = withPort(ep, port)
	return s, nil
}

// withPort replaces the port of a tcp endpoint (text after the last ':') by port; other
// endpoints are returned as they are.
func withPort(ep string, port int) string {
	i := strings.LastIndexByte(ep, ':')
	if !strings.HasPrefix(ep, "tcp://") || i < len("tcp://") || port <= 0 {
		return ep
	}
	return ep[:i+1] + strconv.Itoa(port)
}

func (p *Publisher) keep(seq uint64, payload []byte) {
	n := p.cfg.BufferSteps
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ring) < n {
		p.ring = append(p.ring, record{seq, payload})
		return
	}
	p.ring[p.next] = record{seq, payload}
	p.next = (p.next + 1) % n
}

// since returns the retained batches with seq >= start, oldest first.
func (p *Publisher) since(start uint64) []record {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []record
	for i := range p.ring {
		r := p.ring[(p.next+i)%len(p.ring)]
		if r.seq >= start {
			out = append(out, r)
		}
	}
	return out
}

// serveReplays answers [identity, "", start_seq] requests until ctx ends; anything else gets no
// reply, as in vLLM (§1.5).
func (p *Publisher) serveReplays(ctx context.Context, router *goczmq.Sock) {
	poller, err := goczmq.NewPoller(router)
	if err != nil {
		return
	}
	defer poller.Destroy()
	for ctx.Err() == nil {
		s, err := poller.Wait(100)
		if err != nil || s == nil {
			continue
		}
		frames, err := router.RecvMessage()
		if err != nil || len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != 8 {
			continue
		}
		p.reply(router, frames[0], binary.BigEndian.Uint64(frames[2]))
	}
}

func (p *Publisher) reply(router *goczmq.Sock, id []byte, start uint64) {
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	topic := []byte(p.cfg.Topic)
	for _, r := range p.since(start) {
		msg := [][]byte{id, {}, topic, be(r.seq), r.payload}
		if p.cfg.OldReplayLayout {
			msg = [][]byte{id, {}, be(r.seq), r.payload}
		}
		_ = router.SendMessage(msg)
	}
	if p.cfg.OldReplayLayout {
		_ = router.SendMessage([][]byte{id, {}, be(replayEnd), {}})
		return
	}
	_ = router.SendMessage([][]byte{id, {}, {}, be(replayEnd), {}})
}
