package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// TestAdminRecentTransferTruth: Admin Recent joins each recent decision with its
// disaggregation truth (docs/disagg-truth.md §4). A remote prefill whose decode answer reports
// L-1 cached tokens is transferred, one reporting fewer is recomputed, one answered by an error
// is unclassified, one still in flight is pending and a passthrough is not remote. All three remote requests share one x-request-id,
// so the join cannot lean on it.
func TestAdminRecentTransferTruth(t *testing.T) {
	e := newEnv(t, fleet[1:]...) // one decode worker: every chat request is remote
	ac := startAdmin(t, e, ServerOptions{})
	answered := func(cached string) {
		v := e.open()
		if route := v.decide(chatBody("a question about transfers "+cached, false)); route != "prefill" {
			t.Fatalf("route %s, want prefill", route)
		}
		v.answer(`{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":`+cached+`}}}`,
			":status", "200", "content-type", "application/json", "x-condisagg-kv-transfer", "pulled")
		v.close()
	}
	answered("39") // L-1 (vLLM < 0.32; 0.32 reports L): the decode worker read the prefill worker's KV
	answered("38") // less: it computed part of the prompt again
	failed := e.open()
	failed.decide(chatBody("a question the decode worker fails", false))
	failed.answer(`{"error":{"message":"overloaded"}}`, ":status", "503", "content-type", "application/json")
	failed.close()
	inFlight := e.open()
	inFlight.decide(chatBody("a question still being answered", true))
	v := e.open()
	v.bodyless(":method", "GET", ":path", "/v1/models", "x-request-id", "req-models")
	v.close()

	resp, err := ac.Recent(context.Background(), &condisaggv1.RecentRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		placement, transfer string
		l, c                int64
	}
	want := []row{{"fallback", "not_remote", 0, 0}, {"prefill", "pending", 0, 0}, {"prefill", "unclassified", 0, 0},
		{"prefill", "recomputed", 40, 38}, {"prefill", "transferred", 40, 39}}
	var got []row
	for _, d := range resp.GetDecisions() {
		got = append(got, row{d.GetPlacement(), d.GetTransfer(), d.GetTransferPromptTokens(), d.GetTransferCachedTokens()})
		if d.GetPlacement() == "prefill" && (d.GetPrefillWorker() == "" || d.GetDecodeWorker() == "" || d.GetTokens() <= 0 || d.GetRequestId() != "req-1") {
			t.Errorf("remote decision without its pair, ISL or request id: %v", d)
		}
		if (d.GetTransferAt() != "") != (d.GetTransfer() == "transferred" || d.GetTransfer() == "recomputed") {
			t.Errorf("transfer_at %q with transfer %q", d.GetTransferAt(), d.GetTransfer())
		}
	}
	if len(got) != len(want) || resp.GetTotal() != 5 || resp.GetKept() == 0 {
		t.Fatalf("Recent: total %d kept %d, decisions %+v; want %+v", resp.GetTotal(), resp.GetKept(), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("decision %d (newest first): %+v, want %+v", i, got[i], want[i])
		}
	}
	inFlight.close()

	if r, err := ac.Recent(context.Background(), &condisaggv1.RecentRequest{Limit: 1}); err != nil || len(r.GetDecisions()) != 1 || r.GetDecisions()[0].GetPlacement() != "fallback" {
		t.Errorf("Recent{limit 1}: %v, %v; want the newest decision only", r, err)
	}
	_, err = ac.Recent(context.Background(), &condisaggv1.RecentRequest{Limit: MaxRecentLimit + 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Recent{limit %d}: %v, want InvalidArgument naming limit", MaxRecentLimit+1, err)
	}
}

// fakeTransfers is a RecentSource over a decision log and a fixed set of transfer outcomes.
type fakeTransfers struct {
	log *decisionlog.Recent
	out map[uint64]decisionlog.Transfer
}

func (f fakeTransfers) Recent() *decisionlog.Recent { return f.log }

func (f fakeTransfers) TransfersByDecision(seqs map[uint64]bool) map[uint64]decisionlog.Transfer {
	got := map[uint64]decisionlog.Transfer{}
	for seq := range seqs {
		if t, ok := f.out[seq]; ok {
			got[seq] = t
		}
	}
	return got
}

// TestRecentDecisionsHandoffTransfer: a handoff runs two legs like a remote prefill (its KV is
// pulled from the holder), so RecentDecisions joins it with its transfer outcome, pending while
// none is recorded; a one-leg placement stays not_remote whatever the server holds for it.
func TestRecentDecisionsHandoffTransfer(t *testing.T) {
	log, err := decisionlog.NewRecent(decisionlog.RecentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0)
	add := func(r policy.Route) uint64 { return log.Add(at, "req", &route.Outcome{Route: r}) }
	remote, handoff, pending, local := add(policy.RoutePrefill), add(policy.RouteHandoff), add(policy.RouteHandoff), add(policy.RouteDecode)
	src := fakeTransfers{log: log, out: map[uint64]decisionlog.Transfer{
		remote:  {Outcome: "transferred", At: at, PromptTokens: 864, CachedTokens: 864},
		handoff: {Outcome: "recomputed", At: at, PromptTokens: 885, CachedTokens: 0},
		local:   {Outcome: "transferred", At: at}, // never asked for: one leg
	}}
	want := map[uint64]TransferState{remote: "transferred", handoff: "recomputed", pending: TransferPending, local: TransferNotRemote}
	got := RecentDecisions(src, 10)
	if len(got) != len(want) {
		t.Fatalf("%d decisions, want %d", len(got), len(want))
	}
	for _, d := range got {
		if d.Transfer != want[d.Entry.Seq] {
			t.Errorf("decision %d (%s): transfer %q, want %q", d.Entry.Seq, decisionlog.PlacementNames[d.Entry.Placement], d.Transfer, want[d.Entry.Seq])
		}
	}
	if d := got[len(got)-1-int(handoff-remote)]; d.Entry.Seq != handoff || d.Record.PromptTokens != 885 {
		t.Errorf("the handoff (seq %d): record %+v, want its classification (L 885)", d.Entry.Seq, d.Record)
	}
}
