package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// request is one corpus row.
type request struct {
	cat       string
	path      string
	body      []byte
	fault     bool   // the fault proxy breaks this request's KV transfer
	wantRoute string // "prefill" (remote) or "decode" (local on the decode engine)
}

// result is one checked request.
type result struct {
	request
	id        string
	a         answer
	router    string // condisagg's transfer outcome (Admin Recent), or "not_remote"
	engine    string // the decode engine's truth, or "local"
	dDelta    truth
	pDelta    truth
	problems  []string
	aggregate bool // engine truth from the batch's sum (requests in flight at once)
}

func (r *result) bad(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// truth is what an engine's /metrics say it did with prompt tokens (vllm:prompt_tokens_by_source
// by source) and how many NIXL transfers failed.
type truth struct {
	external, compute, localHit, failedXfers float64
}

func (t truth) minus(o truth) truth {
	return truth{t.external - o.external, t.compute - o.compute, t.localHit - o.localHit, t.failedXfers - o.failedXfers}
}

func (d *driver) scrape(ctx context.Context, port int) (truth, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	resp, err := d.http.Do(req)
	if err != nil {
		return truth{}, err
	}
	defer resp.Body.Close()
	var t truth
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "vllm:prompt_tokens_by_source_total{") && strings.Contains(line, `source="external_kv_transfer"`):
			t.external += v
		case strings.HasPrefix(line, "vllm:prompt_tokens_by_source_total{") && strings.Contains(line, `source="local_compute"`):
			t.compute += v
		case strings.HasPrefix(line, "vllm:prompt_tokens_by_source_total{") && strings.Contains(line, `source="local_cache_hit"`):
			t.localHit += v
		case strings.HasPrefix(line, "vllm:nixl_num_failed_transfers_total{"):
			t.failedXfers += v
		}
	}
	return t, sc.Err()
}

// settle scrapes an engine until two scrapes 300 ms apart agree (the engine's stat logger
// records a request's prompt tokens a moment after its answer).
func (d *driver) settle(ctx context.Context, port int) (truth, error) {
	prev, err := d.scrape(ctx, port)
	if err != nil {
		return truth{}, err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		cur, err := d.scrape(ctx, port)
		if err != nil {
			return truth{}, err
		}
		if cur == prev {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// workerIDs are the workers condisagg routes to in this mode.
func (d *driver) workerIDs() []string {
	if d.c.handoff {
		return []string{prefillID, decodeID, decode1ID}
	}
	return []string{prefillID, decodeID}
}

func (d *driver) numWorkers() int { return len(d.workerIDs()) }

// quiesce waits until condisagg has applied the KV events every engine published: their last
// applied seq numbers hold still for 400 ms.
func (d *driver) quiesce(ctx context.Context) {
	seqs := func() string {
		ws, err := d.workers(ctx)
		if err != nil {
			return "?"
		}
		var b strings.Builder
		for _, id := range d.workerIDs() {
			if w := ws[id]; w != nil && w.Events != nil {
				fmt.Fprintf(&b, "%d/", w.Events.LastSeq)
			}
		}
		return b.String()
	}
	last, same := seqs(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 4 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if s := seqs(); s == last {
			same++
		} else {
			last, same = s, 0
		}
	}
}

// outcome is condisagg's record of the request: its transfer outcome from Admin Recent, waiting
// while it is still pending.
func (d *driver) outcome(ctx context.Context, id string) (placement, transfer string) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := d.admin.Recent(cctx, &condisaggv1.RecentRequest{Limit: 200})
		cancel()
		if err == nil {
			for _, dec := range r.Decisions {
				if dec.RequestId == id {
					placement, transfer = dec.Placement, dec.Transfer
				}
			}
		}
		if transfer != "pending" && transfer != "" || time.Now().After(deadline) {
			return placement, transfer
		}
	}
}

func (d *driver) newID() string {
	d.nextID++
	return fmt.Sprintf("pd-%03d", d.nextID)
}

// one sends a request alone and checks it against both engines' deltas.
func (d *driver) one(ctx context.Context, rq request) result {
	d.quiesce(ctx)
	r := result{request: rq, id: d.newID()}
	pBefore, err1 := d.scrape(ctx, d.c.prefill.port)
	dBefore, err2 := d.scrape(ctx, d.c.decode.port)
	if err1 != nil || err2 != nil {
		r.bad("engine metrics before: %v %v", err1, err2)
		return d.record(r)
	}
	hdr := map[string]string{"X-Request-Id": r.id}
	if rq.fault {
		hdr[headerFault] = "engine-id"
	}
	a, err := d.post(ctx, rq.path, rq.body, hdr, nil)
	if err != nil {
		r.bad("request: %v", err)
		return d.record(r)
	}
	r.a = a
	pAfter, err1 := d.settle(ctx, d.c.prefill.port)
	dAfter, err2 := d.settle(ctx, d.c.decode.port)
	if err1 != nil || err2 != nil {
		r.bad("engine metrics after: %v %v", err1, err2)
		return d.record(r)
	}
	r.pDelta, r.dDelta = pAfter.minus(pBefore), dAfter.minus(dBefore)
	d.judge(ctx, &r)
	return d.record(r)
}

// engineOutcome is the decode engine's truth for one remote request.
func (d *driver) engineOutcome(t truth) string {
	switch {
	case t.failedXfers > 0 && d.policy == "fail":
		return "failed"
	case t.failedXfers > 0:
		return "recomputed"
	case t.external > 0 && t.compute == 0:
		return "transferred"
	default:
		return "recomputed"
	}
}

// judge compares condisagg's route and outcome with the engines'.
func (d *driver) judge(ctx context.Context, r *result) {
	a := r.a
	if a.status != http.StatusOK || a.errEvent || a.truncated {
		r.bad("answer %d (error event %v, truncated %v): %.200s", a.status, a.errEvent, a.truncated, a.body)
	}
	if a.route != r.wantRoute {
		r.bad("route %q, want %q", a.route, r.wantRoute)
	}
	placement, transfer := d.outcome(ctx, r.id)
	r.router = transfer
	if placement == "" {
		r.bad("condisagg Recent has no decision for %s", r.id)
		return
	}
	credit := a.isl - a.eff
	if a.route == "decode" {
		r.engine = "local"
		if r.dDelta.external != 0 || r.pDelta != (truth{}) {
			r.bad("local route, but the engines moved KV: decode %+v prefill %+v", r.dDelta, r.pDelta)
		}
		if int64(r.dDelta.localHit) != credit {
			r.bad("condisagg credited %d tokens; the decode engine's local_cache_hit grew by %v", credit, r.dDelta.localHit)
		}
		if a.hasUsage && a.cached != credit {
			r.bad("condisagg credited %d tokens; the engine reported cached_tokens %d", credit, a.cached)
		}
		return
	}
	if !r.aggregate {
		r.engine = d.engineOutcome(r.dDelta)
	}
	want := r.engine
	if !a.hasUsage && a.kvTransfer == "pulled" {
		want = "unknown" // a stream without include_usage says nothing condisagg could classify
	}
	if transfer != want {
		r.bad("condisagg says %s; the decode engine's truth is %s (deltas %+v)", transfer, r.engine, r.dDelta)
	}
	if r.engine == "transferred" && a.hasUsage && a.cached != a.prompt {
		r.bad("transferred, but the answer reports cached_tokens %d of %d", a.cached, a.prompt)
	}
	if r.cat == "cached on prefill" && a.pCached <= 0 {
		r.bad("the prefill engine had no hit (%d): the row does not test what it says", a.pCached)
	}
	if a.kvTransfer != "fallback" && a.pCached != int64(r.pDelta.localHit) && !r.aggregate {
		r.bad("pd-sidecar reports the prefill engine's hit as %d; its local_cache_hit grew by %v", a.pCached, r.pDelta.localHit)
	}
}

// record keeps r and prints it with -v or when it failed.
func (d *driver) record(r result) result {
	d.rows = append(d.rows, r)
	if d.c.verbose || len(r.problems) > 0 {
		status := "ok"
		if len(r.problems) > 0 {
			status = "MISMATCH " + strings.Join(r.problems, "; ")
		}
		holder := "" // a handoff's prefill leg ran on a decode engine: its deltas too
		if r.wantRoute == "handoff" {
			holder = fmt.Sprintf(" holderΔ=%+v", r.pDelta)
		}
		fmt.Printf("%s %-22s route=%-7s sidecar=%-8s condisagg=%-12s engine=%-11s L=%d C=%d Pcached=%d dΔ=%+v%s %s\n",
			r.id, r.cat, r.a.route, r.a.kvTransfer, r.router, r.engine, r.a.prompt, r.a.cached, r.a.pCached, r.dDelta, holder, status)
	}
	return r
}

// batch sends fresh prompts at once; the engine's truth is checked on their sum.
func (d *driver) batch(ctx context.Context, rqs []request) {
	d.quiesce(ctx)
	dBefore, err := d.scrape(ctx, d.c.decode.port)
	if err != nil {
		d.record(result{request: rqs[0], problems: []string{err.Error()}})
		return
	}
	results := make([]result, len(rqs))
	var wg sync.WaitGroup
	for i, rq := range rqs {
		results[i] = result{request: rq, id: d.newID(), aggregate: true}
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			a, err := d.post(ctx, r.path, r.body, map[string]string{"X-Request-Id": r.id}, nil)
			r.a = a
			if err != nil {
				r.bad("request: %v", err)
			}
		}(&results[i])
	}
	wg.Wait()
	dAfter, err := d.settle(ctx, d.c.decode.port)
	if err != nil {
		d.record(result{request: rqs[0], problems: []string{err.Error()}})
		return
	}
	sum := dAfter.minus(dBefore)
	var prompt int64
	for _, r := range results {
		prompt += r.a.prompt
	}
	engine := "transferred"
	if sum.compute != 0 || sum.failedXfers != 0 || int64(sum.external) != prompt {
		engine = fmt.Sprintf("mixed (external %v of %d, computed %v)", sum.external, prompt, sum.compute)
	}
	for i := range results {
		results[i].engine, results[i].dDelta = engine, sum
		d.judge(ctx, &results[i])
		d.record(results[i])
	}
}

// ---- bodies ----

func completion(prompt string, maxTokens int, stream, usage bool) []byte {
	return completionFor(modelName, prompt, maxTokens, stream, usage)
}

func completionFor(model, prompt string, maxTokens int, stream, usage bool) []byte {
	m := map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0}
	setStream(m, stream, usage)
	b, _ := json.Marshal(m)
	return b
}

func chat(msgs []map[string]string, maxTokens int, stream, usage bool) []byte {
	m := map[string]any{"model": modelName, "messages": msgs, "max_tokens": maxTokens, "temperature": 0}
	setStream(m, stream, usage)
	b, _ := json.Marshal(m)
	return b
}

func setStream(m map[string]any, stream, usage bool) {
	if stream {
		m["stream"] = true
		if usage {
			m["stream_options"] = map[string]any{"include_usage": true}
		}
	}
}

// words returns n distinct words for seed: prompts that share nothing unless built to.
func words(seed, n int) string {
	topics := []string{"river", "market", "engine", "garden", "ledger", "harbor", "signal", "canvas", "orbit", "thread"}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%d", topics[(seed+i)%len(topics)], seed*1000+i)
	}
	return b.String()
}
