package route

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/policy"
)

// TestTicketsTeachRoleAdvice: the learner the router is given sees every booked decision and
// every finished answer (through its ticket), so its role advice prices the routed mix: none
// without the slo policy's cost model or before outputs were seen; with them, long prompts
// call for more prefill workers than long answers do, within [1, workers-1].
func TestTicketsTeachRoleAdvice(t *testing.T) {
	ctx := context.Background()
	advise := func(isl, osl int) feedback.RoleAdvice {
		learner := feedback.New()
		r, p := testRouterWith(t, Options{Learner: learner})
		workers := len(p.Workers())
		cfg := enabledConfig()
		d, err := policy.ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_tpot_ms":50}`))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Disagg = d
		if a := learner.Advice(r.Policy(), workers); a.Valid {
			t.Fatalf("advice without the slo policy: %+v", a)
		}
		if err := r.SetPolicy(&cfg); err != nil {
			t.Fatal(err)
		}
		var tickets []*Ticket
		for i := range 20 {
			toks := prompt(isl)
			toks[0] = uint32(i) // unique prompts: nothing cached
			out, err := r.Decide(ctx, &Request{Endpoint: EndpointCompletions, Tokens: toks})
			if err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, out.Ticket)
		}
		if a := learner.Advice(r.Policy(), workers); a.Valid {
			t.Fatalf("advice before any output was observed: %+v", a)
		}
		for _, tk := range tickets {
			tk.Finish(testNow, osl)
			tk.Finish(testNow, osl) // a second report of the end teaches nothing
		}
		a := learner.Advice(r.Policy(), workers)
		if !a.Valid || a.Workers != 5 || a.PrefillWorkers < 1 || a.PrefillWorkers > 4 || !(a.PrefillShare > 0 && a.PrefillShare < 1) {
			t.Fatalf("advice %+v", a)
		}
		return a
	}
	rag, chat := advise(16000, 50), advise(200, 2000)
	if rag.PrefillShare <= chat.PrefillShare || rag.PrefillWorkers <= chat.PrefillWorkers {
		t.Fatalf("long prompts %+v vs long answers %+v: want more prefill for the prompts", rag, chat)
	}
}
