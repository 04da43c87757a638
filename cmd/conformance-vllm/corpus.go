package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/condisagg/condisagg/pool"
)

// words make the text prompts: plain English so that the byte-level BPE merges real words.
var words = strings.Fields(`the a an of to in and or but if then when while cache block token prefix router engine
worker request prompt model layer vector matrix river mountain garden window kitchen lantern harbor meadow
quiet bright heavy narrow ancient gentle rapid silver golden hollow walks runs builds reads writes counts
sleeps measures carries opens closes 2024 17 3.14 hello world, question? answer! (note) "quoted" café naïve 東京`)

type gen struct{ r *rand.Rand }

func (g gen) ids(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 100 + g.r.IntN(150000)
	}
	return out
}

func (g gen) text(nWords int) string {
	var b strings.Builder
	for i := 0; i < nWords; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.r.IntN(len(words))])
	}
	return b.String()
}

func cat(a, b []int) []int { return append(append([]int(nil), a...), b...) }

func compl(prompt any) map[string]any { return map[string]any{"prompt": prompt} }

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

func chat(msgs ...map[string]any) map[string]any {
	l := make([]any, len(msgs))
	for i, m := range msgs {
		l[i] = m
	}
	return map[string]any{"messages": l}
}

func salted(body map[string]any, salt string) map[string]any { body["cache_salt"] = salt; return body }

// corpus drives every request in a fixed order (seeded, so runs are comparable).
func (d *driver) corpus(ctx context.Context) error {
	g := gen{rand.New(rand.NewPCG(7, 11))}
	lg := gen{rand.New(rand.NewPCG(23, 29))} // the lora row's own prompts
	send := func(c, path string, body map[string]any) (result, error) { return d.send(ctx, c, path, body) }
	// Kept for the eviction and restart phases: early prompts sent again later.
	var early []item

	// completion ids: distinct prompts, each sent twice in a row; then one shared prefix with
	// different suffixes.
	for i := 0; i < 16; i++ {
		p := g.ids(40 + g.r.IntN(160))
		for k := 0; k < 2; k++ {
			if _, err := send("completion ids", pathCompl, compl(p)); err != nil {
				return err
			}
		}
		if i < 4 {
			early = append(early, item{pathCompl, func() map[string]any { return compl(p) }})
		}
	}
	prefix := g.ids(100)
	for i := 0; i < 10; i++ {
		if _, err := send("completion ids", pathCompl, compl(cat(prefix, g.ids(5+g.r.IntN(60))))); err != nil {
			return err
		}
	}

	// completion text: the same shape with text prompts.
	for i := 0; i < 14; i++ {
		p := g.text(30 + g.r.IntN(120))
		for k := 0; k < 2; k++ {
			if _, err := send("completion text", pathCompl, compl(p)); err != nil {
				return err
			}
		}
		if i < 3 {
			early = append(early, item{pathCompl, func() map[string]any { return compl(p) }})
		}
	}
	tprefix := g.text(90)
	for i := 0; i < 8; i++ {
		if _, err := send("completion text", pathCompl, compl(tprefix+" "+g.text(3+g.r.IntN(40)))); err != nil {
			return err
		}
	}

	// chat: single turns sent twice; then one shared system prompt with different questions.
	for i := 0; i < 12; i++ {
		q := g.text(20 + g.r.IntN(100))
		for k := 0; k < 2; k++ {
			if _, err := send("chat", pathChat, chat(msg("user", q))); err != nil {
				return err
			}
		}
		if i < 3 {
			early = append(early, item{pathChat, func() map[string]any { return chat(msg("user", q)) }})
		}
	}
	sys := g.text(80)
	for i := 0; i < 8; i++ {
		if _, err := send("chat", pathChat, chat(msg("system", sys), msg("user", g.text(5+g.r.IntN(30))))); err != nil {
			return err
		}
	}

	// multi-turn: each turn carries the previous ones with the engine's own replies.
	for c := 0; c < 4; c++ {
		var hist []map[string]any
		if c%2 == 0 {
			hist = append(hist, msg("system", g.text(30)))
		}
		for turn := 0; turn < 5; turn++ {
			hist = append(hist, msg("user", g.text(10+g.r.IntN(50))))
			res, err := send("multi-turn", pathChat, chat(hist...))
			if err != nil {
				return err
			}
			hist = append(hist, msg("assistant", res.text))
		}
	}

	// exact multiple: prompts of exactly k·32 tokens, three times each (the engine recomputes the
	// last block, stores it again), then grown by one block.
	for _, n := range []int{32, 64, 96, 128, 160, 256} {
		p := g.ids(n)
		for k := 0; k < 3; k++ {
			if _, err := send("exact multiple", pathCompl, compl(p)); err != nil {
				return err
			}
		}
		if _, err := send("exact multiple", pathCompl, compl(cat(p, g.ids(blockSize)))); err != nil {
			return err
		}
	}

	// salted: the same prompt under two salts and none; a salt seeds block 0 only.
	for i := 0; i < 3; i++ {
		p := g.ids(70 + 40*i)
		for _, s := range []string{"tenant-a", "tenant-a", "tenant-b", "", "", "tenant-b", "tenant-a"} {
			b := compl(p)
			if s != "" {
				b = salted(b, s)
			}
			if _, err := send("salted", pathCompl, b); err != nil {
				return err
			}
		}
	}
	q := g.text(60)
	for _, s := range []string{"tenant-c", "tenant-c", "", "tenant-d"} {
		b := chat(msg("user", q))
		if s != "" {
			b = salted(b, s)
		}
		if _, err := send("salted", pathChat, b); err != nil {
			return err
		}
	}

	// report mode full: the engine re-announces a prefix hit as a parentless BlockStored of the
	// blocks it already holds; the credit must not change because of it.
	for i := 0; i < 3; i++ {
		p := g.ids(64 + 45*i)
		for k := 0; k < 3; k++ {
			b := compl(p)
			if k > 0 {
				b["vllm_xargs"] = map[string]any{"kv_cache_report_mode": "full"}
			}
			if _, err := send("report mode full", pathCompl, b); err != nil {
				return err
			}
		}
		if _, err := send("report mode full", pathCompl, compl(cat(p, g.ids(40)))); err != nil {
			return err
		}
	}

	// lora (-lora only): base and adapter requests on the same prompts.
	if d.c.lora {
		more, err := d.loraCorpus(lg, send)
		if err != nil {
			return err
		}
		early = append(early, more...)
	}

	// after eviction: distinct long prompts overflow the cache (a fresh prompt evicts the least
	// recently used free blocks), then the early prompts come back.
	var fillers [][]int
	for i := 0; i < 10; i++ {
		p := g.ids(380 + g.r.IntN(100))
		fillers = append(fillers, p)
		if _, err := send("after eviction", pathCompl, compl(p)); err != nil {
			return err
		}
	}
	for _, it := range early {
		if _, err := send("after eviction", it.path, it.body()); err != nil {
			return err
		}
	}
	for _, p := range fillers[len(fillers)-3:] {
		if _, err := send("after eviction", pathCompl, compl(p)); err != nil {
			return err
		}
	}

	// engine reset, direct: two prompts cached, POST /reset_prefix_cache on the engine itself,
	// then both again (twice). Not counted: the engine's late AllBlocksCleared (catDirectReset).
	if err := d.resetRow(ctx, g, catDirectReset, d.resetEngineDirect); err != nil {
		return err
	}
	// after reset: the same through condisagg (Admin ResetPrefixCache, what
	// `condisagg reset-prefix-cache` calls), which clears the index when the engine has reset.
	if err := d.resetRow(ctx, g, "after reset", d.resetThroughRouter); err != nil {
		return err
	}

	// after router restart: prompts cached, condisagg killed and started again; it must learn
	// the engine's cache from the replay ROUTER before the next decision.
	var kept []item
	for i := 0; i < 3; i++ {
		p := g.ids(60 + 50*i)
		kept = append(kept, item{pathCompl, func() map[string]any { return compl(p) }})
		if _, err := send("after router restart", pathCompl, compl(p)); err != nil {
			return err
		}
	}
	if d.c.lora { // an adapter prompt must come back from the replay with its LoRA keys
		lp := lg.ids(110)
		kept = append(kept, item{pathCompl, func() map[string]any { return withModel(compl(lp), loraName) }})
		if _, err := send("after router restart", pathCompl, withModel(compl(lp), loraName)); err != nil {
			return err
		}
	}
	cq := g.text(50)
	kept = append(kept, item{pathChat, func() map[string]any { return chat(msg("user", cq)) }})
	if _, err := send("after router restart", pathChat, chat(msg("user", cq))); err != nil {
		return err
	}
	if err := d.sync(ctx); err != nil {
		return err
	}
	d.routerPeak = max(d.routerPeak, d.router.PeakRSS())
	d.router.Kill() // SIGKILL: no goodbye, the new process starts cold
	d.conn.Close()
	if err := d.startRouter(ctx, 1); err != nil {
		return err
	}
	if d.envoy != nil {
		if err := d.waitEnvoyRouter(ctx); err != nil {
			return err
		}
	}
	if err := d.sync(ctx); err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	for r := range d.subs {
		if w, err := d.stream(ctx, pool.RankID(workerName, r)); err == nil {
			fmt.Printf("condisagg restarted: %s: %d blocks indexed, last_seq %d, replays %d\n", w.Id, w.IndexedGpuBlocks, w.Events.GetLastSeq(), w.Events.GetReplays())
		}
	}
	for k := 0; k < 2; k++ {
		for _, it := range kept {
			if _, err := send("after router restart", it.path, it.body()); err != nil {
				return err
			}
		}
	}

	// after engine restart: prompts cached, the engine killed with SIGKILL and started again on
	// the same ports. It comes back empty with its seq numbers at 0; condisagg must drop what
	// it held for the engine and follow the new one.
	return d.engineRestartRow(ctx, g, kept)
}
