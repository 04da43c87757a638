package route

import (
	"context"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// TestFleetViewFedAndRead: under slo with slo_fleet, decisions read a view that the router
// built from its own bookings and the tickets' answers on its clock; without slo_fleet no view
// is read.
func TestFleetViewFedAndRead(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := enabledConfig()
		js := `{"policy":"slo","cost_model":"llama3.1-8b-h100"`
		if !on {
			js += `,"slo_fleet":false`
		}
		d, err := policy.ParseDisagg([]byte(js + `}`))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Disagg = d
		now := testNow
		r, _ := testRouterWith(t, Options{Now: func() time.Time { return now }})
		if err := r.SetPolicy(&cfg); err != nil {
			t.Fatal(err)
		}
		var last Outcome
		// 30 requests of 1,000 tokens over 3 s, each answered with 100 tokens.
		for i := range 30 {
			now = testNow.Add(time.Duration(i) * 100 * time.Millisecond)
			toks := prompt(1000)
			toks[0] = uint32(50000 + i) // no prefix shared: every prompt is uncached
			out, err := r.Decide(context.Background(), &Request{Endpoint: EndpointCompletions, Tokens: toks})
			if err != nil {
				t.Fatal(err)
			}
			out.Ticket.FirstToken(now.Add(50*time.Millisecond), true)
			out.Ticket.Finish(now.Add(80*time.Millisecond), 100)
			last = out
		}
		v := last.Decision.Inputs.Fleet.View
		if !on {
			if v.Window != 0 {
				t.Fatalf("slo_fleet off read a view: %+v", v)
			}
			continue
		}
		// The last decision saw 29 placements over 2.9 s.
		reqs := v.Decode.Requests + v.Prefill.Requests
		toks := v.Decode.PrefillTokens + v.Prefill.PrefillTokens
		out := v.Decode.OutputTokens + v.Prefill.OutputTokens
		if v.Window < 2*time.Second || reqs < 9 || reqs > 11 || toks < 9000 || toks > 11000 || out < 900 || out > 1100 {
			t.Fatalf("view %+v: want ~10 placements, ~10,000 prompt and ~1,000 output tokens per second", v)
		}
		if f := last.Decision.Inputs.Fleet; !f.Aggregated.Valid || !f.Split.Valid || f.OutputPerRequest < 90 || f.OutputPerRequest > 110 {
			t.Fatalf("forecast %+v", f)
		}
	}
}
