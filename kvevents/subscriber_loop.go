package kvevents

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/go-zeromq/goczmq/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// recvBurst bounds how many messages one socket may deliver per poll round, so the SUB cannot
// starve the replay DEALER or the monitor.
const recvBurst = 256

// replaySession is one replay request in flight on its own DEALER (a fresh socket per replay,
// so a late reply to a timed-out request can never be mistaken for the next one).
type replaySession struct {
	dealer  *goczmq.Sock
	from    uint64
	started time.Time
	last    time.Time // last reply (or the request)
}

// loop is the imperative shell of one stream. It lives on the goroutine running Subscriber.Run,
// which owns every socket in it.
type loop struct {
	s      *Subscriber
	st     *Stream
	sub    *goczmq.Sock
	mon    *monitor
	rp     *replaySession
	poller *goczmq.Poller // rebuilt whenever the socket set changes (nil = rebuild)
	lagOf  interface{ Batch() *Batch }

	pendingEnd ReplayEnd // a replay failure noticed while executing actions, fed afterwards
	handshakes int       // ZMTP sessions established so far
	connected  bool
	dirty      bool // the status snapshot is stale
	lastEvent  time.Time
	dropped    uint64
	malformed  uint64
}

func newLoop(s *Subscriber) (*loop, error) {
	runtime.LockOSThread()
	l := &loop{s: s, st: NewStream(StreamOptions{
		HasReplay:       s.sc.ReplayEndpoint != "",
		PendingMessages: s.cfg.PendingMessages,
		PendingBytes:    s.cfg.PendingBytes,
	})}
	l.lagOf, _ = s.applier.(interface{ Batch() *Batch })
	opts := []goczmq.SockOption{
		goczmq.SockSetRcvhwm(s.cfg.RcvHWM),
		goczmq.SockSetLinger(0),
		goczmq.SockSetReconnectIvlMax(2000),
		goczmq.SockSetSubscribe(s.sc.Topic),
	}
	if hb := s.cfg.HeartbeatInterval; hb > 0 {
		opts = append(opts, goczmq.SockSetHeartbeatIvl(int(hb/time.Millisecond)),
			goczmq.SockSetHeartbeatTimeout(int(3*hb/time.Millisecond)))
	}
	l.sub = goczmq.NewSock(goczmq.Sub, opts...)
	mon, err := openMonitor(l.sub)
	if err != nil {
		s.log.Warn("socket monitor unavailable: reconnects are not detected", "err", err)
	}
	l.mon = mon
	l.dirty = true
	if err := l.sub.Connect(s.sc.Endpoint); err != nil {
		l.close()
		return nil, fmt.Errorf("kvevents: connect SUB worker=%s endpoint=%s: %w", s.sc.Worker, s.sc.Endpoint, err)
	}
	return l, nil
}

// close destroys every socket; it runs on the owning goroutine.
func (l *loop) close() {
	l.closeReplay()
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
	if l.poller == nil {
		socks := []*goczmq.Sock{l.sub}
		if l.mon != nil {
			socks = append(socks, l.mon.pair)
		}
		if l.rp != nil {
			socks = append(socks, l.rp.dealer)
		}
		p, err := goczmq.NewPoller(socks...)
		if err != nil {
			return fmt.Errorf("kvevents: poller worker=%s: %w", l.s.sc.Worker, err)
		}
		l.poller = p
	}
	if _, err := l.poller.Wait(int(l.s.cfg.PollInterval / time.Millisecond)); err != nil {
		return fmt.Errorf("kvevents: poll worker=%s: %w", l.s.sc.Worker, err)
	}
	l.drainMonitor()
	l.drainSub()
	l.drainReplay()
	l.checkReplayDeadline(time.Now())
	if l.dirty {
		l.dirty = false
		l.s.publish(l.fill)
	}
	return nil
}

func (l *loop) fill(ss *StreamStatus) {
	ss.Connected = l.connected
	ss.Monitored = l.mon != nil
	ss.LastEvent = l.lastEvent
	ss.Dropped = l.dropped
	ss.MalformedClear = l.malformed
	ss.StreamState = l.st.State()
	ss.Clears += l.malformed
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
		l.dirty = true
		switch ev {
		case monEventConnected:
			l.connected = true
			l.handshakes++
			if l.handshakes > 1 {
				l.s.ctr.reconnects.Inc()
				l.s.log.Info("publisher reconnected", "seq", l.st.State().LastSeq)
				l.do(l.st.Reconnect())
			}
		case monEventDisconnected:
			l.connected = false
		}
	}
}

func (l *loop) drainSub() {
	for i := 0; i < recvBurst && readable(l.sub); i++ {
		frames, err := l.sub.RecvMessage()
		if err != nil {
			return
		}
		seq, payload, reason := parseLive(frames, l.s.cfg.MaxPayloadBytes)
		if reason != "" {
			l.drop(reason)
			continue
		}
		l.do(l.st.Live(seq, payload))
	}
}

func (l *loop) drainReplay() {
	for i := 0; i < recvBurst && l.rp != nil && readable(l.rp.dealer); i++ {
		frames, err := l.rp.dealer.RecvMessage()
		if err != nil {
			return
		}
		l.rp.last = time.Now()
		seq, payload, kind, err := parseReplay(frames, l.s.cfg.MaxPayloadBytes)
		switch kind {
		case replayData:
			l.do(l.st.ReplayBatch(seq, payload))
		case replayEnd:
			l.do(l.st.EndReplay(EndMarker))
		case replayTooLarge:
			l.drop(DropTooLarge)
		default:
			l.drop("replay_malformed")
			l.s.log.Warn("malformed replay reply", "seq", l.rp.from, "err", err)
			l.do(l.st.EndReplay(EndMalformed))
		}
	}
}

func (l *loop) checkReplayDeadline(now time.Time) {
	if l.rp == nil {
		return
	}
	if now.Sub(l.rp.last) >= l.s.cfg.ReplayIdleTimeout || now.Sub(l.rp.started) >= l.s.cfg.ReplayTotalTimeout {
		l.do(l.st.EndReplay(EndTimeout))
	}
}

func (l *loop) drop(reason DropReason) {
	l.dropped++
	l.dirty = true
	l.s.ctr.dropped(reason).Inc()
}

// do carries out the machine's actions in order. A replay that fails while starting is fed back
// after the list is done (the list is reused by the machine's next call).
func (l *loop) do(acts []Action) {
	l.dirty = true
	for _, a := range acts {
		switch a.Kind {
		case ActApply:
			l.apply(a.Seq, a.Payload)
		case ActReplay:
			l.startReplay(a.Seq)
		case ActEndReplay:
			l.endReplay(a)
		case ActClear:
			l.clear(a)
		case ActGap:
			l.s.ctr.gaps.Inc()
			l.s.log.Debug("sequence gap", "seq", a.Seq, "expect", a.Expect)
		case ActRestart:
			l.s.ctr.restarts.Inc()
		}
	}
	if end := l.pendingEnd; end != 0 {
		l.pendingEnd = 0
		l.do(l.st.EndReplay(end))
	}
}

func (l *loop) apply(seq uint64, payload []byte) {
	err := l.s.applier.ApplyPayload(payload)
	switch {
	case err == nil:
		now := time.Now()
		l.lastEvent = now
		l.s.ctr.lastSeq.Set(float64(seq))
		l.s.ctr.lastEvent.Set(float64(now.UnixNano()) / 1e9)
		if l.lagOf != nil {
			if ts := l.lagOf.Batch().TS; ts > 0 {
				l.s.ctr.lag.Observe(float64(now.UnixNano())/1e9 - ts)
			}
		}
	case errors.Is(err, ErrMalformedBatch):
		l.s.applier.Clear()
		l.malformed++
		l.s.ctr.clear(ClearMalformedBatch).Inc()
		l.s.log.Warn("stream cleared", "reason", ClearMalformedBatch, "seq", seq, "err", err)
	case errors.Is(err, ErrRankMismatch):
		// Dropped and counted by the applier; the index is still valid.
	default:
		l.s.log.Warn("apply batch", "seq", seq, "err", err)
	}
}

func (l *loop) clear(a Action) {
	l.s.applier.Clear()
	l.s.ctr.clear(a.Reason).Inc()
	if a.Reason == ClearHistoryLost {
		l.s.ctr.historyLost.Inc()
	}
	st := l.st.State()
	reason := string(a.Reason)
	if a.Cause != "" {
		reason += "/" + string(a.Cause)
	}
	l.s.log.Warn("stream cleared", "reason", reason, "seq", st.LastSeq, "expect", st.Expect)
}

func (l *loop) startReplay(from uint64) {
	l.closeReplay()
	l.resetPoller()
	now := time.Now()
	dealer := goczmq.NewSock(goczmq.Dealer, goczmq.SockSetRcvhwm(0), goczmq.SockSetLinger(0))
	l.rp = &replaySession{dealer: dealer, from: from, started: now, last: now}
	req := replayRequest(from)
	err := dealer.Connect(l.s.sc.ReplayEndpoint)
	if err == nil {
		err = dealer.SendFrame(req[0], goczmq.FlagMore|goczmq.FlagDontWait)
	}
	if err == nil {
		err = dealer.SendFrame(req[1], goczmq.FlagDontWait)
	}
	if err != nil {
		l.s.log.Warn("replay request failed", "seq", from, "err", err)
		l.pendingEnd = EndFailed
		return
	}
	l.s.log.Debug("replay requested", "seq", from)
}

func (l *loop) endReplay(a Action) {
	from := uint64(0)
	if l.rp != nil {
		from = l.rp.from
	}
	l.closeReplay()
	l.s.ctr.replay(a.Outcome).Inc()
	switch a.Outcome {
	case ReplayLost:
		l.s.log.Warn("replay lost", "reason", a.Cause, "seq", from)
	case ReplayMismatch:
		l.s.log.Warn("reconnect check failed: publisher restarted", "reason", a.Cause, "seq", from)
	}
}

func (l *loop) closeReplay() {
	if l.rp == nil {
		return
	}
	l.resetPoller()
	l.rp.dealer.Destroy()
	l.rp = nil
}

// resetPoller drops the poller so the next round rebuilds it for the current socket set.
func (l *loop) resetPoller() {
	if l.poller != nil {
		l.poller.Destroy()
		l.poller = nil
	}
}

// streamCounters are the Metrics children of one stream, resolved once.
type streamCounters struct {
	m                                       *Metrics
	worker                                  string
	gaps, restarts, reconnects, historyLost prometheus.Counter
	lastSeq, lastEvent                      prometheus.Gauge
	lag                                     prometheus.Observer
}

func newStreamCounters(m *Metrics, worker string) streamCounters {
	return streamCounters{
		m: m, worker: worker,
		gaps:        m.Gaps.WithLabelValues(worker),
		restarts:    m.Restarts.WithLabelValues(worker),
		reconnects:  m.Reconnects.WithLabelValues(worker),
		historyLost: m.HistoryLost.WithLabelValues(worker),
		lastSeq:     m.LastSeq.WithLabelValues(worker),
		lastEvent:   m.LastEventUnix.WithLabelValues(worker),
		lag:         m.EventLagSecond,
	}
}

// The label values below come from closed sets of constants, so these lookups stay bounded.
func (c streamCounters) dropped(r DropReason) prometheus.Counter {
	return c.m.DroppedFrames.WithLabelValues(c.worker, string(r))
}
func (c streamCounters) clear(r ClearReason) prometheus.Counter {
	return c.m.Clears.WithLabelValues(c.worker, string(r))
}
func (c streamCounters) replay(o ReplayOutcome) prometheus.Counter {
	return c.m.Replays.WithLabelValues(c.worker, string(o))
}
