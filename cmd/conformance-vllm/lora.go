package main

// The "lora" row (-lora): the engine serves the adapter loraName beside the base model, and
// condisagg knows it as model.lora_adapters. vLLM adds ("lora", name, path) to the extra keys
// of every block of an adapter request (docs/vllm-facts.md §d), so the same tokens under the
// base model and under the adapter are different blocks; a salt still seeds block 0 only.

// item is a request kept for a later phase (eviction, router restart).
type item struct {
	path string
	body func() map[string]any
}

func withModel(body map[string]any, model string) map[string]any {
	if model != "" {
		body["model"] = model
	}
	return body
}

// loraCorpus sends the "lora" row with its own generator g (so that the other rows' prompts are
// those of a run without -lora) and returns adapter requests to send again after the eviction.
func (d *driver) loraCorpus(g gen, send func(c, path string, body map[string]any) (result, error)) ([]item, error) {
	const c = "lora"
	var early []item

	// The same prompt under the base model, the adapter, the adapter with a salt and the base
	// model with that salt, each after the other so that every hit and every miss is exercised.
	type variant struct{ model, salt string }
	order := []variant{{"", ""}, {"", ""}, {loraName, ""}, {loraName, ""}, {"", ""},
		{loraName, "tenant-a"}, {loraName, "tenant-a"}, {"", "tenant-a"}, {loraName, ""}}
	var prompts []item
	for _, n := range []int{70, 130, 200} {
		p := g.ids(n)
		prompts = append(prompts, item{pathCompl, func() map[string]any { return compl(p) }})
	}
	for _, n := range []int{40, 100} {
		t := g.text(n)
		prompts = append(prompts, item{pathCompl, func() map[string]any { return compl(t) }})
	}
	q1, sys, q2 := g.text(50), g.text(40), g.text(20)
	prompts = append(prompts,
		item{pathChat, func() map[string]any { return chat(msg("user", q1)) }},
		item{pathChat, func() map[string]any { return chat(msg("system", sys), msg("user", q2)) }})
	for _, it := range prompts {
		for _, v := range order {
			b := withModel(it.body(), v.model)
			if v.salt != "" {
				b = salted(b, v.salt)
			}
			if _, err := send(c, it.path, b); err != nil {
				return nil, err
			}
		}
	}
	for _, i := range []int{0, 5} { // an ids prompt and a chat come back after the eviction
		it := prompts[i]
		early = append(early, item{it.path, func() map[string]any { return withModel(it.body(), loraName) }})
	}

	// A shared prefix under the adapter with different suffixes, then under the base model.
	prefix := g.ids(96)
	for i := 0; i < 6; i++ {
		m := loraName
		if i >= 4 {
			m = ""
		}
		if _, err := send(c, pathCompl, withModel(compl(cat(prefix, g.ids(10+g.r.IntN(40)))), m)); err != nil {
			return nil, err
		}
	}

	// A multi-turn conversation with the adapter, carrying the adapter's own replies.
	hist := []map[string]any{msg("system", g.text(30))}
	for turn := 0; turn < 4; turn++ {
		hist = append(hist, msg("user", g.text(10+g.r.IntN(40))))
		res, err := send(c, pathChat, withModel(chat(hist...), loraName))
		if err != nil {
			return nil, err
		}
		hist = append(hist, msg("assistant", res.text))
	}

	// The adapter's hits re-announced with kv_cache_report_mode "full", then grown.
	p := g.ids(100)
	for k := 0; k < 3; k++ {
		b := withModel(compl(p), loraName)
		if k > 0 {
			b["vllm_xargs"] = map[string]any{"kv_cache_report_mode": "full"}
		}
		if _, err := send(c, pathCompl, b); err != nil {
			return nil, err
		}
	}
	if _, err := send(c, pathCompl, withModel(compl(cat(p, g.ids(40))), loraName)); err != nil {
		return nil, err
	}

	// An exact multiple of the block size under the adapter (the last block is recomputed),
	// then under the base model.
	e := g.ids(3 * blockSize)
	for _, m := range []string{loraName, loraName, loraName, ""} {
		if _, err := send(c, pathCompl, withModel(compl(e), m)); err != nil {
			return nil, err
		}
	}
	return early, nil
}
