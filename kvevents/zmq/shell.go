package kvzmq

import (
	"errors"
	"time"

	"github.com/go-zeromq/goczmq/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/kvevents"
)

// replaySession is one replay request in flight on its own DEALER (a fresh socket per replay,
// so a late reply to a timed-out request can never be mistaken for the next one).
type replaySession struct {
	dealer  *goczmq.Sock
	from    uint64
	started time.Time
	last    time.Time // last reply (or the request)
}

// streamShell is the imperative shell of one stream: it feeds the stream's machine, carries out
// its actions, and owns the stream's replay DEALER. It lives on the goroutine of the loop that
// holds it, like every socket it touches.
type streamShell struct {
	s     *Subscriber
	st    *kvevents.Stream
	rp    *replaySession
	lagOf interface{ Batch() *kvevents.Batch }
	// storedOf reports whether the last batch stored blocks (optional, as lagOf).
	storedOf interface{ StoredInLastBatch() int }
	// sizeOf reports stores refused for a block size unlike the router's, and malformed events
	// (optional).
	sizeOf interface {
		BlockSizeMismatch() error
		KeySchemeMismatch() error
		MalformedEvent() error
	}

	pendingEnd     kvevents.ReplayEnd // a replay failure noticed while executing actions, fed afterwards
	socketsChanged bool               // a DEALER was created or destroyed: the loop rebuilds its poller
	dirty          bool               // the status snapshot is stale
	lastEvent      time.Time
	lastStored     time.Time
	storedBatches  uint64
	warned         warnLimiter // per-batch warnings: at most one per warnEvery, the rest counted
	dropped        uint64
	malformed      uint64
}

func newStreamShell(s *Subscriber) *streamShell {
	sh := &streamShell{s: s, dirty: true, st: kvevents.NewStream(kvevents.StreamOptions{
		HasReplay:       s.sc.ReplayEndpoint != "",
		PendingMessages: s.cfg.PendingMessages,
		PendingBytes:    s.cfg.PendingBytes,
	})}
	sh.lagOf, _ = s.applier.(interface{ Batch() *kvevents.Batch })
	sh.storedOf, _ = s.applier.(interface{ StoredInLastBatch() int })
	sh.sizeOf, _ = s.applier.(interface {
		BlockSizeMismatch() error
		KeySchemeMismatch() error
		MalformedEvent() error
	})
	return sh
}

// live handles one live message of this stream.
func (sh *streamShell) live(frames [][]byte) {
	seq, payload, reason := kvevents.ParseLive(frames, sh.s.cfg.MaxPayloadBytes)
	if reason != "" {
		sh.drop(reason)
		return
	}
	sh.do(sh.st.Live(seq, payload))
}

// reconnect feeds a transport reconnect.
func (sh *streamShell) reconnect() {
	sh.s.ctr.reconnects.Inc()
	sh.s.log.Info("publisher reconnected", "seq", sh.st.State().LastSeq)
	sh.do(sh.st.Reconnect())
}

// publish stores the stream's snapshot if it changed.
func (sh *streamShell) publish(connected, monitored bool) {
	if !sh.dirty {
		return
	}
	sh.dirty = false
	sh.s.publish(func(ss *StreamStatus) {
		ss.Connected = connected
		ss.Monitored = monitored
		ss.LastEvent = sh.lastEvent
		ss.LastStored = sh.lastStored
		ss.StoredBatches = sh.storedBatches
		ss.Dropped = sh.dropped
		ss.MalformedClear = sh.malformed
		ss.StreamState = sh.st.State()
		ss.Clears += sh.malformed
	})
}

func (sh *streamShell) drainReplay() {
	for i := 0; i < recvBurst && sh.rp != nil && readable(sh.rp.dealer); i++ {
		frames, err := sh.rp.dealer.RecvMessage()
		if err != nil {
			return
		}
		sh.rp.last = time.Now()
		seq, payload, kind, err := kvevents.ParseReplay(frames, sh.s.cfg.MaxPayloadBytes)
		switch kind {
		case kvevents.ReplyData:
			sh.do(sh.st.ReplayBatch(seq, payload))
		case kvevents.ReplyEnd:
			sh.do(sh.st.EndReplay(kvevents.EndMarker))
		case kvevents.ReplyTooLarge:
			sh.drop(kvevents.DropTooLarge)
		default:
			sh.drop(kvevents.DropReplayMalformed)
			sh.s.log.Warn("malformed replay reply", "seq", sh.rp.from, "err", err)
			sh.do(sh.st.EndReplay(kvevents.EndMalformed))
		}
	}
}

func (sh *streamShell) checkReplayDeadline(now time.Time) {
	if sh.rp == nil {
		return
	}
	if now.Sub(sh.rp.last) >= sh.s.cfg.ReplayIdleTimeout || now.Sub(sh.rp.started) >= sh.s.cfg.ReplayTotalTimeout {
		sh.do(sh.st.EndReplay(kvevents.EndTimeout))
	}
}

func (sh *streamShell) drop(reason kvevents.DropReason) {
	sh.dropped++
	sh.dirty = true
	sh.s.ctr.dropped(reason).Inc()
}

// do carries out the machine's actions in order. A replay that fails while starting is fed back
// after the list is done (the list is reused by the machine's next call).
func (sh *streamShell) do(acts []kvevents.Action) {
	sh.dirty = true
	for _, a := range acts {
		switch a.Kind {
		case kvevents.ActApply:
			sh.apply(a.Seq, a.Payload)
		case kvevents.ActReplay:
			sh.startReplay(a.Seq)
		case kvevents.ActEndReplay:
			sh.endReplay(a)
		case kvevents.ActClear:
			sh.clear(a)
		case kvevents.ActGap:
			sh.s.ctr.gaps.Inc()
			sh.s.log.Debug("sequence gap", "seq", a.Seq, "expect", a.Expect)
		case kvevents.ActRestart:
			sh.s.ctr.restarts.Inc()
		}
	}
	if end := sh.pendingEnd; end != 0 {
		sh.pendingEnd = 0
		sh.do(sh.st.EndReplay(end))
	}
}

func (sh *streamShell) apply(seq uint64, payload []byte) {
	err := sh.s.applier.ApplyAt(seq, payload)
	switch {
	case err == nil:
		now := time.Now()
		sh.lastEvent = now
		if sh.sizeOf != nil {
			if err := sh.sizeOf.BlockSizeMismatch(); err != nil {
				sh.warn(now, "KV event block size differs from the router's", "err", err)
			}
			if err := sh.sizeOf.KeySchemeMismatch(); err != nil {
				sh.warn(now, "KV event tokens do not fit the model's speculative setting", "err", err)
			}
			if err := sh.sizeOf.MalformedEvent(); err != nil {
				sh.warn(now, "malformed KV event skipped", "err", err)
			}
		}
		if sh.storedOf != nil && sh.storedOf.StoredInLastBatch() > 0 {
			sh.lastStored = now
			sh.storedBatches++
		}
		sh.s.ctr.lastSeq.Set(float64(seq))
		sh.s.ctr.lastEvent.Set(float64(now.UnixNano()) / 1e9)
		if sh.lagOf != nil {
			if ts := sh.lagOf.Batch().TS; ts > 0 {
				sh.s.ctr.lag.Observe(float64(now.UnixNano())/1e9 - ts)
			}
		}
	case errors.Is(err, kvevents.ErrMalformedBatch):
		sh.s.applier.Clear()
		sh.malformed++
		sh.s.ctr.clear(kvevents.ClearMalformedBatch).Inc()
		sh.warn(time.Now(), "stream cleared", "reason", kvevents.ClearMalformedBatch, "seq", seq, "err", err)
	case errors.Is(err, kvevents.ErrRankMismatch):
		// Dropped and counted by the applier; the index is still valid.
	default:
		sh.warn(time.Now(), "apply batch", "seq", seq, "err", err)
	}
}

// warnEvery spaces the warnings a stream logs per batch: a publisher that sends junk on every
// step would otherwise flood the log (every batch is still counted in the metrics).
const warnEvery = 10 * time.Second

// warnLimiter lets one warning through per warnEvery and counts the ones it holds back.
type warnLimiter struct {
	last       time.Time
	suppressed int
}

// warn logs msg unless another per-batch warning was logged within warnEvery; the next one
// that is logged says how many were held back.
func (sh *streamShell) warn(now time.Time, msg string, args ...any) {
	w := &sh.warned
	if !w.last.IsZero() && now.Sub(w.last) < warnEvery {
		w.suppressed++
		return
	}
	if w.suppressed > 0 {
		args = append(args, "suppressed", w.suppressed)
	}
	w.last, w.suppressed = now, 0
	sh.s.log.Warn(msg, args...)
}

func (sh *streamShell) clear(a kvevents.Action) {
	sh.s.applier.Clear()
	sh.s.ctr.clear(a.Reason).Inc()
	if a.Reason == kvevents.ClearHistoryLost {
		sh.s.ctr.historyLost.Inc()
	}
	st := sh.st.State()
	reason := string(a.Reason)
	if a.Cause != "" {
		reason += "/" + string(a.Cause)
	}
	sh.s.log.Warn("stream cleared", "reason", reason, "seq", st.LastSeq, "expect", st.Expect)
}

// replayRcvHWM bounds the replay replies queued in the DEALER (messages of up to
// MaxPayloadBytes each); the pending buffer of the stream machine bounds what is kept after.
const replayRcvHWM = 1024

func (sh *streamShell) startReplay(from uint64) {
	sh.closeReplay()
	sh.socketsChanged = true
	now := time.Now()
	// A bounded receive queue pushes back on the publisher over TCP (a DEALER does not drop),
	// and oversized frames are refused by libzmq like on the SUB.
	dealer := goczmq.NewSock(goczmq.Dealer, goczmq.SockSetRcvhwm(replayRcvHWM), goczmq.SockSetLinger(0),
		goczmq.SockSetMaxmsgsize(maxFrameBytes(sh.s.cfg)))
	sh.rp = &replaySession{dealer: dealer, from: from, started: now, last: now}
	req := kvevents.ReplayRequest(from)
	err := dealer.Connect(sh.s.sc.ReplayEndpoint)
	if err == nil {
		err = dealer.SendFrame(req[0], goczmq.FlagMore|goczmq.FlagDontWait)
	}
	if err == nil {
		err = dealer.SendFrame(req[1], goczmq.FlagDontWait)
	}
	if err != nil {
		sh.s.log.Warn("replay request failed", "seq", from, "err", err)
		sh.pendingEnd = kvevents.EndFailed
		return
	}
	sh.s.log.Debug("replay requested", "seq", from)
}

func (sh *streamShell) endReplay(a kvevents.Action) {
	from := uint64(0)
	if sh.rp != nil {
		from = sh.rp.from
	}
	sh.closeReplay()
	sh.s.ctr.replay(a.Outcome).Inc()
	switch a.Outcome {
	case kvevents.ReplayLost:
		sh.s.log.Warn("replay lost", "reason", a.Cause, "seq", from)
	case kvevents.ReplayMismatch:
		sh.s.log.Warn("reconnect check failed: publisher restarted", "reason", a.Cause, "seq", from)
	}
}

func (sh *streamShell) closeReplay() {
	if sh.rp == nil {
		return
	}
	sh.socketsChanged = true
	sh.rp.dealer.Destroy()
	sh.rp = nil
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
func (c streamCounters) dropped(r kvevents.DropReason) prometheus.Counter {
	return c.m.DroppedFrames.WithLabelValues(c.worker, string(r))
}
func (c streamCounters) clear(r kvevents.ClearReason) prometheus.Counter {
	return c.m.Clears.WithLabelValues(c.worker, string(r))
}
func (c streamCounters) replay(o kvevents.ReplayOutcome) prometheus.Counter {
	return c.m.Replays.WithLabelValues(c.worker, string(o))
}
