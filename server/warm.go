package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/internal/adminclient"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/server/config"
)

// A warm start copies a running peer's prefix index before this replica's event streams start
// (replicas.warm_from): the peer's Admin IndexSnapshot gives every model's index with, per
// engine stream, the batch it ends at (kvindex.Position), and each stream then resumes right
// after that batch (kvevents Stream.Resume) instead of warming up from seq 0. Any failure (the
// peer down or refusing, a snapshot too large or damaged, another block size) leaves that
// model's index empty: the replica starts cold, as without warm_from, and says why.

// warmStart is the outcome of fetching the peer's snapshots.
type warmStart struct {
	peer    string
	started time.Time
	snaps   map[string][]byte // by model name
	err     error             // the fetch failed: every model starts cold
}

// fetchWarm asks the peer of cfg.Replicas for every model's snapshot, bounded by warm_timeout
// and warm_max_bytes; nil without warm_from.
func fetchWarm(ctx context.Context, cfg *config.Config) *warmStart {
	r := &cfg.Replicas
	if r.WarmFrom == "" {
		return nil
	}
	w := &warmStart{peer: r.WarmFrom, started: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, r.WarmTimeout)
	defer cancel()
	w.snaps, w.err = fetchSnapshots(ctx, r.WarmFrom, adminclient.Options{
		TokenFile: cmp.Or(r.WarmTokenFile, cfg.AdminTokenFile), TLS: r.WarmTLS, CAFile: r.WarmCAFile}, r.WarmMaxBytes)
	return w
}

// fetchSnapshots reads the IndexSnapshot stream of the peer at addr into one buffer per model,
// refusing a model's snapshot past maxBytes before buffering it.
func fetchSnapshots(ctx context.Context, addr string, o adminclient.Options, maxBytes int64) (map[string][]byte, error) {
	client, conn, err := adminclient.Dial(addr, o)
	if err != nil {
		return nil, fmt.Errorf("replicas.warm_from %s: %w", addr, err)
	}
	defer conn.Close()
	stream, err := client.IndexSnapshot(ctx, &condisaggv1.IndexSnapshotRequest{MaxBytes: uint64(maxBytes)})
	if err != nil {
		return nil, fmt.Errorf("replicas.warm_from %s: index snapshot: %w", addr, err)
	}
	snaps := map[string][]byte{}
	var cur []byte
	var want uint64
	open := false
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("replicas.warm_from %s: index snapshot: %w", addr, err)
		}
		if !open {
			if want = c.GetTotalBytes(); want > uint64(maxBytes) {
				return nil, fmt.Errorf("replicas.warm_from %s: model %q snapshot of %d bytes exceeds replicas.warm_max_bytes %d", addr, c.GetModel(), want, maxBytes)
			}
			cur, open = make([]byte, 0, want), true
		}
		if uint64(len(cur)+len(c.GetData())) > want {
			return nil, fmt.Errorf("replicas.warm_from %s: model %q snapshot longer than its announced %d bytes", addr, c.GetModel(), want)
		}
		cur = append(cur, c.GetData()...)
		if c.GetModelEnd() {
			if uint64(len(cur)) != want {
				return nil, fmt.Errorf("replicas.warm_from %s: model %q snapshot ended at %d of %d bytes", addr, c.GetModel(), len(cur), want)
			}
			snaps[c.GetModel()], open = cur, false
		}
	}
	if open {
		return nil, fmt.Errorf("replicas.warm_from %s: the snapshot stream ended inside a model", addr)
	}
	return snaps, nil
}

// warmMetrics report the warm start: whether it was warm, what it copied and how long it took.
type warmMetrics struct {
	warm    prometheus.Gauge
	blocks  prometheus.Gauge
	seconds prometheus.Gauge
}

func newWarmMetrics(reg prometheus.Registerer) *warmMetrics {
	m := &warmMetrics{
		warm: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start",
			Help: "1 when this replica started from a peer's index (replicas.warm_from) for every model, 0 when it started cold."}),
		blocks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start_blocks",
			Help: "Index entries (engine blocks over all workers and media) copied from the peer at start."}),
		seconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start_seconds",
			Help: "Time to warm: from asking the peer to the copied index being in place (0 when cold)."}),
	}
	reg.MustRegister(m.warm, m.blocks, m.seconds)
	return m
}

// importWarm loads model m's snapshot of the warm start into its new index, before any of its
// event streams starts; it reports the entries imported, or false when the model starts cold.
func (s *service) importWarm(m *servedModel) (int, bool) {
	w := s.warm
	if w == nil || w.err != nil {
		return 0, false
	}
	snap, ok := w.snaps[m.name]
	if !ok {
		s.log.Warn("warm start: the peer serves no such model; it starts cold", "endpoint", w.peer, "model", m.name)
		return 0, false
	}
	st, err := m.index.Import(snap)
	if err != nil {
		s.log.Warn("warm start: the peer's index cannot be imported; the model starts cold", "endpoint", w.peer, "model", m.name, "err", err)
		return 0, false
	}
	return st.Entries, true
}

// reportWarm logs and exports the warm start's outcome once every model was built.
func (s *service) reportWarm(warmModels, blocks int) {
	wm := newWarmMetrics(s.reg)
	w := s.warm
	switch {
	case w == nil:
		return
	case w.err != nil:
		s.log.Warn("warm start failed; starting cold", "endpoint", w.peer, "err", w.err)
		return
	}
	took := time.Since(w.started)
	wm.blocks.Set(float64(blocks))
	if warmModels == len(s.models) {
		wm.warm.Set(1)
		wm.seconds.Set(took.Seconds())
	}
	s.log.Info("warm start from peer", "endpoint", w.peer, "models", warmModels, "blocks", blocks,
		"seconds", took.Seconds(), slog.Bool("complete", warmModels == len(s.models)))
}
