package cluster

import (
	"fmt"
	"strconv"
	"time"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/sim"
)

// arrive routes request i exactly as extproc does (conditional-disagg.md §3) and hands it to the
// chosen engine.
func (c *Cluster) arrive(i int) {
	r, st := &c.reqs[i], &c.state[i]
	st.prompt = c.cfg.Vocab.AppendPrompt(make([]uint32, 0, r.InputTokens), r)
	if r.OutputTokens > 0 {
		st.output = c.cfg.Vocab.AppendOutput(make([]uint32, 0, r.OutputTokens), r)
	}
	c.keys = kvindex.AppendKeys(c.keys[:0], 0, st.prompt, c.bs, nil)
	c.index.Overlap(c.keys, &c.ov)
	c.pool.Snapshot(&c.snap, pool.Request{Keys: c.keys, ISL: len(st.prompt)})
	now := epoch.Add(c.now)
	in := policy.Input{Now: now, ISL: len(st.prompt)}
	c.sigD = c.signals(c.sigD[:0], c.snap.Decode, now)
	c.sigP = c.signals(c.sigP[:0], c.snap.Prefill, now)
	in.Decode, in.Prefill = c.sigD, c.sigP
	dec := policy.Decide(&c.pcfg, &in, &c.snap, c.rng)
	st.booking = "r" + strconv.Itoa(i)
	if err := c.commit(st.booking, &in, &dec); err != nil {
		c.fail(i, err)
		return
	}
	c.record(i, &dec)
	if dec.Route == policy.RouteDecode {
		c.addDecode(i, c.byID[dec.DecodeID], false)
		return
	}
	st.decode = c.byID[dec.DecodeID]
	c.rep.TransferTokens += int64(len(st.prompt))
	p := c.byID[dec.PrefillID]
	id, err := c.engines[p].e.Add(sim.Request{Prompt: st.prompt[:len(st.prompt):len(st.prompt)], MaxTokens: 1, PrefillOnly: true})
	if err != nil {
		c.fail(i, fmt.Errorf("cluster: add request %d to %s: %w", i, c.engines[p].id, err))
		return
	}
	c.engines[p].reqs[id] = int32(i)
	c.kick(p)
}

// signals describes loads (in snapshot order) from the overlaps; streams are always live.
func (c *Cluster) signals(dst []policy.Signal, loads []pool.WorkerLoad, now time.Time) []policy.Signal {
	for i := range loads {
		s := policy.Signal{Worker: loads[i].ID, Stream: policy.Stream{Connected: true, LastStored: now}}
		for j := range c.ov.Workers {
			if string(c.ov.Workers[j].Worker) == loads[i].ID {
				s.GPU, s.Host, s.Disk = c.ov.Workers[j].GPU, c.ov.Workers[j].CPU, c.ov.Workers[j].Disk
				break
			}
		}
		dst = append(dst, s)
	}
	return dst
}

// commit books dec (§3 step 9), demoting a denied bypass to the remote path once, as extproc.
func (c *Cluster) commit(id string, in *policy.Input, dec *policy.Decision) error {
	if !dec.Routable() {
		return fmt.Errorf("cluster: no eligible worker: reason %s", dec.Reason)
	}
	err := c.pool.Book(dec.Booking(id, c.keys))
	if err != nil && dec.Route == policy.RouteDecode {
		reason := policy.DemoteReason(err)
		policy.Demote(&c.pcfg, in, &c.snap, c.rng, dec, reason)
		if !dec.Routable() {
			return fmt.Errorf("cluster: commit demoted to %s: %w", reason, err)
		}
		err = c.pool.Book(dec.Booking(id, c.keys))
	}
	if err != nil {
		return fmt.Errorf("cluster: book %s on decode=%s prefill=%s: %w", id, dec.DecodeID, dec.PrefillID, err)
	}
	return nil
}

func (c *Cluster) record(i int, dec *policy.Decision) {
	d := &c.rep.Decisions[i]
	d.Route, d.Reason, d.ISL = dec.Route.String(), dec.Reason.String(), dec.Inputs.ISL
	d.Decode = dec.DecodeID
	if dec.Route == policy.RoutePrefill {
		d.Prefill = dec.PrefillID
	}
	if dec.Inputs.PreviewDecode != "" {
		d.Previewed, d.Eff, d.Ratio = true, dec.Inputs.Eff, dec.Inputs.Ratio
	}
	res := c.state[i].res
	res.Route, res.Reason = d.Route, d.Reason
}

// fail ends request i with an error and releases whatever it booked.
func (c *Cluster) fail(i int, err error) {
	st := &c.state[i]
	st.res.Err = err.Error()
	st.prompt, st.output = nil, nil
	c.pool.Release(st.booking)
	c.completed()
}

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
	st.decode = d
	out := st.output
	req := sim.Request{Prompt: st.prompt[:len(st.prompt):len(st.prompt)], MaxTokens: max(c.reqs[i].OutputTokens, 1),
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
	if en.decode {
		for _, tok := range res.Tokens {
			c.token(en.reqs[tok.ID], tok.Index)
		}
	}
	for _, f := range res.Finished {
		idx, ok := en.reqs[f.ID]
		if !ok {
			continue
		}
		delete(en.reqs, f.ID)
		st := &c.state[idx]
		if !en.decode {
			st.res.CachedTokens = f.CachedTokens // the remote prefill's hit
			c.addDecode(int(idx), st.decode, true)
			continue
		}
		if st.res.Route == "decode" {
			st.res.CachedTokens = f.CachedTokens
		}
		st.res.E2E = st.last - st.res.Arrival
		st.res.OutputTokens = st.n
		c.pool.Release(st.booking)
		c.completed()
	}
	c.publish(i, res.Events)
}

// token records output token k of request idx at now.
func (c *Cluster) token(idx int32, k int) {
	st := &c.state[idx]
	if k == 0 {
		st.res.TTFT = c.now - st.res.Arrival
		c.pool.ReleasePrefill(st.booking)
	} else {
		st.res.Gaps = append(st.res.Gaps, c.now-st.last)
	}
	st.last = c.now
	st.n++
}

// publish hands an engine's KV events to the index, now or after the event delay.
func (c *Cluster) publish(i int32, evs []sim.Event) {
	id := c.engines[i].id
	for k := range evs {
		ev := &evs[k]
		if c.cfg.EventDelay == 0 {
			c.apply(id, ev.Kind, ev.Hashes, ev.Parent, ev.HasParent, ev.Tokens)
			continue
		}
		c.dq.push(delivery{at: c.now + c.cfg.EventDelay, eng: i, kind: ev.Kind,
			hashes: append([]uint64(nil), ev.Hashes...), parent: ev.Parent, hasParent: ev.HasParent,
			tokens: append([]uint32(nil), ev.Tokens...)})
	}
}

// apply feeds one KV event to the index as kvevents would.
func (c *Cluster) apply(id string, kind sim.EventKind, hashes []uint64, parent uint64, hasParent bool, tokens []uint32) {
	w := kvindex.WorkerID(id)
	switch kind {
	case sim.EventBlockStored:
		c.store = kvindex.Store{Medium: kvindex.GPU, Parent: parent, HasParent: hasParent, Hashes: hashes,
			Tokens: tokens, BlockSize: c.bs, PlainBlocks: len(hashes)}
		if r := c.index.Store(w, &c.store); r.Skip != kvindex.SkipNone {
			c.rep.IndexSkips++
		}
	case sim.EventBlockRemoved:
		c.index.Remove(w, kvindex.GPU, hashes)
	case sim.EventAllBlocksCleared:
		c.index.ClearWorker(w)
	}
}

// finish fills the report's totals.
func (c *Cluster) finish() *Report {
	rep := c.rep
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
		if c.cfg.Prefill > 0 {
			rep.PrefillUtil = float64(rep.PrefillBusy) / (float64(rep.Span) * float64(c.cfg.Prefill))
		}
		rep.DecodeUtil = float64(rep.DecodeBusy) / (float64(rep.Span) * float64(c.cfg.Decode))
	}
	for _, w := range c.pool.Workers() {
		rep.ResidualLoad += w.ActivePrefillTokens + w.ActiveDecodeBlocks + w.ActiveRequests
	}
	return rep
}
