package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/internal/adminclient"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
)

// indexRouter is the part of the router the Admin service's IndexSnapshot reads: the served
// models with their indexes. The other methods are not called by it.
type indexRouter struct{ models []route.ModelInfo }

func (r indexRouter) Models() []route.ModelInfo { return r.models }
func (indexRouter) Decide(context.Context, *route.Request) (route.Outcome, error) {
	return route.Outcome{}, fmt.Errorf("not used")
}
func (indexRouter) Policy() *policy.Config         { return nil }
func (indexRouter) ShadowStats() route.ShadowStats { return route.ShadowStats{} }

// warmIndex builds an index of about blocks GPU blocks over workers workers, as engines' events
// would: sequences of 64 blocks, a quarter of them continuing a shared 16-block prefix, each
// worker's last batch position recorded.
func warmIndex(t testing.TB, blocks, workers int) (*kvindex.Index, [][]uint64) {
	t.Helper()
	ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	shared := make([]uint32, 16*16)
	for i := range shared {
		shared[i] = r.Uint32N(150000)
	}
	var queries [][]uint64
	eh := uint64(1)
	for n := 0; n < blocks; {
		w := kvindex.WorkerID(fmt.Sprintf("decode-%d", (n/64)%workers))
		toks := make([]uint32, 64*16)
		for i := range toks {
			toks[i] = r.Uint32N(150000)
		}
		if (n/64)%4 == 0 {
			copy(toks, shared)
		}
		s := kvindex.Store{Tokens: toks, BlockSize: 16, PlainBlocks: 64}
		for range 64 {
			s.Hashes = append(s.Hashes, eh)
			eh++
		}
		ix.Update(func(tx kvindex.Tx) {
			tx.Store(w, &s)
			tx.SetPosition(w, kvindex.Position{Seq: uint64(n / 64), Digest: eh, Valid: true})
		})
		if len(queries) < 64 {
			queries = append(queries, kvindex.Keys(toks[:40*16], 16, nil))
		}
		n += 64
	}
	return ix, queries
}

// servePeer runs the Admin gRPC service over ix on loopback with token.
func servePeer(t testing.TB, ix *kvindex.Index, token string) string {
	t.Helper()
	return serveAdmin(t, admin.Options{Router: indexRouter{[]route.ModelInfo{{Index: ix, BlockSize: 16}}}}, token)
}

// serveAdmin runs the Admin gRPC service of opts on loopback with token until the test ends,
// and returns its address.
func serveAdmin(t testing.TB, opts admin.Options, token string) string {
	t.Helper()
	svc, err := admin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	g := admin.NewServer(svc, admin.ServerOptions{Token: token})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return ln.Addr().String()
}

// TestWarmStartFetch copies a 100k-block index from a real Admin gRPC server (token, chunks,
// limit) into a new index that then holds the same blocks and positions and credits the same
// overlaps, and reports the time to warm; a wrong token, a too small warm_max_bytes and a peer
// that is down fail with errors that say so.
func TestWarmStartFetch(t *testing.T) {
	const blocks = 100_000
	peer, queries := warmIndex(t, blocks, 8)
	token := "warm-start-token-0123456789"
	addr := servePeer(t, peer, token)
	dir := t.TempDir()
	tokenFile := repo.WriteFile(t, dir, "token", token+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := time.Now()
	snaps, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: tokenFile}, 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	if snaps.hasSessions {
		t.Error("a peer that keeps no sessions sent session bindings")
	}
	fetched := time.Since(start)
	ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
	st, err := ix.Import(snaps.models[""])
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("time to warm %d blocks (%d workers, %d keys, %d bytes, %d chunks): %v (fetch %v, import %v)",
		st.Entries, st.Workers, st.Keys, st.Bytes, (st.Bytes+admin.SnapshotChunkBytes-1)/admin.SnapshotChunkBytes, took, fetched, took-fetched)
	if st.Entries < blocks || st.Bytes <= admin.SnapshotChunkBytes {
		t.Fatalf("imported %+v; want %d entries over more than one chunk", st, blocks)
	}
	for _, w := range peer.Workers() {
		a, _ := peer.Stats(w)
		b, _ := ix.Stats(w)
		if a.Blocks != b.Blocks || peer.Position(w) != ix.Position(w) {
			t.Fatalf("worker %s: imported %v %+v, peer %v %+v", w, b.Blocks, ix.Position(w), a.Blocks, peer.Position(w))
		}
	}
	var oa, ob kvindex.Overlaps
	for i, q := range queries {
		peer.Overlap(q, &oa)
		ix.Overlap(q, &ob)
		if !slices.Equal(oa.Workers, ob.Workers) {
			t.Fatalf("query %d: imported %+v, peer %+v", i, ob.Workers, oa.Workers)
		}
	}

	bad := repo.WriteFile(t, dir, "bad", "another-token-0123456789")
	if _, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: bad}, 1<<30, false); status.Code(unwrapStatus(err)) != codes.Unauthenticated {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: tokenFile}, 1<<20, false); err == nil || !strings.Contains(err.Error(), "larger than max_bytes") {
		t.Errorf("warm_max_bytes 1 MiB: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	ln.Close()
	if _, err := fetchSnapshots(ctx, down, adminclient.Options{}, 1<<30, false); err == nil || !strings.Contains(err.Error(), "replicas.warm_from "+down) {
		t.Errorf("peer down: %v", err)
	}
}

// sessionRouter is a real router with session affinity over three decode workers, a prefill
// worker and an empty index, on the clock now.
func sessionRouter(t *testing.T, now func() time.Time) *route.Router {
	t.Helper()
	ws := []pool.WorkerConfig{{Name: "p0", Role: pool.RolePrefill, Endpoint: "10.0.1.1:8000", MaxNumBatchedTokens: 8192}}
	for i := range 3 {
		ws = append(ws, pool.WorkerConfig{Name: fmt.Sprintf("d%d", i), Role: pool.RoleDecode, Endpoint: fmt.Sprintf("10.0.2.%d:8000", i+1), NumGPUBlocks: 10000})
	}
	p, err := pool.New(pool.Config{Workers: ws, BlockSize: 16}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
	cfg := policy.DefaultConfig()
	cfg.Enabled, cfg.DisaggGiven, cfg.KVEvents, cfg.DistinctPools = true, true, true, true
	r, err := route.New(route.Options{Index: ix, Pool: p, Policy: &cfg, Now: now, Seed: 3, Sessions: route.SessionConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWarmStartCopiesSessions: over the real Admin gRPC, a warm start asked for sessions gets
// the peer router's bindings after its index, and the router that imports them sends each
// session's follow-up to the worker the peer would; one that was not asked gets none.
func TestWarmStartCopiesSessions(t *testing.T) {
	ctx := context.Background()
	peerNow := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	peer := sessionRouter(t, func() time.Time { return peerNow })
	tokens := func(i, n int) []uint32 {
		out := make([]uint32, n)
		for j := range out {
			out[j] = uint32(1000*i + j)
		}
		return out
	}
	const sessions = 12
	for i := range sessions {
		out, err := peer.Decide(ctx, &route.Request{Tokens: tokens(i, 300+16*i), Session: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Ticket.Cancel()
	}
	addr := serveAdmin(t, admin.Options{Router: peer}, "")

	snaps, err := fetchSnapshots(ctx, addr, adminclient.Options{}, 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	if !snaps.hasSessions || len(snaps.models[""]) == 0 {
		t.Fatalf("asked for sessions: got sessions %v, index %d bytes", snaps.hasSessions, len(snaps.models[""]))
	}
	warmNow := peerNow.Add(-3 * time.Hour) // another clock
	warm := sessionRouter(t, func() time.Time { return warmNow })
	if n, err := warm.ImportSessions(snaps.sessions); err != nil || n != sessions {
		t.Fatalf("ImportSessions: %d, %v", n, err)
	}
	for i := range sessions {
		req := route.Request{Tokens: tokens(i, 364+16*i), Session: fmt.Sprintf("s%d", i), DryRun: true}
		p, err1 := peer.Decide(ctx, &req)
		w, err2 := warm.Decide(ctx, &req)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if w.Decode.ID != p.Decode.ID || w.Session.Outcome != policy.AffinityHit {
			t.Errorf("session s%d: warm router %s (%v), peer %s", i, w.Decode.ID, w.Session.Outcome, p.Decode.ID)
		}
	}
	if snaps, err := fetchSnapshots(ctx, addr, adminclient.Options{}, 1<<30, false); err != nil || snaps.hasSessions {
		t.Errorf("not asked for sessions: sent %v, %v", snaps.hasSessions, err)
	}
}

// unwrapStatus finds the gRPC status inside a wrapped error.
func unwrapStatus(err error) error {
	for e := err; e != nil; {
		if _, ok := status.FromError(e); ok {
			return e
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return err
}

// BenchmarkWarmStart is the time to warm from a peer on loopback: the Admin IndexSnapshot of a
// blocks-block index over real gRPC, and its import.
func BenchmarkWarmStart(b *testing.B) {
	for _, blocks := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			peer, _ := warmIndex(b, blocks, 8)
			addr := servePeer(b, peer, "")
			for b.Loop() {
				snaps, err := fetchSnapshots(context.Background(), addr, adminclient.Options{}, 1<<30, false)
				if err != nil {
					b.Fatal(err)
				}
				ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
				if _, err := ix.Import(snaps.models[""]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/warm")
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
