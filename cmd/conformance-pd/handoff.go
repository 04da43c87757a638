package main

// The handoff mode (-handoff): condisagg's fourth placement on real engines. Prefill on the
// decode worker that holds the prompt's prefix (decode-0, the holder), decode on the other
// decode worker (decode-1), which pulls the KV over NixlConnector.
//
// Both decode engines run kv_role "kv_both" (vLLM 0.32's NixlConnector serves a request's
// do_remote_decode / do_remote_prefill leg whatever the role; kv_both only logs a deprecation
// warning), each with its own NIXL side channel, and a pd-sidecar in front of each (the
// decode-first layout of the sidecar README, "Handoff"): condisagg advertises every worker at
// its sidecar, and every sidecar dials every advertised endpoint at its engine, so a leg for
// another worker reaches the engine and not that worker's sidecar.
//
// The handoff must be the slo policy's priced winner, as in e2e TestHandoffThroughEnvoy:
// decode-0 holds turn 1 of a conversation (sent straight to its engine), but its KV cache is
// small (48 blocks) and under the decode-busy guard (0.4) it has no room to decode turn 2
// there; a full prefill of turn 2 (about 900 tokens) anywhere else (remote on prefill-0, local
// on decode-1, whole on prefill-0) breaks the 20 ms TTFT objective of the cost model, while the
// holder computes only the suffix past its cached blocks, and the transfer and one decode
// step at decode-1 keep the forecast under it. Explain must say so before turn 2 is sent.
//
// Each turn 2 is then checked against the three engines' counters: the holder's
// local_cache_hit grew by condisagg's credit (the handoff estimate's cached_tokens) and by
// pd-sidecar's X-Condisagg-Prefill-Cached-Tokens; the decoder's external_kv_transfer grew with
// no local_compute and no failed NIXL transfer (transferred); the prefill engine did nothing;
// condisagg's Recent outcome equals the decoder's truth; the answer is a real completion with
// the whole prompt reported cached. Fault rows break the decoder's NIXL handshake with the
// holder (the fault proxy between the sidecars and decode-0's engine rewrites the prefill
// leg's remote_engine_id): the decoder recomputes (kv_load_failure_policy "recompute") and
// condisagg must say recomputed.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/condisagg/condisagg/internal/engineproc"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/tokenizer"
)

// The handoff mode's objective and guard (see the file comment for why they make the handoff
// the winner); the cost model is the one the e2e and the golden cases price with.
const (
	handoffTTFTMS   = 20
	handoffTPOTMS   = 50
	handoffGuard    = 0.4
	handoffMinISL   = 860 // turn 2's prompt in tokens: its blocks exceed the holder's guard
	handoffMaxISL   = 940
	kvBothRecompute = `"kv_role":"kv_both","kv_load_failure_policy":"recompute"`
)

// startHandoff brings up the prefill engine and both decode engines (at once), the fault
// proxy in front of decode-0's engine, a pd-sidecar per worker, condisagg and Envoy.
func (d *driver) startHandoff(ctx context.Context) error {
	var err error
	if d.tok, err = tokenizer.Load(filepath.Join(d.c.root, "tokenizer/testdata/models/qwen3"), tokenizer.Options{}); err != nil {
		return err
	}
	for _, seed := range handoffSeeds() { // before the engines take minutes to start
		if _, _, err := d.handoffTurns(formats[0], seed); err != nil {
			return err
		}
	}
	errs := make(chan error, 3)
	launch := func(slot **engineproc.Child, name string, s engineSpec, role string, blocks int) {
		go func() {
			c, err := d.startEngineBlocks(ctx, name, s, role, blocks)
			*slot = c
			errs <- err
		}()
	}
	launch(&d.prefill, "prefill", d.c.prefill, `"kv_role":"kv_producer"`, d.c.blocks)
	launch(&d.decode, "decode-0", d.c.decode, kvBothRecompute, d.c.holderBlocks)
	launch(&d.decode1, "decode-1", d.c.decode1, kvBothRecompute, d.c.blocks)
	for range 3 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	d.children = append(d.children, d.prefill, d.decode, d.decode1)
	if err != nil {
		return err
	}
	d.policy = "recompute"
	if d.fault, err = startFaultProxy(fmt.Sprintf("127.0.0.1:%d", d.c.faultPort), fmt.Sprintf("127.0.0.1:%d", d.c.decode.port)); err != nil {
		return err
	}
	eps := d.handoffEndpoints()
	var allow, dial []string
	for _, e := range eps {
		allow = append(allow, e.endpoint)
		dial = append(dial, e.endpoint+"="+e.dial)
	}
	for _, e := range eps {
		sc, err := engineproc.Start("pd-sidecar-"+e.id, filepath.Join(d.c.workdir, "pd-sidecar-"+e.id+".log"), nil, d.c.sidecar,
			"--listen", e.endpoint, "--admin-listen", "", "--allow", strings.Join(allow, ","), "--dial", strings.Join(dial, ","),
			"--default-decode-host", e.engine, "--prefill-timeout", "120s", "--drain-timeout", "2s")
		if err != nil {
			return err
		}
		d.children = append(d.children, sc)
		if err := engineproc.WaitHealthy(ctx, sc, "http://"+e.endpoint+"/healthz", 30*time.Second); err != nil {
			return err
		}
	}
	if err := d.startRouter(ctx); err != nil {
		return err
	}
	d.envoy, err = startEnvoy(ctx, d.c)
	return err
}

// handoffEndpoint is one worker of the handoff mode: its advertised endpoint (its sidecar),
// the address a sidecar dials for it, and its engine.
type handoffEndpoint struct{ id, endpoint, dial, engine string }

func (d *driver) handoffEndpoints() []handoffEndpoint {
	c := d.c
	at := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	return []handoffEndpoint{
		{prefillID, at(c.sidecarPort), at(c.prefill.port), at(c.prefill.port)},
		// decode-0's legs go through the fault proxy, which breaks marked ones.
		{decodeID, at(c.dSidecar0), at(c.faultPort), at(c.decode.port)},
		{decode1ID, at(c.dSidecar1), at(c.decode1.port), at(c.decode1.port)},
	}
}

func (d *driver) handoffRouterConfig() string {
	c := d.c
	return c.routerConfigHead() + fmt.Sprintf(`  # The slo policy with the handoff placement priced. The steady-state view and the controller
  # stay off: the forecasts are the cost model's on the booked load alone (the CPU engines'
  # real latencies are no H100's, and corrections learnt from them would move the decision).
  conditional_disagg_config: {policy: slo, cost_model: llama3.1-8b-h100, slo_ttft_ms: %d, slo_tpot_ms: %d,
    decode_busy_threshold: %g, slo_handoff: true, slo_fleet: false, slo_feedback: false}
pool: {scrape_interval: 0s}
workers:
`, handoffTTFTMS, handoffTPOTMS, handoffGuard) +
		workerLine(prefillID, "prefill", c.sidecarPort, c.prefill, c.blocks) +
		workerLine(decodeID, "decode", c.dSidecar0, c.decode, c.holderBlocks) +
		workerLine(decode1ID, "decode", c.dSidecar1, c.decode1, c.blocks)
}

// handoffCorpus: a conversation per request shape whose turn 2 is a handoff, then two whose
// handoff's transfer fails.
func (d *driver) handoffCorpus(ctx context.Context) error {
	seeds := handoffSeeds()
	for i, f := range formats {
		if err := d.handoffTurn(ctx, f, seeds[i], false); err != nil {
			return err
		}
	}
	for i := range 2 {
		if err := d.handoffTurn(ctx, formats[i*3], seeds[len(formats)+i], true); err != nil {
			return err
		}
	}
	return d.bookingsReleased(ctx, "at the end")
}

// handoffSeeds are the conversations' seeds: one per request shape, then the two fault rows.
func handoffSeeds() []int { return []int{1100, 1101, 1102, 1103, 1104, 1200, 1201} }

// handoffTurns builds a conversation whose turn 2 has handoffMinISL..handoffMaxISL tokens as a
// completion (a chat renders a few more).
func (d *driver) handoffTurns(f format, seed int) (first, follow request, err error) {
	for n := 20; n < 400; n++ {
		ids, err := d.tok.EncodeCompletion(nil, completion(words(seed, n)+" "+words(seed+500, 6), 1, false, false))
		if err != nil {
			return request{}, request{}, err
		}
		if len(ids) >= handoffMinISL {
			if len(ids) > handoffMaxISL {
				break
			}
			first, follow = turns(f, seed, n)
			return first, follow, nil
		}
	}
	return request{}, request{}, fmt.Errorf("no prompt of seed %d has %d..%d tokens", seed, handoffMinISL, handoffMaxISL)
}

// handoffTurn sends turn 1 straight to the holder's engine, checks that condisagg prices
// turn 2 as a handoff from the holder to decode-1, sends turn 2 through Envoy and checks it
// against the engines.
func (d *driver) handoffTurn(ctx context.Context, f format, seed int, fault bool) error {
	first, follow, err := d.handoffTurns(f, seed)
	if err != nil {
		return err
	}
	follow.cat, follow.wantRoute = "handoff", "handoff"
	if fault {
		follow.cat, follow.fault = "handoff, failure, recompute", true
	}
	r := result{request: follow, id: d.newID()}
	warm, err := d.postTo(ctx, fmt.Sprintf("127.0.0.1:%d", d.c.decode.port), first.path, first.body, map[string]string{"X-Request-Id": r.id + "-turn1"}, nil)
	if err != nil || warm.status != 200 {
		r.bad("turn 1 straight to decode-0's engine: %v (status %d) %.200s", err, warm.status, warm.body)
		d.record(r)
		return nil
	}
	d.quiesce(ctx)
	d.explainHandoff(ctx, &r)

	ports := []int{d.c.prefill.port, d.c.decode.port, d.c.decode1.port}
	var before [3]truth
	for i, p := range ports {
		if before[i], err = d.scrape(ctx, p); err != nil {
			r.bad("engine metrics before: %v", err)
			d.record(r)
			return nil
		}
	}
	hdr := map[string]string{"X-Request-Id": r.id}
	if fault {
		hdr[headerFault] = "engine-id"
	}
	if r.a, err = d.post(ctx, follow.path, follow.body, hdr, nil); err != nil {
		r.bad("request: %v", err)
		d.record(r)
		return nil
	}
	var delta [3]truth
	for i, p := range ports {
		after, err := d.settle(ctx, p)
		if err != nil {
			r.bad("engine metrics after: %v", err)
			d.record(r)
			return nil
		}
		delta[i] = after.minus(before[i])
	}
	r.pDelta, r.dDelta = delta[1], delta[2] // the holder's (prefill leg) and the decoder's
	d.judgeHandoff(ctx, &r, delta[0])
	d.record(r)
	return nil
}

// explainHandoff asks condisagg what it makes of r before it is sent: a handoff from decode-0
// to decode-1, the only placement that meets the objective.
func (d *driver) explainHandoff(ctx context.Context, r *result) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ex, err := d.admin.Explain(cctx, &condisaggv1.ExplainRequest{Path: r.path, Body: r.body})
	if err != nil {
		r.bad("explain: %v", err)
		return
	}
	lines := estimateLines(r.id, ex.GetInputs().GetEstimates())
	if d.explained == nil {
		d.explained = lines
	}
	if d.c.verbose {
		fmt.Print(strings.Join(lines, ""))
	}
	if ex.Route != "handoff" || ex.Reason != "slo_handoff" || ex.PrefillWorker != decodeID || ex.DecodeWorker != decode1ID {
		r.bad("explain: route %s reason %s prefill %s decode %s; want handoff from %s to %s", ex.Route, ex.Reason,
			ex.PrefillWorker, ex.DecodeWorker, decodeID, decode1ID)
	}
	for _, e := range ex.GetInputs().GetEstimates() {
		if e.Placement != "handoff" && e.Valid && e.Headroom >= 0 {
			r.bad("explain: %s meets the objective too (headroom %.3f): the row does not isolate the handoff", e.Placement, e.Headroom)
		}
	}
}

func estimateLines(id string, es []*condisaggv1.PlacementEstimate) []string {
	out := []string{fmt.Sprintf("%s explain: %-13s %-5s %-9s %-9s %8s %8s %8s %7s %8s\n", id, "placement", "valid", "prefill", "decode", "ttft ms", "tpot ms", "headroom", "cached", "transfer")}
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s explain: %-13s %-5v %-9s %-9s %8.2f %8.2f %8.3f %7d %8d\n", id, e.Placement, e.Valid,
			e.PrefillWorker, e.DecodeWorker, e.TtftMs, e.TpotMs, e.Headroom, e.CachedTokens, e.TransferTokens))
	}
	return out
}

// judgeHandoff compares condisagg's route, credit and outcome with the three engines' deltas:
// prefill (the prefill engine's), r.pDelta (the holder's) and r.dDelta (the decoder's).
func (d *driver) judgeHandoff(ctx context.Context, r *result, prefill truth) {
	a := r.a
	if a.status != 200 || a.errEvent || a.truncated {
		r.bad("answer %d (error event %v, truncated %v): %.200s", a.status, a.errEvent, a.truncated, a.body)
	}
	if !a.generated() {
		r.bad("the answer is no finished completion (finish_reason %q, text %q, %d completion tokens): %.600s", a.finish, a.text, a.completion, a.body)
	}
	if a.route != "handoff" {
		r.bad("route %q, want handoff", a.route)
	}
	if a.kvTransfer != "pulled" {
		r.bad("pd-sidecar says %q, want pulled (the decode leg carried the holder's kv_transfer_params)", a.kvTransfer)
	}
	if prefill != (truth{}) {
		r.bad("the prefill engine took part: %+v", prefill)
	}
	rec := d.recent(ctx, r.id)
	if rec == nil {
		r.bad("condisagg Recent has no decision for %s", r.id)
		return
	}
	r.router = rec.Transfer
	if rec.Placement != "handoff" || rec.PrefillWorker != decodeID || rec.DecodeWorker != decode1ID {
		r.bad("condisagg recorded %s from %s to %s; want handoff from %s to %s", rec.Placement, rec.PrefillWorker, rec.DecodeWorker, decodeID, decode1ID)
	}
	credit := int64(-1)
	for _, e := range rec.Estimates {
		if e.Placement == "handoff" {
			credit = e.CachedTokens
		}
	}
	// The holder's leg: a prefix-cache hit of exactly condisagg's credit, the suffix computed,
	// nothing loaded.
	if credit <= 0 || int64(r.pDelta.localHit) != credit {
		r.bad("condisagg credited the holder %d tokens; its local_cache_hit grew by %v", credit, r.pDelta.localHit)
	}
	if a.pCached != int64(r.pDelta.localHit) {
		r.bad("pd-sidecar reports the holder's hit as %d; its local_cache_hit grew by %v", a.pCached, r.pDelta.localHit)
	}
	if r.pDelta.external != 0 || r.pDelta.compute <= 0 {
		r.bad("the holder loaded %v tokens and computed %v (want 0 and the suffix)", r.pDelta.external, r.pDelta.compute)
	}
	// The decoder's truth.
	r.engine = d.engineOutcome(r.dDelta)
	want := "transferred"
	if r.fault {
		want = "recomputed"
		if r.dDelta.failedXfers <= 0 {
			r.bad("the fault proxy broke the transfer, but the decoder counted no failed NIXL transfer")
		}
	} else if r.dDelta.failedXfers != 0 {
		r.bad("the decoder counted %v failed NIXL transfers", r.dDelta.failedXfers)
	}
	if r.engine != want {
		r.bad("the decoder's truth is %s, want %s (deltas %+v)", r.engine, want, r.dDelta)
	}
	wantRouter := r.engine
	if !a.hasUsage {
		wantRouter = "unknown" // a stream without include_usage says nothing condisagg could classify
	}
	if rec.Transfer != wantRouter {
		r.bad("condisagg says %s; the decoder's truth is %s (deltas %+v)", rec.Transfer, r.engine, r.dDelta)
	}
	if r.engine == "transferred" && a.hasUsage && a.cached != a.prompt {
		r.bad("transferred, but the answer reports cached_tokens %d of %d", a.cached, a.prompt)
	}
}

// recent is condisagg's Recent record of request id, once its outcome is no longer pending.
func (d *driver) recent(ctx context.Context, id string) *condisaggv1.RecentDecision {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := d.admin.Recent(cctx, &condisaggv1.RecentRequest{Limit: 200})
		cancel()
		var rec *condisaggv1.RecentDecision
		if err == nil {
			for _, dec := range r.Decisions {
				if dec.RequestId == id {
					rec = dec
				}
			}
		}
		if rec != nil && rec.Transfer != "pending" && rec.Transfer != "" || time.Now().After(deadline) {
			return rec
		}
	}
}
