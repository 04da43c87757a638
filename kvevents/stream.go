package kvevents

import (
	"fmt"

	"github.com/zeebo/xxh3"
)

// This file is the functional core of event ingestion: the per-stream sequence machine of
// vllm-kv-events.md §1.6. It is pure (no goroutines, I/O, clock, logging or metrics; an import
// test enforces it). The subscriber feeds it live messages, replayed batches, replay ends and
// transport reconnects, and carries out the Actions it returns.

// ActionKind says what the shell must do for one Action.
type ActionKind uint8

const (
	// ActApply: hand Payload (batch Seq) to the applier.
	ActApply ActionKind = iota + 1
	// ActReplay: send a replay request starting at Seq and feed the replies back.
	ActReplay
	// ActEndReplay: the replay is over (Outcome, Cause); stop reading its replies.
	ActEndReplay
	// ActClear: clear the stream's index (Reason).
	ActClear
	// ActGap: a sequence gap was detected (Expect, Seq); informational.
	ActGap
	// ActRestart: the live sequence went back (Expect, Seq); informational.
	ActRestart
)

// ClearReason says why a stream's index was cleared; it is the `reason` label of the clears
// counter.
type ClearReason string

const (
	ClearRestart           ClearReason = "restart"             // seq went back (§1.6 rule 5)
	ClearHistoryLost       ClearReason = "history_lost"        // a gap could not be replayed
	ClearReconnectMismatch ClearReason = "reconnect_mismatch"  // reconnect check: digest differs or absent
	ClearGapMismatch       ClearReason = "gap_mismatch"        // gap check: the batch before the gap differs or is absent
	ClearReconnectNoReplay ClearReason = "reconnect_no_replay" // reconnect with no replay endpoint
	ClearMalformedBatch    ClearReason = "malformed_batch"     // batch-level decode failure (§2.4 rule 6); set by the shell
	ClearRemoved           ClearReason = "removed"             // the stream left discovery; set by the shell
	ClearResumeMismatch    ClearReason = "resume_mismatch"     // resume check: the batch a snapshot ends at differs or is gone
)

// ReplayOutcome is the result of one replay; it is the `outcome` label of the replays counter.
type ReplayOutcome string

const (
	ReplaySuccess  ReplayOutcome = "success"
	ReplayLost     ReplayOutcome = "lost"
	ReplayMismatch ReplayOutcome = "mismatch" // reconnect or gap check failed: the publisher restarted
)

// LostCause says why a replay was lost (for logs).
type LostCause string

const (
	CauseFirstLate  LostCause = "first_seq_late"     // the reply started after the requested seq
	CauseHole       LostCause = "hole"               // a hole inside the replayed seqs
	CauseShort      LostCause = "short"              // the reply ended before reaching the live stream
	CauseTimeout    LostCause = "timeout"            // no end marker in time
	CauseMalformed  LostCause = "malformed"          // a reply message had a bad shape
	CauseFailed     LostCause = "failed"             // the request could not be sent
	CauseOverflow   LostCause = "overflow"           // the pending buffer overflowed
	CauseNoEndpoint LostCause = "no_replay_endpoint" // the stream has no replay endpoint
	CauseDigest     LostCause = "digest_mismatch"    // reconnect check: the payload at last.seq differs or is absent
)

// ReplayEnd is how a replay reply stream ended, as seen by the shell.
type ReplayEnd uint8

const (
	EndMarker    ReplayEnd = iota + 1 // END seq or empty payload received
	EndTimeout                        // idle or total timeout
	EndMalformed                      // a reply message was malformed
	EndFailed                         // the request could not be sent
)

func (e ReplayEnd) cause() LostCause {
	switch e {
	case EndTimeout:
		return CauseTimeout
	case EndMalformed:
		return CauseMalformed
	case EndFailed:
		return CauseFailed
	}
	return ""
}

// Action is one instruction from the Stream to its shell.
type Action struct {
	Kind    ActionKind
	Seq     uint64 // Apply: batch seq; Replay: start seq; Gap, Restart: the live seq seen
	Expect  uint64 // Gap, Restart: the seq that was expected
	Payload []byte // Apply: the batch payload (owned by the caller until the next Stream call)
	Reason  ClearReason
	Outcome ReplayOutcome
	Cause   LostCause // EndReplay with Outcome != success, and Clear with ClearHistoryLost
}

func (a Action) String() string {
	switch a.Kind {
	case ActApply:
		return fmt.Sprintf("apply %d %s", a.Seq, a.Payload)
	case ActReplay:
		return fmt.Sprintf("replay from=%d", a.Seq)
	case ActEndReplay:
		if a.Cause != "" {
			return fmt.Sprintf("end-replay %s cause=%s", a.Outcome, a.Cause)
		}
		return fmt.Sprintf("end-replay %s", a.Outcome)
	case ActClear:
		if a.Cause != "" {
			return fmt.Sprintf("clear %s cause=%s", a.Reason, a.Cause)
		}
		return fmt.Sprintf("clear %s", a.Reason)
	case ActGap:
		return fmt.Sprintf("gap expect=%d seq=%d", a.Expect, a.Seq)
	case ActRestart:
		return fmt.Sprintf("restart expect=%d seq=%d", a.Expect, a.Seq)
	}
	return fmt.Sprintf("action(%d)", a.Kind)
}

// Default pending-buffer bounds while a replay is in progress (§1.6 rule 1, as in Dynamo).
const (
	DefaultPendingMessages = 4096
	DefaultPendingBytes    = 32 << 20
)

// StreamOptions configures a Stream. Zero bounds take the defaults.
type StreamOptions struct {
	HasReplay       bool // the stream has a replay endpoint
	PendingMessages int  // max messages held (live + replayed) while a replay is in progress
	PendingBytes    int  // max payload bytes held while a replay is in progress
}

// StreamCounters are cumulative per-stream counts, for the admin snapshot.
type StreamCounters struct {
	Gaps        uint64 // gaps detected (§1.6 rule 4, and mid-stream joins)
	Restarts    uint64 // seq went back, or a reconnect check found another publisher
	Reconnects  uint64 // transport reconnects fed in
	Replays     uint64 // replay requests started
	ReplaysLost uint64 // replays that ended lost
	HistoryLost uint64 // clears because history could not be recovered
	Clears      uint64 // clears issued by the machine (any reason)
}

// StreamState is a copy of a Stream's position.
type StreamState struct {
	Expect    uint64 // next expected seq, valid when ExpectSet
	ExpectSet bool
	LastSeq   uint64 // seq of the last applied batch, valid when HasLast
	HasLast   bool
	Replaying bool
	Pending   int // messages held while replaying
	StreamCounters
}

type heldMsg struct {
	seq     uint64
	payload []byte
	back    bool // live only: seq <= the previous live seq (the live stream went back)
}

// replayState is the bookkeeping of the replay in progress.
type replayState struct {
	active    bool
	from      uint64 // requested start seq
	next      uint64 // next seq that keeps the replay contiguous
	lost      bool   // a hole was seen; the clear has been emitted
	cause     LostCause
	verify    bool        // reconnect or gap check: the first reply must be last.seq with last's digest
	checkFail ClearReason // the clear reason if that check fails
	discard   bool        // reconnect check failed; ignore the rest of the reply
	reconnect bool        // a reconnect arrived during this replay; check it afterwards
	warm      bool        // the warm-up replay of a new stream: an early hole is not lost history
	run       []heldMsg   // contiguous replayed run after the last hole (held, not yet applied)
	live      []heldMsg   // live messages buffered during the replay
	bytes     int         // payload bytes in run and live
}

// Stream is the sequence machine of one (worker, dp_rank) stream. It is not safe for concurrent
// use: its subscriber goroutine owns it. The []Action returned by each method is reused by the
// next call.
type Stream struct {
	opts      StreamOptions
	expect    uint64
	expectSet bool
	lastSeq   uint64
	lastHash  uint64 // XXH3-64 of the last applied payload
	hasLast   bool
	lastLive  uint64 // seq of the last live message received
	liveSeen  bool
	// resumeLive: resumed without a replay endpoint; the first live message must not be
	// behind the snapshot's position, else the publisher restarted since (Resume).
	resumeLive bool
	rp         replayState
	counters   StreamCounters
	acts       []Action
}

// NewStream returns a machine in the UNSET state.
func NewStream(opts StreamOptions) *Stream {
	if opts.PendingMessages <= 0 {
		opts.PendingMessages = DefaultPendingMessages
	}
	if opts.PendingBytes <= 0 {
		opts.PendingBytes = DefaultPendingBytes
	}
	return &Stream{opts: opts}
}

// State returns a copy of the machine's position and counters.
func (st *Stream) State() StreamState {
	return StreamState{
		Expect: st.expect, ExpectSet: st.expectSet,
		LastSeq: st.lastSeq, HasLast: st.hasLast,
		Replaying: st.rp.active, Pending: len(st.rp.live) + len(st.rp.run),
		StreamCounters: st.counters,
	}
}

// Live feeds one live message (§1.6 rules 1–5). The Stream keeps payload while it is buffered.
//
// Rule 5 needs the live stream itself to go back (seq <= the previous live seq): a replay can
// run ahead of live delivery, and live messages it already covered may still arrive after it
// ended with seq < expect; those are overlap and are skipped.
func (st *Stream) Live(seq uint64, payload []byte) []Action {
	st.acts = st.acts[:0]
	back := st.liveSeen && seq <= st.lastLive
	if st.resumeLive {
		st.resumeLive = false
		back = st.expectSet && seq < st.expect
	}
	st.lastLive, st.liveSeen = seq, true
	if st.rp.active {
		st.bufferLive(seq, payload, back)
		return st.acts
	}
	st.step(seq, payload, back)
	return st.acts
}

// ReplayBatch feeds one replayed batch of the replay in progress; it is ignored when no replay
// is in progress.
func (st *Stream) ReplayBatch(seq uint64, payload []byte) []Action {
	st.acts = st.acts[:0]
	rp := &st.rp
	if !rp.active || rp.discard {
		return st.acts
	}
	if rp.verify {
		st.verifyFirst(seq, payload)
		return st.acts
	}
	if seq < rp.next {
		return st.acts // overlap with what is already applied or held
	}
	if seq > rp.next {
		st.replayHole(seq)
	}
	rp.next = seq + 1
	if !rp.lost {
		st.apply(seq, payload)
		return st.acts
	}
	rp.run = append(rp.run, heldMsg{seq: seq, payload: payload})
	rp.bytes += len(payload)
	if st.overBudget() {
		st.finish(CauseOverflow)
	}
	return st.acts
}

// EndReplay feeds the end of the replay in progress: the end marker, a timeout, a malformed
// reply or a failed request. It decides the outcome and resumes live processing.
func (st *Stream) EndReplay(how ReplayEnd) []Action {
	st.acts = st.acts[:0]
	if st.rp.active {
		st.finish(how.cause())
	}
	return st.acts
}

// Warm asks a new stream's publisher for every batch it still retains (a replay from seq 0),
// so the index holds what the engine already caches before the engine publishes again: the
// router starts, or restarts, warm. vLLM keeps only its last buffer_steps batches, so the
// reply may start late; that is not lost history (nothing was applied yet), and a store whose
// parent fell out of the buffer is skipped by the index. Only a stream with a replay endpoint
// that has seen nothing yet warms up; otherwise Warm does nothing.
func (st *Stream) Warm() []Action {
	st.acts = st.acts[:0]
	if st.opts.HasReplay && !st.expectSet && !st.hasLast && !st.rp.active {
		st.startReplay(0)
		st.rp.warm = true
	}
	return st.acts
}

// Resume continues a stream whose index entries were copied from a peer's snapshot that ends
// at batch seq, whose payload has XXH3-64 digest (kvindex.Position), instead of warming up
// from seq 0. With a replay endpoint it asks for a replay from seq and checks that the first
// reply is that very batch: then the batches after it are applied from the replay and the live
// stream, each exactly once (a live message the replay already covered is skipped, as after
// any gap). If the batch differs or the engine no longer retains it (it restarted, or the
// snapshot is older than its buffer_steps), the stream is cleared (ClearResumeMismatch) and
// warms up from seq 0 like a new one. Without a replay endpoint nothing can be checked: the
// first live message continues the stream if it is the next one, a later one is a gap (history
// lost: clear), an earlier one a restart (clear). Resume does nothing on a stream that has
// already seen something.
func (st *Stream) Resume(seq, digest uint64) []Action {
	st.acts = st.acts[:0]
	if st.expectSet || st.hasLast || st.rp.active || st.liveSeen {
		return st.acts
	}
	st.expect, st.expectSet = seq+1, true
	st.lastSeq, st.lastHash, st.hasLast = seq, digest, true
	if st.opts.HasReplay {
		st.startCheckedReplay(ClearResumeMismatch)
	} else {
		st.resumeLive = true
	}
	return st.acts
}

// Reconnect feeds a transport reconnect of the live socket (§1.6 "Reconnect").
func (st *Stream) Reconnect() []Action {
	st.acts = st.acts[:0]
	st.counters.Reconnects++
	st.reconnect()
	return st.acts
}

func (st *Stream) reconnect() {
	switch {
	case !st.opts.HasReplay:
		if st.expectSet {
			st.clear(ClearReconnectNoReplay, "")
			st.unset()
		}
	case st.rp.active:
		st.rp.reconnect = true
	case st.hasLast:
		st.startCheckedReplay(ClearReconnectMismatch)
	}
}

// step applies rules 2–5 to a live message when no replay is in progress; back says the live
// stream went back at this message.
func (st *Stream) step(seq uint64, payload []byte, back bool) {
	switch {
	case !st.expectSet:
		if seq == 0 {
			st.apply(seq, payload)
			return
		}
		st.counters.Gaps++
		st.emit(Action{Kind: ActGap, Seq: seq})
		if !st.opts.HasReplay {
			// A join (startup, or after a clear) without replay: nothing was applied since the
			// stream started or was last cleared, so a clear would drop nothing. A publisher
			// that numbers from 1 (llm-d's inference simulator) joins this way on every start.
			st.apply(seq, payload)
			return
		}
		st.recover(seq, payload, 0)
	case seq == st.expect:
		st.apply(seq, payload)
	case seq > st.expect:
		st.counters.Gaps++
		st.emit(Action{Kind: ActGap, Expect: st.expect, Seq: seq})
		st.recover(seq, payload, st.expect)
	case !back:
		// seq < expect, but the live stream moved forward: a replay already applied it.
	default:
		st.counters.Restarts++
		st.emit(Action{Kind: ActRestart, Expect: st.expect, Seq: seq})
		st.clear(ClearRestart, "")
		st.unset()
		st.step(seq, payload, false)
	}
}

// recover handles a gap before seq: replay from `from`, or, with no replay endpoint, clear and
// continue at seq.
func (st *Stream) recover(seq uint64, payload []byte, from uint64) {
	if !st.opts.HasReplay {
		st.counters.HistoryLost++
		st.clear(ClearHistoryLost, CauseNoEndpoint)
		st.apply(seq, payload)
		return
	}
	if st.hasLast {
		// A publisher that restarted on the same connection (no reconnect, its seq back at 0 and
		// already past ours) answers a replay from `from` with another history: the batch we
		// applied last must come first, unchanged, or everything we hold from it is stale.
		st.startCheckedReplay(ClearGapMismatch)
	} else {
		st.startReplay(from)
	}
	st.bufferLive(seq, payload, false)
}

// startCheckedReplay replays from the last applied batch, which the first reply must repeat
// with the same digest; otherwise the stream is cleared with reason fail and bootstraps.
func (st *Stream) startCheckedReplay(fail ClearReason) {
	st.startReplay(st.lastSeq)
	st.rp.verify, st.rp.checkFail = true, fail
}

func (st *Stream) startReplay(from uint64) {
	st.counters.Replays++
	st.rp = replayState{active: true, from: from, next: from, run: st.rp.run[:0], live: st.rp.live[:0]}
	st.emit(Action{Kind: ActReplay, Seq: from})
}

func (st *Stream) bufferLive(seq uint64, payload []byte, back bool) {
	st.rp.live = append(st.rp.live, heldMsg{seq, payload, back})
	st.rp.bytes += len(payload)
	if st.overBudget() {
		st.finish(CauseOverflow)
	}
}

func (st *Stream) overBudget() bool {
	return len(st.rp.live)+len(st.rp.run) > st.opts.PendingMessages || st.rp.bytes > st.opts.PendingBytes
}

// verifyFirst checks the first reply of a reconnect or gap check against the last applied batch.
func (st *Stream) verifyFirst(seq uint64, payload []byte) {
	st.rp.verify = false
	if seq == st.lastSeq && xxh3.Hash(payload) == st.lastHash {
		st.rp.from = st.expect
		st.rp.next = st.expect
		return
	}
	st.verifyFailed()
}

func (st *Stream) verifyFailed() {
	st.rp.verify = false
	st.rp.discard = true
	st.counters.Restarts++
	st.clear(st.rp.checkFail, CauseDigest)
	st.unset()
}

// replayHole records a hole before seq: the first one clears the stream, later ones restart
// the held run.
func (st *Stream) replayHole(seq uint64) {
	rp := &st.rp
	if rp.warm && rp.next == rp.from {
		// The retained batches start after seq 0: nothing before them was ever applied.
		rp.from = seq
		return
	}
	if !rp.lost {
		rp.lost = true
		rp.cause = CauseHole
		if seq > rp.from && rp.next == rp.from {
			rp.cause = CauseFirstLate
		}
		st.counters.HistoryLost++
		st.clear(ClearHistoryLost, rp.cause)
	}
	for _, m := range rp.run {
		rp.bytes -= len(m.payload)
	}
	rp.run = rp.run[:0]
}

// finish ends the replay in progress with cause ("" = the end marker arrived), decides the
// outcome, and re-feeds the buffered live messages.
//
// The outcome is the spec's condition alone: success iff the replay started at the requested
// seq and stayed contiguous up to at least the first buffered live seq - 1. A timeout, a
// malformed reply or an overflow after that point loses nothing, so it is still a success;
// before it, the replayed prefix (already applied) cannot reach the live stream, so the run
// that does is the buffered live messages alone (or the run held after a hole).
func (st *Stream) finish(cause LostCause) {
	rp := &st.rp
	rp.active = false
	// A resume whose check failed falls back to a new stream's warm-up (after the refeed).
	defer st.rewarmIf(rp.checkFail == ClearResumeMismatch)
	if rp.verify {
		if rp.checkFail == ClearGapMismatch && cause != "" {
			// A gap replay that failed before the checked batch arrived (timeout, malformed
			// reply, overflow) proves no restart, and replayed nothing: the history is lost,
			// as for any replay.
			rp.verify = false
			st.lostOutcome(cause)
			st.refeed()
			return
		}
		st.verifyFailed() // the reply ended before the checked batch: absent
	}
	switch {
	case rp.discard:
		st.emit(Action{Kind: ActEndReplay, Outcome: ReplayMismatch, Cause: CauseDigest})
	case !rp.lost && (len(rp.live) == 0 || rp.next >= rp.live[0].seq):
		st.emit(Action{Kind: ActEndReplay, Outcome: ReplaySuccess})
	default:
		st.lostOutcome(cause)
	}
	st.refeed()
}

// rewarmIf starts a warm-up replay when cond holds and the stream is back to UNSET with no
// replay in progress.
func (st *Stream) rewarmIf(cond bool) {
	if cond && !st.expectSet && !st.hasLast && !st.rp.active {
		st.startReplay(0)
		st.rp.warm = true
	}
}

// lostOutcome clears the stream (once per replay), then applies the longest contiguous run of
// replayed and buffered batches that reaches the live stream.
func (st *Stream) lostOutcome(cause LostCause) {
	rp := &st.rp
	if cause == "" {
		cause = rp.cause
		if cause == "" {
			cause = CauseShort
		}
	}
	st.counters.ReplaysLost++
	st.emit(Action{Kind: ActEndReplay, Outcome: ReplayLost, Cause: cause})
	if !rp.lost {
		rp.lost = true
		st.counters.HistoryLost++
		st.clear(ClearHistoryLost, cause)
	}
	n := len(rp.run)
	if n > 0 && (len(rp.live) == 0 || rp.run[n-1].seq+1 >= rp.live[0].seq) {
		for _, m := range rp.run {
			st.apply(m.seq, m.payload)
		}
	} else if len(rp.live) > 0 {
		st.expect, st.expectSet = rp.live[0].seq, true
	}
}

// refeed passes the messages buffered during the replay through the live rules; step skips
// those the replay already covered, and a message at which the live stream went back is a real
// restart.
func (st *Stream) refeed() {
	rp := &st.rp
	buf := rp.live
	pendingReconnect := rp.reconnect
	for i := range rp.run {
		rp.run[i] = heldMsg{}
	}
	*rp = replayState{run: rp.run[:0]}
	for i, m := range buf {
		if rp.active {
			st.bufferLive(m.seq, m.payload, m.back)
		} else {
			st.step(m.seq, m.payload, m.back)
		}
		buf[i] = heldMsg{}
	}
	if rp.live == nil {
		rp.live = buf[:0]
	}
	if pendingReconnect {
		st.reconnect()
	}
}

func (st *Stream) apply(seq uint64, payload []byte) {
	st.expect, st.expectSet = seq+1, true
	st.lastSeq, st.lastHash, st.hasLast = seq, xxh3.Hash(payload), true
	st.emit(Action{Kind: ActApply, Seq: seq, Payload: payload})
}

func (st *Stream) clear(reason ClearReason, cause LostCause) {
	st.counters.Clears++
	st.emit(Action{Kind: ActClear, Reason: reason, Cause: cause})
}

func (st *Stream) unset() {
	st.expect, st.expectSet = 0, false
	st.hasLast = false
}

func (st *Stream) emit(a Action) { st.acts = append(st.acts, a) }
