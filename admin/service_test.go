package admin

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/policy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/route"
)

// TestAdminToken: with a token, calls without it or with another one are Unauthenticated.
func TestAdminToken(t *testing.T) {
	e := newEnv(t)
	ac := startAdmin(t, e, ServerOptions{Token: "s3cret-admin-token"})
	for _, h := range []string{"", "Bearer wrong", "s3cret-admin-token", "Bearer s3cret-admin-token "} {
		ctx := context.Background()
		if h != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", h)
		}
		if _, err := ac.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("authorization %q: %v, want Unauthenticated", h, err)
		}
		if _, err := ac.Recent(ctx, &condisaggv1.RecentRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Recent with authorization %q: %v, want Unauthenticated", h, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret-admin-token")
	if _, err := ac.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

// TestAdminService: Explain books nothing (R8) and reports the inputs; ListWorkers shows
// load and index state; ReloadConfig calls the reload hook.
func TestAdminService(t *testing.T) {
	e := newEnv(t)
	body := chatBody(strings.Repeat("explain this conversation ", 60), false)
	e.cacheOn("decode-0", body)
	ac := startAdmin(t, e, ServerOptions{})
	r, err := ac.Explain(context.Background(), &condisaggv1.ExplainRequest{Path: chatPath, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if r.Route != "decode" || r.Reason != "bypass_isl" || r.DecodeWorker != "decode-0" || r.Destination != d0Addr ||
		r.Tokens == 0 || r.BlockKeys != r.Tokens/16 || len(r.Overlaps) != 1 || r.Overlaps[0].GpuBlocks != r.BlockKeys {
		t.Fatalf("explain: %v", r)
	}
	if e.booked() {
		t.Fatal("Explain booked")
	}
	if _, err := ac.Explain(context.Background(), &condisaggv1.ExplainRequest{Path: chatPath, Body: []byte("{")}); err == nil ||
		!strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("explain of a bad body: %v", err)
	}
	lw, err := ac.ListWorkers(context.Background(), &condisaggv1.ListWorkersRequest{})
	if err != nil || len(lw.Workers) != 3 || lw.Workers[0].Id != "decode-0" || lw.Workers[0].IndexedGpuBlocks != r.BlockKeys {
		t.Fatalf("list workers: %v %v", lw, err)
	}
	rr, err := ac.ReloadConfig(context.Background(), &condisaggv1.ReloadConfigRequest{})
	if err != nil || !rr.Applied {
		t.Fatalf("reload: %v %v", rr, err)
	}
}

// TestExplainSession: Explain with a session id shows what the session's binding makes of the
// request (the bound worker and the outcome) and binds nothing; without one it shows none.
func TestExplainSession(t *testing.T) {
	e := newEnv(t)
	ac := startAdmin(t, e, ServerOptions{})
	ctx := context.Background()
	first := chatBody(strings.Repeat("a long first turn of a session ", 60), false)
	out, err := e.router.Decide(ctx, &route.Request{Endpoint: route.EndpointChat, Body: first, Session: "conv-9"})
	if err != nil || out.Session.Outcome != policy.AffinityMiss {
		t.Fatalf("first turn: %+v %v", out.Session, err)
	}
	defer out.Ticket.Cancel()
	next := chatBody("a short follow-up", false)
	r, err := ac.Explain(ctx, &condisaggv1.ExplainRequest{Path: chatPath, Body: next, Session: "conv-9"})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.GetSession(); s.GetOutcome() != "hit" || s.GetBoundWorker() != out.Decode.ID || r.DecodeWorker != out.Decode.ID {
		t.Fatalf("explain session %v on %s, want a hit on %s", s, r.DecodeWorker, out.Decode.ID)
	}
	r, err = ac.Explain(ctx, &condisaggv1.ExplainRequest{Path: chatPath, Body: next, Session: "conv-new"})
	if err != nil || r.GetSession().GetOutcome() != "miss" || r.GetSession().GetBoundWorker() != "" {
		t.Fatalf("unknown session: %v %v", r.GetSession(), err)
	}
	if st := e.router.SessionStats(); st.Bindings != 1 {
		t.Fatalf("Explain bound a session: %+v", st)
	}
	if r, err = ac.Explain(ctx, &condisaggv1.ExplainRequest{Path: chatPath, Body: next}); err != nil || r.GetSession() != nil {
		t.Fatalf("no session: %v %v", r.GetSession(), err)
	}
	if _, err := ac.Explain(ctx, &condisaggv1.ExplainRequest{Path: chatPath, Body: next, Session: strings.Repeat("x", 257)}); err == nil ||
		!strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("oversized session id: %v", err)
	}
}
