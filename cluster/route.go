package cluster

import (
	"time"

	"context"
	"fmt"
	"strconv"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
)

// arrive routes request i through the server's own pipeline (route.Router.Decide) and hands
// it to the chosen engine.
func (c *Cluster) arrive(i int) {
	r, st := &c.reqs[i], &c.state[i]
	if c.opts.Prompt != nil {
		st.prompt = c.opts.Prompt(r)
	} else {
		st.prompt = c.cfg.Vocab.AppendPrompt(make([]uint32, 0, r.InputTokens), r)
	}
	if r.OutputTokens > 0 {
		st.output = c.cfg.Vocab.AppendOutput(make([]uint32, 0, r.OutputTokens), r)
	}
	req := route.Request{Endpoint: route.EndpointCompletions, Tokens: st.prompt, Session: SessionID(r.Session)}
	if c.opts.Model != nil {
		req.Model = c.opts.Model(r)
		st.lora = c.adapters[req.Model]
	}
	if c.opts.Subset != nil {
		req.Subset = c.opts.Subset(r)
		req.HasSubset = req.Subset != nil
	}
	out, err := c.router.Decide(context.Background(), &req)
	if c.opts.Trace != nil {
		c.opts.Trace(Op{Kind: OpDecide, At: c.now, Index: i, Tokens: st.prompt, Model: req.Model, Subset: req.Subset,
			Session: req.Session, Record: out.Record(), Err: err})
	}
	if err != nil {
		c.fail(i, err)
		return
	}
	st.ticket = out.Ticket
	c.record(i, &out)
	switch out.Route {
	case policy.RouteDecode:
		c.toEngine(pendingLeg{i: int32(i), eng: c.byID[out.Decode.ID]})
		return
	case policy.RoutePrefillLocal:
		c.toEngine(pendingLeg{i: int32(i), eng: c.byID[out.Prefill.ID]}) // the prefill engine decodes too
		return
	}
	// A remote prefill, or a handoff: the prefill leg runs on out.Prefill (a prefill engine, or
	// the decode engine holding the prefix, whose own cache and steps it uses), then the
	// decoder pulls the KV it lacks.
	st.decode, st.leg = c.byID[out.Decode.ID], true
	c.rep.TransferTokens += int64(len(st.prompt))
	if out.Route == policy.RouteHandoff {
		c.rep.Handoffs++
	}
	c.toEngine(pendingLeg{i: int32(i), eng: c.byID[out.Prefill.ID], prefill: true})
}

// toEngine hands a request leg to its engine after Config.RequestOverhead (at once without).
func (c *Cluster) toEngine(h pendingLeg) {
	if c.cfg.RequestOverhead <= 0 {
		c.handOver(h)
		return
	}
	h.at = c.now + c.cfg.RequestOverhead
	c.hq.push(h)
}

// handOver adds a request leg to its engine's scheduler: a whole request, the prefill leg of a
// remote prefill, or its decode leg.
func (c *Cluster) handOver(h pendingLeg) {
	i, st := int(h.i), &c.state[h.i]
	if !h.prefill {
		c.addDecode(i, h.eng, h.remote)
		return
	}
	p := h.eng
	id, err := c.engines[p].e.Add(sim.Request{Prompt: st.prompt[:len(st.prompt):len(st.prompt)], MaxTokens: 1, PrefillOnly: true,
		LoRA: st.lora})
	if err != nil {
		c.fail(i, fmt.Errorf("cluster: add request %d to %s: %w", i, c.engines[p].id, err))
		return
	}
	c.engines[p].reqs[id] = int32(i)
	c.kick(p)
}

func (c *Cluster) record(i int, out *route.Outcome) {
	c.rep.Decisions[i] = out.Record()
	res := c.state[i].res
	res.Route, res.Reason = c.rep.Decisions[i].Route, c.rep.Decisions[i].Reason
}

// The answer's events go to the request's ticket as extproc reports what it sees of a
// response, with the cluster's virtual clock: the ticket releases the bookings and teaches the
// router (route.Ticket). Each is traced for the replay of the golden test.

// firstToken: request i's first output token arrived.
func (c *Cluster) firstToken(i int32) {
	st := &c.state[i]
	st.ticket.FirstToken(c.clock(), true)
	c.trace(OpFirstToken, i, 0)
}

// prefillDone: remote request i's prefill leg ended, as the sidecar's response headers report
// it; the prefill worker is free now, whatever queue the decode side holds the request in.
func (c *Cluster) prefillDone(i int32) {
	c.state[i].ticket.PrefillDone()
	c.trace(OpPrefillDone, i, 0)
}

// finished: request i's answer completed with its n output tokens.
func (c *Cluster) finished(i int32) {
	st := &c.state[i]
	st.ticket.Finish(c.clock(), st.n)
	c.trace(OpRelease, i, st.n)
}

// fail ends request i with an error and releases whatever it booked.
func (c *Cluster) fail(i int, err error) {
	st := &c.state[i]
	st.res.Err = err.Error()
	st.prompt, st.output = nil, nil
	st.ticket.Cancel()
	c.trace(OpRelease, int32(i), 0)
	c.completed()
}

func (c *Cluster) trace(kind OpKind, i int32, output int) {
	if c.opts.Trace != nil && c.state[i].ticket != nil {
		c.opts.Trace(Op{Kind: kind, At: c.now, Index: int(i), Booking: c.state[i].ticket.BookingID(), Output: output})
	}
}

// clock is the cluster's virtual now on the router's clock.
func (c *Cluster) clock() time.Time { return Epoch.Add(c.now) }

func (c *Cluster) completed() {
	c.done++
	if c.opts.Progress != nil && (c.done%256 == 0 || c.done == len(c.reqs)) {
		c.opts.Progress(c.done, len(c.reqs))
	}
}

// addDecode queues request i on decode engine d: a whole request (bypass) or, after the
// remote prefill, one whose KV arrives by transfer.
func (c *Cluster) addDecode(i int, d int32, remote bool) {
	st := &c.state[i]
	st.decode, st.whole = d, !remote
	out := st.output
	req := sim.Request{Prompt: st.prompt[:len(st.prompt):len(st.prompt)], MaxTokens: max(c.reqs[i].OutputTokens, 1), LoRA: st.lora,
		RemotePrefill: remote, Output: func(k int) uint32 {
			if k < len(out) {
				return out[k]
			}
			return 1000
		}}
	st.prompt, st.output = nil, nil
	en := c.engines[d]
	id, err := en.e.Add(req)
	if err != nil {
		c.fail(i, fmt.Errorf("cluster: add request %d to %s: %w", i, en.id, err))
		return
	}
	en.reqs[id] = int32(i)
	c.kick(d)
}

// deliver applies the outcome of a finished step of engine i at now: tokens, finished
// requests and KV events.
func (c *Cluster) deliver(i int32, res *sim.StepResult) {
	en := c.engines[i]
	for _, tok := range res.Tokens {
		// The prefill leg's own token (remote or handoff) is not the client's.
		if idx, ok := en.reqs[tok.ID]; ok && !c.state[idx].leg && (en.decode || c.state[idx].whole) {
			c.token(idx, tok.Index)
		}
	}
	for _, f := range res.Finished {
		idx, ok := en.reqs[f.ID]
		if !ok {
			continue
		}
		delete(en.reqs, f.ID)
		st := &c.state[idx]
		if st.leg {
			st.leg = false
			st.res.CachedTokens = f.CachedTokens // the prefill leg's hit
			c.prefillDone(idx)
			c.toEngine(pendingLeg{i: idx, eng: st.decode, remote: true})
			continue
		}
		if st.whole {
			st.res.CachedTokens = f.CachedTokens
		}
		st.res.E2E = st.last - st.res.Arrival
		st.res.OutputTokens = st.n
		c.finished(idx)
		c.completed()
	}
	c.publish(i, res.Events)
}

// token records output token k of request idx at now.
func (c *Cluster) token(idx int32, k int) {
	st := &c.state[idx]
	if k == 0 {
		st.res.TTFT = c.now - st.res.Arrival
		c.firstToken(idx)
	} else {
		st.res.Gaps = append(st.res.Gaps, c.now-st.last)
	}
	st.last = c.now
	st.n++
}

// publish hands an engine's KV events to the index, now or after the event delay.
func (c *Cluster) publish(i int32, evs []sim.Event) {
	en := c.engines[i]
	for k := range evs {
		ev := &evs[k]
		if c.cfg.EventDelay == 0 {
			c.apply(en, ev)
			continue
		}
		d := delivery{at: c.now + c.cfg.EventDelay, eng: i, ev: *ev}
		d.ev.Hashes, d.ev.Tokens = append([]uint64(nil), ev.Hashes...), append([]uint32(nil), ev.Tokens...)
		c.dq.push(d)
	}
}

// apply feeds one KV event to the index as kvevents would (an adapter's blocks keyed with its
// name, as vLLM's lora_name).
func (c *Cluster) apply(en *engine, ev *sim.Event) {
	id, w, ix := en.id, kvindex.WorkerID(en.id), en.index
	if c.opts.Trace != nil {
		c.opts.Trace(Op{Kind: OpEvent, At: c.now, Worker: id, Event: *ev})
	}
	switch ev.Kind {
	case sim.EventBlockStored:
		c.store = kvindex.Store{Medium: kvindex.GPU, Parent: ev.Parent, HasParent: ev.HasParent, Hashes: ev.Hashes,
			Tokens: ev.Tokens, BlockSize: c.bs, PlainBlocks: len(ev.Hashes), LoRA: c.loraNames[ev.LoRA.Name]}
		if r := ix.Store(w, &c.store); r.Skip != kvindex.SkipNone {
			c.rep.IndexSkips++
		}
	case sim.EventBlockRemoved:
		ix.Remove(w, kvindex.GPU, ev.Hashes)
	case sim.EventAllBlocksCleared:
		ix.ClearWorker(w)
	}
}

// finish fills the report's totals.
func (c *Cluster) finish() *Report {
	rep := c.rep
	if c.cfg.Shadow != nil {
		st := c.router.ShadowStats()
		rep.Shadow = &st
	}
	if c.pcfg.Disagg.Policy == policy.SLOKind {
		rep.Feedback = c.learner.State()
		rep.RoleAdvice = c.learner.Advice(&c.pcfg, len(c.pools[0].Workers())) // the first model's fleet, as serve
	}
	first := never
	if len(c.reqs) > 0 {
		first = c.reqs[0].Arrival
		rep.Span = max(c.lastEnd-first, 0)
	}
	for _, en := range c.engines {
		s := en.e.Stats()
		rep.Steps += s.Steps
		rep.Preemptions += s.Preemptions
		rep.PrefixHitTokens += s.PrefixHits
		rep.PromptTokens += s.PrefixQueries
		if en.decode {
			rep.DecodeBusy += en.busy
		} else {
			rep.PrefillBusy += en.busy
		}
	}
	if rep.Span > 0 {
		fleets := float64(len(c.pools))
		if c.cfg.Prefill > 0 {
			rep.PrefillUtil = float64(rep.PrefillBusy) / (float64(rep.Span) * float64(c.cfg.Prefill) * fleets)
		}
		rep.DecodeUtil = float64(rep.DecodeBusy) / (float64(rep.Span) * float64(c.cfg.Decode) * fleets)
	}
	for _, p := range c.pools {
		for _, w := range p.Workers() {
			rep.ResidualLoad += w.ActivePrefillTokens + w.ActiveDecodeBlocks + w.ActiveRequests
		}
	}
	rep.Sessions = c.sessionReport()
	return rep
}

// SessionID is the session id a simulated request names ("" for session < 0: none), the
// value of extproc's session header in a replay.
func SessionID(session int64) string {
	if session < 0 {
		return ""
	}
	return "s" + strconv.FormatInt(session, 10)
}

// sessionReport counts the follow-up turns placed on the worker that holds their previous
// turn (the decode worker, or the prefill worker of a prefill_local turn).
func (c *Cluster) sessionReport() SessionReport {
	sr := SessionReport{Stats: c.router.SessionStats()}
	holder := func(r *route.Record) string {
		if r.Route == policy.RoutePrefillLocal.String() {
			return r.Prefill
		}
		return r.Decode
	}
	for i := range c.reqs {
		p := c.reqs[i].Parent
		if p < 0 || p >= len(c.reqs) {
			continue
		}
		prev, cur := holder(&c.rep.Decisions[p]), holder(&c.rep.Decisions[i])
		if prev == "" || cur == "" {
			continue // a failed turn holds nothing
		}
		sr.FollowUps++
		if prev == cur {
			sr.OnPrevious++
		}
	}
	return sr
}

func toMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
