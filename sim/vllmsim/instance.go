package vllmsim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/condisagg/condisagg/sim"
	"github.com/prometheus/client_golang/prometheus"
)

// InstanceConfig configures a whole simulated vLLM worker.
type InstanceConfig struct {
	Engine    sim.Config
	TimeScale float64
	KVEvents  KVEventsConfig // publisher off unless KVEvents.Enabled()
	Format    EventFormat
	Hashes    HashEncoding
	// OldReplayLayout answers replays in the layout of vLLM < 0.26.
	OldReplayLayout bool
	// DataParallelSize is vLLM's --data-parallel-size: that many engines (ranks) behind the
	// one HTTP server, each with its own KV cache and its own publisher on the PUB and replay
	// ports + rank (vLLM's offset_endpoint_port), its batches carrying data_parallel_rank.
	// 0 or 1 = one engine.
	DataParallelSize int
	// Server is the HTTP surface; its Worker and Registry are filled in by NewInstance.
	Server ServerConfig
}

// Instance is one vllm-sim process: one Worker and event Publisher per data-parallel rank and
// the HTTP Server in front of them.
type Instance struct {
	Worker     *Worker    // rank 0
	Publisher  *Publisher // rank 0's; nil when events are off
	Workers    []*Worker  // by data-parallel rank
	Publishers []*Publisher
	Server     *Server
	Registry   *prometheus.Registry
}

// NewInstance wires the workers, publishers and server; nothing runs until Run.
func NewInstance(cfg InstanceConfig) (*Instance, error) {
	in := &Instance{Registry: prometheus.NewRegistry()}
	n := max(cfg.DataParallelSize, 1)
	for rank := range n {
		wc := WorkerConfig{Engine: cfg.Engine, TimeScale: cfg.TimeScale,
			Encoder: Encoder{Format: cfg.Format, Hashes: cfg.Hashes, BlockSize: cfg.Engine.WithDefaults().BlockSize, Rank: int64(rank)}}
		if cfg.KVEvents.Enabled() {
			kv, err := cfg.KVEvents.ForRank(rank)
			if err != nil {
				return nil, err
			}
			p := NewPublisher(PublisherConfig{KVEventsConfig: kv, OldReplayLayout: cfg.OldReplayLayout})
			in.Publishers = append(in.Publishers, p)
			wc.Events = p.Publish
		}
		w, err := NewWorker(wc)
		if err != nil {
			return nil, err
		}
		in.Workers = append(in.Workers, w)
	}
	in.Worker = in.Workers[0]
	if len(in.Publishers) > 0 {
		in.Publisher = in.Publishers[0]
	}
	sc := cfg.Server
	sc.Worker, sc.Workers, sc.Registry = in.Worker, in.Workers, in.Registry
	var err error
	if in.Server, err = NewServer(sc); err != nil {
		return nil, err
	}
	return in, nil
}

// Start runs Run on ln in the background, for tests and embedders that own no context of their
// own, and returns the function that stops it: it ends the run and returns Run's error; later
// calls return the same error at once.
func (in *Instance) Start(ln net.Listener) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, ln) }()
	return sync.OnceValue(func() error {
		cancel()
		return <-done
	})
}

// Run serves HTTP on ln and runs the worker and publisher until ctx ends, then shuts the HTTP
// server down (bounded by 5 s) and waits for every goroutine. It returns the first failure.
func (in *Instance) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	n := len(in.Workers)
	errs := make([]error, 2*n+1) // publishers, workers, HTTP
	// One publisher at a time: czmq initialises itself on the first socket of the process,
	// and two goroutines creating first sockets at once trip its zsys_init assertion.
	for i, p := range in.Publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = p.Run(ctx); errs[i] != nil {
				cancel()
			}
		}()
		if _, _, err := p.Ready(ctx); err != nil {
			cancel()
			wg.Wait()
			return err
		}
	}
	for i, w := range in.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[n+i] = w.Run(ctx); errs[n+i] != nil {
				cancel()
			}
		}()
	}
	srv := &http.Server{Handler: in.Server, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer scancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		errs[2*n] = err
		cancel()
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			errs[i] = nil // stopped by the caller
		}
	}
	return errors.Join(errs...)
}
