package admin

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/kvindex"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Snapshot limits: chunks stay well under gRPC's default 4 MiB message limit, and one model's
// snapshot is refused past DefaultSnapshotMaxBytes (about 70 M index entries; a 1,000-worker
// fleet at 100k blocks each is near 1 GiB) unless the caller asks for less.
const (
	SnapshotChunkBytes      = 1 << 20
	DefaultSnapshotMaxBytes = 1 << 30
)

// SessionSource is what IndexSnapshot asks of a Router that keeps session bindings
// (*route.Router): a Router without it sends none.
type SessionSource interface {
	SessionAffinity() bool
	ExportSessions(maxBytes int) ([]byte, int)
}

// IndexSnapshot streams every served model's index snapshot (kvindex.Index.Export), one model
// after the other, in chunks of at most SnapshotChunkBytes; asked for, the session bindings
// follow (route's session snapshot, the most recently used within max_bytes).
func (a *Service) IndexSnapshot(req *condisaggv1.IndexSnapshotRequest, stream condisaggv1.Admin_IndexSnapshotServer) error {
	limit := DefaultSnapshotMaxBytes
	if m := req.GetMaxBytes(); m > 0 && m < uint64(limit) {
		limit = int(m)
	}
	for _, m := range a.opts.Router.Models() {
		if m.Index == nil {
			continue
		}
		data, st, err := m.Index.Export(limit)
		if errors.Is(err, kvindex.ErrSnapshotTooLarge) {
			return status.Errorf(codes.ResourceExhausted, "admin: index snapshot of model %q is larger than max_bytes %d", m.Name, limit)
		} else if err != nil {
			return status.Errorf(codes.Internal, "admin: index snapshot of model %q: %v", m.Name, err)
		}
		first := &condisaggv1.IndexSnapshotChunk{Model: m.Name, TotalBytes: uint64(len(data)),
			Entries: int64(st.Entries), Workers: int64(st.Workers)}
		if err := sendChunks(stream, first, data); err != nil {
			return fmt.Errorf("admin: send index snapshot of model %q: %w", m.Name, err)
		}
	}
	if src, ok := a.opts.Router.(SessionSource); ok && req.GetSessions() && src.SessionAffinity() {
		data, n := src.ExportSessions(limit)
		first := &condisaggv1.IndexSnapshotChunk{Sessions: true, TotalBytes: uint64(len(data)), Entries: int64(n)}
		if err := sendChunks(stream, first, data); err != nil {
			return fmt.Errorf("admin: send session bindings: %w", err)
		}
	}
	return nil
}

// sendChunks sends data in chunks of at most SnapshotChunkBytes, first (the header) carrying
// the first, the last one marked model_end; later chunks copy first's model and sessions.
func sendChunks(stream condisaggv1.Admin_IndexSnapshotServer, first *condisaggv1.IndexSnapshotChunk, data []byte) error {
	for off := 0; ; off += SnapshotChunkBytes {
		c := first
		if off > 0 {
			c = &condisaggv1.IndexSnapshotChunk{Model: first.Model, Sessions: first.Sessions}
		}
		end := min(off+SnapshotChunkBytes, len(data))
		c.Data, c.ModelEnd = data[off:end], end == len(data)
		if err := stream.Send(c); err != nil {
			return err
		}
		if c.ModelEnd {
			return nil
		}
	}
}
