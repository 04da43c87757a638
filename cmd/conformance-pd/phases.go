package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Categories, in table order.
var categories = []string{"fresh (remote)", "follow-up (local)", "lora fresh (remote)", "lora follow-up (local)", "sub-block (remote)", "near max_model_len",
	"cached on prefill", "failure, recompute", "failure, recompute, D hit", "in flight at once",
	"kill decode mid-stream", "failure, fail", "fresh after restart", "follow-up after restart", "kill prefill mid-prefill",
	"handoff", "handoff, failure, recompute"}

// format is one of the request shapes the corpus rotates through.
type format struct {
	name          string
	chat          bool
	stream, usage bool
}

var formats = []format{{"completion", false, false, false}, {"completion stream+usage", false, true, true},
	{"chat", true, false, false}, {"chat stream+usage", true, true, true}, {"chat stream, no usage", true, true, false}}

// turns returns a fresh first turn and its follow-up in format f.
func turns(f format, seed, n int) (first, follow request) {
	a, more := words(seed, n), words(seed+500, 6)
	if f.chat {
		m1 := []map[string]string{{"role": "user", "content": a}}
		m2 := append(m1[:1:1], map[string]string{"role": "assistant", "content": "Noted."}, map[string]string{"role": "user", "content": more})
		return request{path: "/v1/chat/completions", body: chat(m1, 8, f.stream, f.usage), wantRoute: "prefill"},
			request{path: "/v1/chat/completions", body: chat(m2, 8, f.stream, f.usage), wantRoute: "decode"}
	}
	return request{path: "/v1/completions", body: completion(a, 8, f.stream, f.usage), wantRoute: "prefill"},
		request{path: "/v1/completions", body: completion(a+" "+more, 8, f.stream, f.usage), wantRoute: "decode"}
}

func fresh(f format, seed, n int, cat string) request {
	r, _ := turns(f, seed, n)
	r.cat = cat
	return r
}

// corpus runs every phase; an error means the run could not go on (the rows so far are kept).
func (d *driver) corpus(ctx context.Context) error {
	// Phase 1: kv_load_failure_policy "recompute" on the decode engine.
	for i := range 34 {
		f := formats[i%len(formats)]
		first, follow := turns(f, 100+i, 60+i%5*15)
		first.cat, follow.cat = "fresh (remote)", "follow-up (local)"
		d.one(ctx, first)
		d.one(ctx, follow)
	}
	// The same kind of conversation under the LoRA adapter: its KV computed with the adapter
	// at the prefill engine, moved, and hit under the adapter at the decode engine.
	for i := range 3 {
		f := formats[i%2]
		a, more := words(250+i, 70), words(750+i, 6)
		d.one(ctx, request{cat: "lora fresh (remote)", path: "/v1/completions", body: completionFor(loraName, a, 8, f.stream, f.usage), wantRoute: "prefill"})
		d.one(ctx, request{cat: "lora follow-up (local)", path: "/v1/completions", body: completionFor(loraName, a+" "+more, 8, f.stream, f.usage), wantRoute: "decode"})
	}
	for i := range 5 {
		d.one(ctx, fresh(formats[i%4], 300+i, 2, "sub-block (remote)"))
	}
	for i := range 4 {
		d.one(ctx, d.nearMax(400+i, formats[i%2]))
	}
	// A prompt the prefill engine holds but the decode engine does not: send it, reset the
	// decode engine (through condisagg, which clears its index at once), then send it again.
	for i := range 5 {
		rq := fresh(formats[i], 450+i, 60, "fresh (remote)")
		d.one(ctx, rq)
		if err := d.resetDecode(ctx); err != nil {
			return err
		}
		rq.cat = "cached on prefill"
		d.one(ctx, rq)
	}
	for i := range 3 {
		rq := fresh(formats[i], 500+i, 70, "failure, recompute")
		rq.fault = true
		d.one(ctx, rq)
	}
	for i := range 2 {
		// The decode engine holds the first turn; a long new part keeps the request remote
		// (under half cached), and the failed load leaves the engine its own hit.
		f := formats[i*3]
		first, _ := turns(f, 600+i, 40)
		first.cat = "fresh (remote)"
		d.one(ctx, first)
		rq := d.extend(first, f, 600+i, 40, 90)
		rq.cat, rq.fault = "failure, recompute, D hit", true
		d.one(ctx, rq)
	}
	var at []request
	for i := range 6 {
		at = append(at, fresh(formats[i%4], 700+i, 50+i*10, "in flight at once"))
	}
	d.batch(ctx, at)
	if err := d.bookingsReleased(ctx, "after the recompute phase"); err != nil {
		return err
	}

	// Phase 2: SIGKILL of the decode engine mid-stream, then a decode engine with vLLM's
	// default policy "fail".
	d.killDecode(ctx)
	if err := d.bookingsReleased(ctx, "after the decode engine was killed"); err != nil {
		return err
	}
	if err := d.restartDecode(ctx); err != nil {
		return err
	}
	for i := range 4 {
		d.one(ctx, fresh(formats[i], 800+i, 60, "fresh after restart"))
	}
	for i := range 4 {
		rq := fresh(formats[i], 900+i, 60, "failure, fail")
		rq.fault = true
		d.one(ctx, rq)
	}
	for i := range 2 {
		first, follow := turns(formats[i], 950+i, 70)
		first.cat, follow.cat = "fresh after restart", "follow-up after restart"
		d.one(ctx, first)
		d.one(ctx, follow)
	}

	// Phase 3: SIGKILL of the prefill engine mid-prefill; pd-sidecar prefills at the decode
	// engine instead.
	d.killPrefill(ctx)
	return d.bookingsReleased(ctx, "at the end")
}

// nearMax is a completion whose prompt and output fill max_model_len but for a few tokens.
func (d *driver) nearMax(seed int, f format) request {
	const maxTokens = 16
	n := 10
	prompt := words(seed, n)
	for {
		next := words(seed, n+10)
		ids, err := d.tok.EncodeCompletion(nil, completion(next, 1, false, false))
		if err != nil || len(ids)+maxTokens > d.c.maxLen-8 {
			break
		}
		prompt, n = next, n+10
	}
	return request{cat: "near max_model_len", path: "/v1/completions", body: completion(prompt, maxTokens, f.stream, f.usage), wantRoute: "prefill"}
}

// extend is first's prompt with n more words: still remote (under half cached at the decode
// engine), with a local hit there.
func (d *driver) extend(first request, f format, seed, n, more int) request {
	a := words(seed, n) + " " + words(seed+7000, more)
	if f.chat {
		return request{path: first.path, body: chat([]map[string]string{{"role": "user", "content": words(seed, n)}, {"role": "assistant", "content": "Noted."},
			{"role": "user", "content": words(seed+7000, more)}}, 8, f.stream, f.usage), wantRoute: "prefill"}
	}
	return request{path: first.path, body: completion(a, 8, f.stream, f.usage), wantRoute: "prefill"}
}

func (d *driver) resetDecode(ctx context.Context) error {
	d.quiesce(ctx)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.admin.ResetPrefixCache(cctx, &condisaggv1.ResetPrefixCacheRequest{Worker: decodeID}); err != nil {
		return fmt.Errorf("reset the decode engine's prefix cache through condisagg: %w", err)
	}
	return nil
}

// bookingsReleased fails the run's check if a worker still has booked load 10 s after the
// last answer.
func (d *driver) bookingsReleased(ctx context.Context, when string) error {
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ws, err := d.workers(ctx)
		if err != nil {
			return err
		}
		left = left[:0]
		for _, w := range ws {
			if w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 || w.ActiveRequests != 0 {
				left = append(left, fmt.Sprintf("%s prefill %d blocks %d requests %d", w.Id, w.ActivePrefillTokens, w.ActiveDecodeBlocks, w.ActiveRequests))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	r := result{request: request{cat: "bookings released"}, id: when, router: "released", engine: "-"}
	if len(left) > 0 {
		r.bad("bookings held %s: %s", when, strings.Join(left, "; "))
	}
	d.checks = append(d.checks, r)
	if len(left) > 0 {
		fmt.Println("MISMATCH", r.problems[0])
	}
	return nil
}

// killDecode kills the decode engine (SIGKILL, its whole process group) once a long remote
// stream has started: the client sees the stream cut, condisagg leaves the request
// unclassified and releases its bookings.
func (d *driver) killDecode(ctx context.Context) {
	m := map[string]any{"model": modelName, "prompt": words(990, 60), "max_tokens": 600, "ignore_eos": true, "stream": true,
		"stream_options": map[string]any{"include_usage": true}}
	body, _ := json.Marshal(m)
	r := result{request: request{cat: "kill decode mid-stream", path: "/v1/completions", body: body, wantRoute: "prefill"}, id: d.newID(), engine: "killed"}
	first := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		a, err := d.post(ctx, r.path, r.body, map[string]string{"X-Request-Id": r.id}, first)
		r.a = a
		done <- err
	}()
	select {
	case <-first:
	case <-time.After(3 * time.Minute):
	}
	d.decode.Kill()
	if err := <-done; err != nil {
		r.a.truncated = true
	}
	if !r.a.truncated && r.a.status < 500 && !r.a.errEvent {
		r.bad("the client got a whole answer (%d) though the decode engine was killed mid-stream", r.a.status)
	}
	if r.a.route != "prefill" {
		r.bad("route %q, want prefill", r.a.route)
	}
	_, r.router = d.outcome(ctx, r.id)
	if r.router != "unclassified" {
		r.bad("condisagg says %q, want unclassified (the answer never ended)", r.router)
	}
	d.record(r)
}

// restartDecode starts the decode engine again, with kv_load_failure_policy "fail" (vLLM's
// default), once its ports are free, and waits until condisagg routes to it again.
func (d *driver) restartDecode(ctx context.Context) error {
	s := d.c.decode
	for deadline := time.Now().Add(60 * time.Second); !(freePort(s.port) && freePort(s.kv) && freePort(s.replay) && freePort(s.side)); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the killed decode engine's ports are still bound after 60s")
		}
	}
	eng, err := d.startEngine(ctx, "decode-2", s, `"kv_role":"kv_consumer"`)
	if eng != nil {
		d.children = append(d.children, eng)
	}
	if err != nil {
		return err
	}
	d.decode, d.policy = eng, "fail"
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		ws, err := d.workers(ctx)
		if err == nil && ws[decodeID] != nil && ws[decodeID].Healthy {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condisagg does not see the restarted decode engine healthy after 60s")
		}
	}
	return d.resetDecode(ctx)
}

// killPrefill kills the prefill engine (SIGKILL, its process group) the moment the fault proxy
// has written a long prompt's prefill leg to it: pd-sidecar answers from the decode engine,
// which computes the whole prompt (condisagg: recomputed).
func (d *driver) killPrefill(ctx context.Context) {
	rq := d.nearMax(1000, formats[0])
	rq.cat = "kill prefill mid-prefill"
	r := result{request: rq, id: d.newID()}
	d.quiesce(ctx)
	dBefore, _ := d.scrape(ctx, d.c.decode.port)
	done := make(chan error, 1)
	go func() {
		a, err := d.post(ctx, r.path, r.body, map[string]string{"X-Request-Id": r.id, headerKill: "prefill"}, nil)
		r.a = a
		done <- err
	}()
	select {
	case <-d.fault.wrote:
		d.prefill.Kill()
	case <-time.After(3 * time.Minute):
		r.bad("the prefill leg never reached the prefill engine")
	}
	if err := <-done; err != nil {
		r.bad("request: %v", err)
	}
	dAfter, _ := d.settle(ctx, d.c.decode.port)
	r.dDelta = dAfter.minus(dBefore)
	if r.a.kvTransfer != "fallback" {
		r.bad("pd-sidecar says %q, want fallback (the prefill leg finished before the kill?)", r.a.kvTransfer)
	}
	d.judge(ctx, &r)
	d.record(r)
}

// ---- report ----

func (d *driver) failed() bool {
	for _, r := range append(d.rows, d.checks...) {
		if len(r.problems) > 0 {
			return true
		}
	}
	return false
}

func (d *driver) report(wall time.Duration) {
	ctx := context.Background()
	if d.envoy != nil {
		fails, err := d.envoy.failures(ctx)
		r := result{request: request{cat: "envoy ext_proc failures"}, id: "envoy", router: "0", engine: "-"}
		if err != nil {
			r.bad("%v", err)
		}
		for name, n := range fails {
			r.bad("%s = %d", name, n)
		}
		d.checks = append(d.checks, r)
	}
	type tally struct{ n, ok int }
	by := map[string]*tally{}
	for _, r := range d.rows {
		t := by[r.cat]
		if t == nil {
			t = &tally{}
			by[r.cat] = t
		}
		t.n++
		if len(r.problems) == 0 {
			t.ok++
		}
	}
	fmt.Printf("\n%-28s %5s %5s\n", "CATEGORY", "ROWS", "MATCH")
	total, ok := 0, 0
	for _, c := range categories {
		if t := by[c]; t != nil {
			fmt.Printf("%-28s %5d %5d\n", c, t.n, t.ok)
			total, ok = total+t.n, ok+t.ok
		}
	}
	fmt.Printf("%-28s %5d %5d\n", "total", total, ok)
	outcomes := map[string]int{}
	for _, r := range d.rows {
		if r.a.route == "prefill" || r.a.route == "handoff" {
			outcomes[r.router+" / engine "+r.engine]++
		}
	}
	keys := make([]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if d.c.handoff {
		fmt.Println("\nhandoff requests, condisagg's outcome / the decoding engine's truth:")
	} else {
		fmt.Println("\nremote requests, condisagg's outcome / the decode engine's truth:")
	}
	for _, k := range keys {
		fmt.Printf("  %-45s %d\n", k, outcomes[k])
	}
	if len(d.explained) > 0 {
		fmt.Println("\nthe slo policy's forecasts for the first handoff (Explain, before it was sent):")
		fmt.Print(strings.Join(d.explained, ""))
	}
	fmt.Println()
	for _, c := range d.checks {
		status := "ok"
		if len(c.problems) > 0 {
			status = "MISMATCH " + strings.Join(c.problems, "; ")
		}
		fmt.Printf("check %-26s %-34s %s\n", c.cat, c.id, status)
	}
	var peak int64
	for _, c := range d.children {
		if c != nil {
			fmt.Printf("peak RSS %-12s %6.0f MiB\n", c.Name(), float64(c.PeakRSS())/(1<<20))
			peak += c.PeakRSS()
		}
	}
	fmt.Printf("versions: vllm %s, nixl %s; wall time %s; summed peak RSS %.1f GiB\n", d.vllmVersion(ctx), nixlVersion(d.c.root),
		wall.Round(time.Second), float64(peak)/(1<<30))
}

func (d *driver) vllmVersion(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/version", d.c.decode.port), nil)
	resp, err := d.http.Do(req)
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return "?"
	}
	return v.Version
}

// nixlVersion reads the installed nixl distribution's version from the conformance venv.
func nixlVersion(root string) string {
	m, _ := filepath.Glob(filepath.Join(root, ".cache/vllm-venv/lib/python3*/site-packages/nixl-*.dist-info"))
	if len(m) == 0 {
		return "?"
	}
	name := filepath.Base(m[0])
	name = strings.TrimSuffix(strings.TrimPrefix(name, "nixl-"), ".dist-info")
	if _, err := os.Stat(m[0]); err != nil {
		return "?"
	}
	return name
}
