package route

import (
	"context"
	"testing"

	"github.com/condisagg/condisagg/policy"
)

// TestShadowCountsAndNeverSteers: a candidate config decides beside the live one on every
// routed request: the live decisions are exactly those of a router without a candidate (same
// seed), the counts add up, the candidate books nothing, an slo candidate prices both choices,
// Explain (DryRun) is not counted, and PromoteShadow makes the candidate live.
func TestShadowCountsAndNeverSteers(t *testing.T) {
	ctx := context.Background()
	plain, _ := testRouter(t, nil)
	r, p := testRouter(t, nil)
	cand := enabledConfig()
	d, err := policy.ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100"}`))
	if err != nil {
		t.Fatal(err)
	}
	cand.Disagg = d
	if err := r.SetShadow(&cand); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var live []string
	for i := range n {
		req := &Request{Endpoint: EndpointCompletions, Tokens: prompt(100 + 400*i)}
		a, err := plain.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Record() != b.Record() {
			t.Fatalf("request %d: the candidate changed the live decision:\n%+v\n%+v", i, a.Record(), b.Record())
		}
		if b.Shadow == nil || b.Shadow.SameRoute != (b.Shadow.Route == b.Route) {
			t.Fatalf("request %d: shadow %+v", i, b.Shadow)
		}
		live = append(live, b.BookingID)
	}
	st := r.ShadowStats()
	var pairs, reasons uint64
	for _, row := range st.ByRoute {
		for _, v := range row {
			pairs += v
		}
	}
	for _, v := range st.ByReason {
		reasons += v
	}
	if st.Decisions != n || pairs != n || reasons != n || st.SameWorkers > st.SameRoute || st.SameRoute > n {
		t.Fatalf("stats %+v", st)
	}
	// On an idle fleet every choice of the slo candidate keeps the objective with room (it
	// places by aggregated cost among those that keep a 20% margin).
	if st.Forecasts == 0 || st.ShadowHeadroomSum < 0.2*float64(st.Forecasts) {
		t.Fatalf("an slo candidate forecast %d decisions, headroom live %.2f vs its own %.2f", st.Forecasts, st.LiveHeadroomSum, st.ShadowHeadroomSum)
	}
	if st.Config == "" || st.ByRoute[policy.RoutePrefill][policy.RouteDecode] == 0 {
		t.Fatalf("config %q, pairs %v: want fresh remote prompts the slo candidate prefills locally on an idle fleet", st.Config, st.ByRoute)
	}
	// Only the live decisions are booked.
	for _, id := range live {
		if !p.Release(id) {
			t.Fatalf("booking %s missing", id)
		}
	}
	for _, w := range p.Workers() {
		if w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 {
			t.Fatalf("%s holds load after every live booking was released: %+v", w.ID, w)
		}
	}
	if _, err := r.Decide(ctx, &Request{Endpoint: EndpointCompletions, Tokens: prompt(50), DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if r.ShadowStats().Decisions != n {
		t.Fatal("a dry run was counted")
	}
	if err := r.PromoteShadow(); err != nil {
		t.Fatal(err)
	}
	if r.Policy().Disagg.Policy != policy.SLOKind || r.ShadowConfig() != nil || r.ShadowStats().Decisions != 0 {
		t.Fatalf("after promotion: live %s, candidate %v", r.Policy().Disagg.Policy, r.ShadowConfig())
	}
	if err := r.PromoteShadow(); err == nil {
		t.Fatal("promoting no candidate succeeded")
	}
	bad := enabledConfig()
	bad.Disagg.Policy = "fast"
	if err := r.SetShadow(&bad); err == nil {
		t.Fatal("an invalid candidate was accepted")
	}
}
