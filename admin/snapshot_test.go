package admin

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/kvindex"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// readSnapshot reads an IndexSnapshot stream whole: the chunks and each model's bytes.
func readSnapshot(ctx context.Context, ac condisaggv1.AdminClient, maxBytes uint64) ([]*condisaggv1.IndexSnapshotChunk, map[string][]byte, error) {
	st, err := ac.IndexSnapshot(ctx, &condisaggv1.IndexSnapshotRequest{MaxBytes: maxBytes})
	if err != nil {
		return nil, nil, err
	}
	var chunks []*condisaggv1.IndexSnapshotChunk
	data := map[string][]byte{}
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, data, nil
		} else if err != nil {
			return chunks, data, err
		}
		chunks = append(chunks, c)
		data[c.GetModel()] = append(data[c.GetModel()], c.GetData()...)
	}
}

// TestIndexSnapshot: the streamed snapshot needs the token like every unary call (the stream
// interceptor), comes in chunks of at most SnapshotChunkBytes whose first one announces the
// size, imports into an empty index that then credits the same overlap, and a max_bytes below
// its size is refused with ResourceExhausted before any data is sent.
func TestIndexSnapshot(t *testing.T) {
	e := newEnv(t)
	body := chatBody(strings.Repeat("Snapshots carry the whole prefix index to a new replica. ", 400), false)
	e.cacheOn("decode-0", body)
	e.index.SetPosition("decode-0", kvindex.Position{Seq: 77, Digest: 5, Valid: true})
	ac := startAdmin(t, e, ServerOptions{Token: "s3cret-admin-token"})

	if _, _, err := readSnapshot(context.Background(), ac, 0); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret-admin-token")
	chunks, data, err := readSnapshot(ctx, ac, 0)
	if err != nil {
		t.Fatal(err)
	}
	snap := data[""]
	if len(chunks) == 0 || chunks[0].GetTotalBytes() != uint64(len(snap)) || chunks[0].GetEntries() == 0 || !chunks[len(chunks)-1].GetModelEnd() {
		t.Fatalf("chunks: %d, first %+v, %d bytes", len(chunks), chunks[0], len(snap))
	}
	for _, c := range chunks {
		if len(c.GetData()) > SnapshotChunkBytes {
			t.Fatalf("a chunk of %d bytes", len(c.GetData()))
		}
	}
	ix, _ := kvindex.New(kvindex.Config{BlockSize: 16})
	if _, err := ix.Import(snap); err != nil {
		t.Fatal(err)
	}
	if p := ix.Position("decode-0"); p.Seq != 77 || !p.Valid {
		t.Fatalf("imported position %+v", p)
	}
	before, _ := e.index.Stats("decode-0")
	after, _ := ix.Stats("decode-0")
	if before.Blocks != after.Blocks || before.Blocks[kvindex.GPU] == 0 {
		t.Fatalf("imported blocks %v, the router's %v", after.Blocks, before.Blocks)
	}

	chunks, _, err = readSnapshot(ctx, ac, 16)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max_bytes 16") || len(chunks) != 0 {
		t.Fatalf("max_bytes 16: %d chunks, %v; want ResourceExhausted and nothing sent", len(chunks), err)
	}
}
