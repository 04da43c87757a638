package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/internal/adminclient"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
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
	svc, err := admin.New(admin.Options{Router: indexRouter{[]route.ModelInfo{{Index: ix, BlockSize: 16}}}})
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
	snaps, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: tokenFile}, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	fetched := time.Since(start)
	ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
	st, err := ix.Import(snaps[""])
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
	if _, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: bad}, 1<<30); status.Code(unwrapStatus(err)) != codes.Unauthenticated {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := fetchSnapshots(ctx, addr, adminclient.Options{TokenFile: tokenFile}, 1<<20); err == nil || !strings.Contains(err.Error(), "larger than max_bytes") {
		t.Errorf("warm_max_bytes 1 MiB: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	ln.Close()
	if _, err := fetchSnapshots(ctx, down, adminclient.Options{}, 1<<30); err == nil || !strings.Contains(err.Error(), "replicas.warm_from "+down) {
		t.Errorf("peer down: %v", err)
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
				snaps, err := fetchSnapshots(context.Background(), addr, adminclient.Options{}, 1<<30)
				if err != nil {
					b.Fatal(err)
				}
				ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
				if _, err := ix.Import(snaps[""]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/warm")
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
