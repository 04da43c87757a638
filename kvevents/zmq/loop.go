package kvzmq

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/go-zeromq/goczmq/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// recvBurst bounds how many messages one socket may deliver per poll round, so the SUB cannot
// starve the replay DEALERs or the monitor.
const recvBurst = 256

// loop owns the SUB socket, its monitor and the poller, on the goroutine that runs it, and
// dispatches to the stream shells: one in the default topology (the SUB connects to one
// engine), one per topic in the centralized topology (the SUB binds and every engine connects,
// §1.1).
type loop struct {
	cfg      Config
	endpoint string
	sub      *goczmq.Sock
	mon      *monitor
	poller   *goczmq.Poller // nil = rebuild for the current socket set
	shells   []*streamShell
	byTopic  map[string]*streamShell // centralized topology only
	unknown  prometheus.Counter      // centralized: messages of no configured topic
	// unknownLogged are the unknown topics already logged (at most maxUnknownLogged), so a
	// misconfigured publisher is named once rather than per message.
	unknownLogged map[string]bool

	handshakes int // ZMTP sessions established so far
	connected  bool
	// downSince is when the SUB's only session went down (default topology); zero while
	// connected. libzmq does not reconnect after a protocol error (a frame over
	// ZMQ_MAXMSGSIZE), so redial does.
	downSince time.Time
	connDirty bool
}

// maxFrameBytes is ZMQ_MAXMSGSIZE for every socket of a stream: the payload bound plus room for
// the topic and sequence frames of a multipart message.
func maxFrameBytes(cfg Config) int { return cfg.MaxPayloadBytes + 64<<10 }

// newSub creates the SUB socket with its options and monitor (not yet attached).
func newSub(cfg Config, topics []string, log interface{ Warn(string, ...any) }) (*goczmq.Sock, *monitor) {
	opts := []goczmq.SockOption{
		goczmq.SockSetRcvhwm(cfg.RcvHWM),
		goczmq.SockSetLinger(0),
		goczmq.SockSetReconnectIvlMax(2000),
		// libzmq refuses (and disconnects) a peer whose frame is over this before allocating it:
		// a 1 GB frame would otherwise cost 1 GB of RSS before the payload check drops it.
		goczmq.SockSetMaxmsgsize(maxFrameBytes(cfg)),
	}
	for _, t := range topics {
		opts = append(opts, goczmq.SockSetSubscribe(t))
	}
	if hb := cfg.HeartbeatInterval; hb > 0 {
		opts = append(opts, goczmq.SockSetHeartbeatIvl(int(hb/time.Millisecond)),
			goczmq.SockSetHeartbeatTimeout(int(3*hb/time.Millisecond)))
	}
	sub := goczmq.NewSock(goczmq.Sub, opts...)
	mon, err := openMonitor(sub)
	if err != nil {
		log.Warn("socket monitor unavailable: reconnects are not detected", "err", err)
	}
	return sub, mon
}

// newLoop sets up the default topology for one stream: the SUB connects to its endpoint.
func newLoop(s *Subscriber) (*loop, error) {
	runtime.LockOSThread()
	l := &loop{cfg: s.cfg, endpoint: s.sc.Endpoint, shells: []*streamShell{newStreamShell(s)}}
	l.sub, l.mon = newSub(s.cfg, []string{s.sc.Topic}, s.log)
	if err := l.sub.Connect(s.sc.Endpoint); err != nil {
		l.close()
		return nil, fmt.Errorf("kvzmq: connect SUB worker=%s endpoint=%s: %w", s.sc.Worker, s.sc.Endpoint, err)
	}
	return l, nil
}

// close destroys every socket; it runs on the owning goroutine.
func (l *loop) close() {
	for _, sh := range l.shells {
		sh.closeReplay()
	}
	l.resetPoller()
	l.mon.close()
	l.sub.Destroy()
	runtime.UnlockOSThread()
}

func (l *loop) run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := l.round(); err != nil {
			return err
		}
	}
	return nil
}

// round waits up to one poll interval for input, then serves every socket once.
func (l *loop) round() error {
	for _, sh := range l.shells {
		if sh.socketsChanged {
			sh.socketsChanged = false
			l.resetPoller()
		}
	}
	if l.poller == nil {
		socks := []*goczmq.Sock{l.sub}
		if l.mon != nil {
			socks = append(socks, l.mon.pair)
		}
		for _, sh := range l.shells {
			if sh.rp != nil {
				socks = append(socks, sh.rp.dealer)
			}
		}
		p, err := goczmq.NewPoller(socks...)
		if err != nil {
			return fmt.Errorf("kvzmq: poller endpoint=%s: %w", l.endpoint, err)
		}
		l.poller = p
	}
	if _, err := l.poller.Wait(int(l.cfg.PollInterval / time.Millisecond)); err != nil {
		return fmt.Errorf("kvzmq: poll endpoint=%s: %w", l.endpoint, err)
	}
	l.drainMonitor()
	l.drainSub()
	now := time.Now()
	l.redial(now)
	for _, sh := range l.shells {
		sh.drainReplay()
		sh.checkReplayDeadline(now)
		sh.dirty = sh.dirty || l.connDirty
		sh.publish(l.connected, l.mon != nil)
	}
	l.connDirty = false
	return nil
}

// redialAfter is how long the SUB may stay disconnected before redial makes a new session.
const redialAfter = time.Second

// redial re-creates the SUB's session when it has been down for redialAfter: libzmq reconnects
// by itself after a connection error but not after a protocol error (a frame over
// ZMQ_MAXMSGSIZE, a broken handshake), which would otherwise end the stream for good. A redial
// during libzmq's own reconnect attempts only replaces them. The next handshake runs the
// reconnect check, so what the gap lost is replayed.
func (l *loop) redial(now time.Time) {
	if l.byTopic != nil || l.connected || l.downSince.IsZero() || now.Sub(l.downSince) < redialAfter {
		return
	}
	l.downSince = now
	_ = l.sub.Disconnect(l.endpoint) // the terminated session may already be gone
	if err := l.sub.Connect(l.endpoint); err != nil {
		l.shells[0].s.log.Warn("redial SUB", "endpoint", l.endpoint, "err", err)
	}
}

func readable(s *goczmq.Sock) bool { return goczmq.Events(s)&goczmq.Pollin != 0 }

func (l *loop) drainMonitor() {
	if l.mon == nil {
		return
	}
	for i := 0; i < recvBurst && readable(l.mon.pair); i++ {
		frames, err := l.mon.pair.RecvMessage()
		if err != nil {
			return
		}
		ev, ok := parseMonitorEvent(frames)
		if !ok {
			continue
		}
		l.connDirty = true
		switch ev {
		case monEventConnected:
			l.connected, l.downSince = true, time.Time{}
			l.handshakes++
			l.handshake()
		case monEventDisconnected:
			l.connected = l.byTopic != nil // centralized: other publishers stay connected
			if !l.connected {
				l.downSince = time.Now()
			}
		}
	}
}

// handshake feeds a new ZMTP session to the streams. Default topology: every session after the
// first is a reconnect of the one stream. Centralized topology: a session cannot be tied to a
// topic, so every stream with a replay endpoint runs the reconnect check (a stream with nothing
// applied yet ignores it; one without replay is left to the seq rules, since clearing every such
// stream whenever any engine connects would be wrong).
func (l *loop) handshake() {
	if l.byTopic == nil {
		if l.handshakes > 1 {
			l.shells[0].reconnect()
		}
		return
	}
	for _, sh := range l.shells {
		if sh.s.sc.ReplayEndpoint != "" && sh.st.State().HasLast {
			sh.reconnect()
		}
	}
}

func (l *loop) drainSub() {
	for i := 0; i < recvBurst && readable(l.sub); i++ {
		frames, err := l.sub.RecvMessage()
		if err != nil {
			return
		}
		if l.byTopic == nil {
			l.shells[0].live(frames)
			continue
		}
		sh := l.byTopic[string(firstFrame(frames))]
		if sh == nil {
			l.unknown.Inc()
			l.logUnknown(firstFrame(frames))
			continue
		}
		sh.live(frames)
	}
}

// maxUnknownLogged bounds the unknown topics logged (and remembered) by one centralized loop.
const maxUnknownLogged = 32

// logUnknown warns once per unknown topic, for the first maxUnknownLogged of them.
func (l *loop) logUnknown(topic []byte) {
	if len(l.unknownLogged) >= maxUnknownLogged || l.unknownLogged[string(topic)] {
		return
	}
	if l.unknownLogged == nil {
		l.unknownLogged = make(map[string]bool)
	}
	l.unknownLogged[string(topic)] = true
	l.cfg.Logger.Warn("KV event message of no configured topic dropped", "endpoint", l.endpoint,
		"err", fmt.Sprintf("topic %q is not configured (logged once per topic)", topic))
}

func firstFrame(frames [][]byte) []byte {
	if len(frames) == 0 {
		return nil
	}
	return frames[0]
}

// resetPoller drops the poller so the next round rebuilds it for the current socket set.
func (l *loop) resetPoller() {
	if l.poller != nil {
		l.poller.Destroy()
		l.poller = nil
	}
}
