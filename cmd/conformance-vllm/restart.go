package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/condisagg/condisagg/pool"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// The rows that reset or restart the engine.

// resetRow caches two prompts (each sent twice), resets the engine's prefix cache with reset,
// then sends both again twice, all under category cat.
func (d *driver) resetRow(ctx context.Context, g gen, cat string, reset func(context.Context) error) error {
	rp := [][]int{g.ids(150), g.ids(90)}
	for _, p := range rp {
		for k := 0; k < 2; k++ {
			if _, err := d.send(ctx, cat, pathCompl, compl(p)); err != nil {
				return err
			}
		}
	}
	if err := d.sync(ctx); err != nil {
		return err
	}
	if err := reset(ctx); err != nil {
		return err
	}
	for k := 0; k < 2; k++ {
		for _, p := range rp {
			if _, err := d.send(ctx, cat, pathCompl, compl(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// resetEngineDirect is POST /reset_prefix_cache on the engine, condisagg not told.
func (d *driver) resetEngineDirect(ctx context.Context) error {
	var rr struct {
		Success *bool `json:"success"`
	}
	if err := d.post(ctx, "/reset_prefix_cache", nil, &rr); err != nil {
		return err
	}
	ok := rr.Success != nil && *rr.Success
	fmt.Printf("POST /reset_prefix_cache on the engine: success=%v\n", ok)
	if !ok {
		return fmt.Errorf("the engine refused POST /reset_prefix_cache")
	}
	return nil
}

// resetThroughRouter is Admin ResetPrefixCache: condisagg asks the engine and clears its index.
func (d *driver) resetThroughRouter(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := d.admin.ResetPrefixCache(cctx, &condisaggv1.ResetPrefixCacheRequest{Worker: workerName})
	if err != nil {
		return fmt.Errorf("admin ResetPrefixCache: %w", err)
	}
	fmt.Printf("condisagg reset-prefix-cache %s: success=%v cleared=%v (%s)\n", workerName, r.Success, r.Cleared, r.Message)
	if !r.Success {
		return fmt.Errorf("admin ResetPrefixCache: %s", r.Message)
	}
	for rank := range d.subs {
		if w, err := d.stream(ctx, pool.RankID(workerName, rank)); err == nil && w.IndexedGpuBlocks != 0 {
			return fmt.Errorf("after ResetPrefixCache condisagg still indexes %d blocks for %s", w.IndexedGpuBlocks, w.Id)
		}
	}
	return nil
}

// engineRestartRow caches three prompts, kills the engine's process tree with SIGKILL, starts
// it again on the same ports, and sends the prompts kept for the router restart and the three
// new ones twice each: every one is a miss on the new engine the first time.
func (d *driver) engineRestartRow(ctx context.Context, g gen, kept []item) error {
	const cat = "after engine restart"
	for i := 0; i < 3; i++ {
		p := g.ids(70 + 40*i)
		kept = append(kept, item{pathCompl, func() map[string]any { return compl(p) }})
		for k := 0; k < 2; k++ {
			if _, err := d.send(ctx, cat, pathCompl, compl(p)); err != nil {
				return err
			}
		}
	}
	if err := d.sync(ctx); err != nil {
		return err
	}
	d.report1("before the engine restart")
	t0 := time.Now()
	d.eng.Kill() // the whole group: API server, EngineCore, worker
	for _, w := range d.subs {
		w.forgetSeq() // the new engine numbers its batches from 0
	}
	d.engineGen++
	eng, err := startEngine(ctx, d.c)
	if eng != nil {
		d.eng = eng
		d.engines = append(d.engines, eng)
	}
	if err != nil {
		return fmt.Errorf("engine restart: %w", err)
	}
	fmt.Printf("engine killed (SIGKILL) and healthy again after %s\n", time.Since(t0).Round(time.Second))
	// condisagg excluded the worker when its health probes were refused; it takes it back
	// after good probes (pool health backoff), and until then it would route nothing there.
	t1 := time.Now()
	if err := d.waitHealthy(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Printf("condisagg took the worker back %s after the engine's /health answered\n", time.Since(t1).Round(100*time.Millisecond))
	if d.envoy != nil { // condisagg reported NOT_SERVING to Envoy while it had no healthy worker
		if err := d.waitEnvoyRouter(ctx); err != nil {
			return err
		}
	}
	d.report1("engine healthy again, before the first request")
	order := rand.New(rand.NewPCG(31, 37))
	for k := 0; k < 2; k++ {
		for _, i := range order.Perm(len(kept)) {
			if _, err := d.send(ctx, cat, kept[i].path, kept[i].body()); err != nil {
				return err
			}
		}
	}
	return nil
}

// report1 prints condisagg's view of every engine rank's stream.
func (d *driver) report1(when string) {
	for r := range d.subs {
		w, err := d.stream(context.Background(), pool.RankID(workerName, r))
		if err != nil {
			fmt.Printf("%s: %v\n", when, err)
			continue
		}
		ev := w.GetEvents()
		last := "none"
		if ev.GetHasLastSeq() {
			last = fmt.Sprint(ev.GetLastSeq())
		}
		fmt.Printf("%s: %s: %d blocks indexed, connected %v, last_seq %s, replays %d (lost %d), gaps %d\n",
			when, w.Id, w.IndexedGpuBlocks, ev.GetConnected(), last, ev.GetReplays(), ev.GetReplaysLost(), ev.GetGaps())
	}
}

// waitHealthy waits until condisagg counts every rank of the engine healthy again.
func (d *driver) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for r := range d.subs {
			w, err := d.stream(ctx, pool.RankID(workerName, r))
			ok = ok && err == nil && w.Healthy
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condisagg does not count the restarted engine healthy after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
