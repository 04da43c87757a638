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
// model's index empty: the replica starts cold, as without warm_from, and says why. With
// session.affinity the peer's session bindings come along (after the indexes) and are imported
// into the new router before it decides anything; a peer that sends none (affinity off there,
// or a router older than them) or a damaged copy leaves the table empty, and the log says so.

// warmStart is the outcome of fetching the peer's snapshots.
type warmStart struct {
	peer    string
	started time.Time
	snaps   map[string][]byte // by model name
	// sessions is the peer's session snapshot (route.Router.ExportSessions); hasSessions says
	// the peer sent one.
	sessions    []byte
	hasSessions bool
	err         error // the fetch failed: every model starts cold
}

// snapshots is what the peer's IndexSnapshot stream held.
type snapshots struct {
	models      map[string][]byte // by model name
	sessions    []byte
	hasSessions bool
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
	snaps, err := fetchSnapshots(ctx, r.WarmFrom, adminclient.Options{
		TokenFile: cmp.Or(r.WarmTokenFile, cfg.AdminTokenFile), TLS: r.WarmTLS, CAFile: r.WarmCAFile}, r.WarmMaxBytes, cfg.Session.Affinity)
	w.snaps, w.sessions, w.hasSessions, w.err = snaps.models, snaps.sessions, snaps.hasSessions, err
	return w
}

// fetchSnapshots reads the IndexSnapshot stream of the peer at addr into one buffer per model
// (and one for the session bindings, asked for with sessions), refusing any of them past
// maxBytes before buffering it.
func fetchSnapshots(ctx context.Context, addr string, o adminclient.Options, maxBytes int64, sessions bool) (snapshots, error) {
	var out snapshots
	client, conn, err := adminclient.Dial(addr, o)
	if err != nil {
		return out, fmt.Errorf("replicas.warm_from %s: %w", addr, err)
	}
	defer conn.Close()
	stream, err := client.IndexSnapshot(ctx, &condisaggv1.IndexSnapshotRequest{MaxBytes: uint64(maxBytes), Sessions: sessions})
	if err != nil {
		return out, fmt.Errorf("replicas.warm_from %s: index snapshot: %w", addr, err)
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
			return out, fmt.Errorf("replicas.warm_from %s: index snapshot: %w", addr, err)
		}
		what := fmt.Sprintf("model %q snapshot", c.GetModel())
		if c.GetSessions() {
			what = "session bindings"
		}
		if !open {
			if want = c.GetTotalBytes(); want > uint64(maxBytes) {
				return out, fmt.Errorf("replicas.warm_from %s: %s of %d bytes exceeds replicas.warm_max_bytes %d", addr, what, want, maxBytes)
			}
			cur, open = make([]byte, 0, want), true
		}
		if uint64(len(cur)+len(c.GetData())) > want {
			return out, fmt.Errorf("replicas.warm_from %s: %s longer than its announced %d bytes", addr, what, want)
		}
		cur = append(cur, c.GetData()...)
		if c.GetModelEnd() {
			if uint64(len(cur)) != want {
				return out, fmt.Errorf("replicas.warm_from %s: %s ended at %d of %d bytes", addr, what, len(cur), want)
			}
			if c.GetSessions() {
				out.sessions, out.hasSessions = cur, true
			} else {
				snaps[c.GetModel()] = cur
			}
			open = false
		}
	}
	if open {
		return out, fmt.Errorf("replicas.warm_from %s: the snapshot stream ended inside a model", addr)
	}
	out.models = snaps
	return out, nil
}

// warmMetrics report the warm start: whether it was warm, what it copied and how long it took.
type warmMetrics struct {
	warm     prometheus.Gauge
	blocks   prometheus.Gauge
	seconds  prometheus.Gauge
	sessions prometheus.Gauge
}

func newWarmMetrics(reg prometheus.Registerer) *warmMetrics {
	m := &warmMetrics{
		warm: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start",
			Help: "1 when this replica started from a peer's index (replicas.warm_from) for every model, 0 when it started cold."}),
		blocks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start_blocks",
			Help: "Index entries (engine blocks over all workers and media) copied from the peer at start."}),
		seconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start_seconds",
			Help: "Time to warm: from asking the peer to the copied index being in place (0 when cold)."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_warm_start_sessions",
			Help: "Session bindings copied from the peer at start (session.affinity)."}),
	}
	reg.MustRegister(m.warm, m.blocks, m.seconds, m.sessions)
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
	s.warmMetrics = wm
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

// importWarmSessions loads the peer's session bindings into the new router, before it decides
// anything (session.affinity only).
func (s *service) importWarmSessions(affinity bool) {
	w := s.warm
	if w == nil || w.err != nil || !affinity {
		return
	}
	if !w.hasSessions {
		s.log.Warn("warm start: the peer sent no session bindings (its session.affinity is off, or it predates them); sessions start empty", "endpoint", w.peer)
		return
	}
	n, err := s.router.ImportSessions(w.sessions)
	if err != nil {
		s.log.Warn("warm start: the peer's session bindings cannot be imported; sessions start empty", "endpoint", w.peer, "err", err)
		return
	}
	s.warmMetrics.sessions.Set(float64(n))
	s.log.Info("warm start: session bindings copied from peer", "endpoint", w.peer, "sessions", n)
}
