package route

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/tokenizer"
)

// testModel builds one model with its own pool (one prefill, two decode workers named
// <prefix>-p0, <prefix>-d0, <prefix>-d1 on subnet 10.0.<net>.x) and index of block size bs.
func testModel(t *testing.T, name, prefix string, net, bs int, tok Tokenizer, adapters ...string) Model {
	t.Helper()
	ws := []pool.WorkerConfig{{Name: prefix + "-p0", Role: pool.RolePrefill, Endpoint: "10.0." + strconv.Itoa(net) + ".1:8000",
		MaxNumBatchedTokens: 8192}}
	for i := range 2 {
		ws = append(ws, pool.WorkerConfig{Name: prefix + "-d" + strconv.Itoa(i), Role: pool.RoleDecode,
			Endpoint: "10.0." + strconv.Itoa(net) + "." + strconv.Itoa(i+2) + ":8000", NumGPUBlocks: 10000})
	}
	p, err := pool.New(pool.Config{Workers: ws, BlockSize: bs}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kvindex.New(kvindex.Config{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	return Model{Name: name, Tokenizer: tok, Index: ix, Pool: p, BlockSize: bs, LoRAAdapters: adapters}
}

func loadTok(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(repo.TestModel(t, name), tokenizer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// twoModels is a router serving "qwen3" (block size 16, adapter sql-lora) and "llama3" (block
// size 32), each with its own tokenizer, index and workers.
func twoModels(t *testing.T, unknown UnknownModel) (*Router, Model, Model) {
	t.Helper()
	a := testModel(t, "qwen3", "q", 1, 16, loadTok(t, "qwen3"), "sql-lora")
	b := testModel(t, "llama3", "l", 2, 32, loadTok(t, "llama3"))
	cfg := enabledConfig()
	r, err := New(Options{Models: []Model{a, b}, Policy: &cfg, Seed: 7, UnknownModel: unknown})
	if err != nil {
		t.Fatal(err)
	}
	return r, a, b
}

func idsJSON(toks []uint32) string {
	return strings.ReplaceAll(strings.Trim(fmt.Sprint(toks), "[]"), " ", ",")
}

// storeOn announces the first n full blocks of toks (block size bs, adapter lora) as held on
// worker in ix.
func storeOn(t *testing.T, ix *kvindex.Index, worker string, toks []uint32, bs, n int, lora string) {
	t.Helper()
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(len(worker)*1000+len(lora)*100) + uint64(i) + 1
	}
	s := &kvindex.Store{Medium: kvindex.GPU, Hashes: hashes, Tokens: toks[:n*bs], BlockSize: bs, PlainBlocks: n}
	if lora != "" {
		s.LoRA = []byte(lora)
	}
	if res := ix.Store(kvindex.WorkerID(worker), s); res.Skip != kvindex.SkipNone {
		t.Fatal(res.Skip)
	}
}

// TestModelsRouteIndependently: the request's `model` selects its model's pipeline: its block
// size (keys), its index (credit) and its workers; an adapter name selects its base model with
// the adapter's keys. Two models with different block sizes get correct credit from their own
// index only.
func TestModelsRouteIndependently(t *testing.T) {
	r, a, b := twoModels(t, UnknownReject)
	toks := prompt(320)                                   // token ids below both vocabularies' sizes
	storeOn(t, a.Index, "q-d1", toks, 16, 20, "")         // qwen3 base: all 20 blocks of 16 on q-d1
	storeOn(t, b.Index, "l-d0", toks, 32, 10, "")         // llama3: all 10 blocks of 32 on l-d0
	storeOn(t, a.Index, "q-d0", toks, 16, 20, "sql-lora") // the adapter's blocks on q-d0
	for _, c := range []struct {
		spec, model, wantModel, wantLoRA string
		keys                             int
		want                             map[string]int
	}{
		{"block_size_16_own_index", "qwen3", "qwen3", "", 20, map[string]int{"q-d1": 20}},
		{"block_size_32_own_index", "llama3", "llama3", "", 10, map[string]int{"l-d0": 10}},
		{"adapter_maps_to_base_with_adapter_keys", "sql-lora", "qwen3", "sql-lora", 20, map[string]int{"q-d0": 20}},
	} {
		t.Run(c.spec, func(t *testing.T) {
			body := `{"model":"` + c.model + `","prompt":[` + idsJSON(toks) + `]}`
			out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: []byte(body), DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, o := range out.Overlaps {
				if o.GPU > 0 {
					got[string(o.Worker)] = o.GPU
				}
			}
			if out.Model != c.wantModel || out.LoRA != c.wantLoRA || out.Keys != c.keys || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("model %s: routed by %q lora %q keys %d overlaps %v; want %q %q %d %v",
					c.model, out.Model, out.LoRA, out.Keys, got, c.wantModel, c.wantLoRA, c.keys, c.want)
			}
			prefix := map[string]string{"qwen3": "q-", "llama3": "l-"}[c.wantModel]
			if !strings.HasPrefix(out.Decode.ID, prefix) || out.Decision.Inputs.Cached != 319/(320/c.keys)*(320/c.keys) {
				t.Fatalf("decode %s cached %d: want a %s worker and the last-token-capped credit", out.Decode.ID,
					out.Decision.Inputs.Cached, prefix)
			}
		})
	}
	// A booked request lands on its model's pool only, and Release finds it there.
	body := `{"model":"llama3","prompt":[` + idsJSON(toks) + `]}`
	out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: []byte(body)})
	if err != nil || out.BookingID == "" {
		t.Fatalf("booked decision: %+v %v", out, err)
	}
	if active(b.Pool) != 1 || active(a.Pool) != 0 {
		t.Fatalf("bookings llama3=%d qwen3=%d, want 1 and 0", active(b.Pool), active(a.Pool))
	}
	if out.Ticket.Cancel(); active(b.Pool) != 0 {
		t.Fatal("release did not reach the llama3 pool")
	}
}

func active(p *pool.Pool) int64 {
	var n int64
	for _, w := range p.Workers() {
		n += w.ActiveRequests
	}
	return n
}

// TestUnknownModel: a name no model serves is refused with vLLM's text (reject), or routed by
// load without cache credit and marked (passthrough): to the model whose least-loaded decode
// worker is the least loaded, the first on a tie; Explain's passthrough books nothing.
func TestUnknownModel(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","prompt":"hello"}`)
	t.Run("reject", func(t *testing.T) {
		r, _, _ := twoModels(t, UnknownReject)
		_, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: body})
		var ue *UnknownModelError
		if !errors.Is(err, ErrUnknownModel) || !errors.As(err, &ue) || err.Error() != "The model `gpt-4o` does not exist." {
			t.Fatalf("err %v, want the unknown-model refusal", err)
		}
	})
	t.Run("passthrough", func(t *testing.T) {
		r, a, b := twoModels(t, UnknownPassthrough)
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !out.UnknownModel || out.Reason != "passthrough" || out.Model != "qwen3" || out.Body.Model != "gpt-4o" ||
			!strings.HasPrefix(out.Decode.ID, "q-d") || out.BookingID == "" || out.Decision.Inputs.Cached != 0 {
			t.Fatalf("passthrough outcome %+v", out)
		}
		if active(a.Pool) != 1 || active(b.Pool) != 0 {
			t.Fatal("passthrough not booked on the first model's pool")
		}
		out.Ticket.Cancel()
		dry, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: body, DryRun: true})
		if err != nil || !dry.UnknownModel || dry.BookingID != "" || active(a.Pool) != 0 {
			t.Fatalf("dry-run passthrough %+v %v (active %d)", dry, err, active(a.Pool))
		}
	})
	t.Run("passthrough_goes_to_the_lightest_model", func(t *testing.T) {
		// Both of the first model's decode workers are busy: unknown names go to the second
		// model's idle workers, and back to the first once its load is gone.
		r, a, b := twoModels(t, UnknownPassthrough)
		var tickets []*Ticket
		for range 2 {
			out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: prompt(40), Model: "qwen3"})
			if err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, out.Ticket)
		}
		for _, w := range a.Pool.Workers() {
			if w.Role == pool.RoleDecode && w.ActiveRequests == 0 {
				t.Fatalf("first model's decode worker %s is idle; want both busy", w.ID)
			}
		}
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !out.UnknownModel || out.Model != "llama3" || !strings.HasPrefix(out.Decode.ID, "l-d") || active(b.Pool) == 0 {
			t.Fatalf("unknown model with the first model busy: model %q worker %q (second model active %d)", out.Model, out.Decode.ID, active(b.Pool))
		}
		out.Ticket.Cancel()
		for _, tk := range tickets {
			tk.Cancel()
		}
		if out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Body: body, DryRun: true}); err != nil || out.Model != "qwen3" {
			t.Fatalf("idle fleet: model %q, %v; want the first model", out.Model, err)
		}
	})
	t.Run("single_model_form_takes_every_name", func(t *testing.T) {
		r, _ := testRouter(t, nil)
		out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: prompt(40), Model: "anything"})
		if err != nil || out.UnknownModel {
			t.Fatalf("one unnamed model: %+v %v", out, err)
		}
	})
}

// TestModelsOptionsErrors: every model needs a name when there are several; names and adapter
// names are unique across models; Models excludes the single-model fields.
func TestModelsOptionsErrors(t *testing.T) {
	cfg := enabledConfig()
	a := testModel(t, "m", "a", 1, 16, nil, "x")
	b := testModel(t, "", "b", 2, 16, nil)
	c := testModel(t, "x", "c", 3, 16, nil)
	for _, tc := range []struct {
		spec string
		opts Options
		want string
	}{
		{"name_required_with_several", Options{Models: []Model{a, b}}, "Name is required"},
		{"adapter_name_collides_with_model", Options{Models: []Model{a, c}}, `model name "x" is both`},
		{"models_exclude_single_fields", Options{Models: []Model{a}, Index: a.Index, Pool: a.Pool}, "exclusive"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			tc.opts.Policy = &cfg
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
