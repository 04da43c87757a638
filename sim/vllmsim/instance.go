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
	// Server is the HTTP surface; its Worker and Registry are filled in by NewInstance.
	Server ServerConfig
}

// Instance is one vllm-sim process: a Worker, its event Publisher and the HTTP Server.
type Instance struct {
	Worker    *Worker
	Publisher *Publisher // nil when events are off
	Server    *Server
	Registry  *prometheus.Registry
}

// NewInstance wires a worker, publisher and server; nothing runs until Run.
func NewInstance(cfg InstanceConfig) (*Instance, error) {
	in := &Instance{Registry: prometheus.NewRegistry()}
	wc := WorkerConfig{Engine: cfg.Engine, TimeScale: cfg.TimeScale,
		Encoder: Encoder{Format: cfg.Format, Hashes: cfg.Hashes, BlockSize: cfg.Engine.WithDefaults().BlockSize}}
	if cfg.KVEvents.Enabled() {
		in.Publisher = NewPublisher(PublisherConfig{KVEventsConfig: cfg.KVEvents, OldReplayLayout: cfg.OldReplayLayout})
		wc.Events = in.Publisher.Publish
	}
	w, err := NewWorker(wc)
	if err != nil {
		return nil, err
	}
	in.Worker = w
	sc := cfg.Server
	sc.Worker, sc.Registry = w, in.Registry
	if in.Server, err = NewServer(sc); err != nil {
		return nil, err
	}
	return in, nil
}

// Run serves HTTP on ln and runs the worker and publisher until ctx ends, then shuts the HTTP
// server down (bounded by 5 s) and waits for every goroutine. It returns the first failure.
func (in *Instance) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	if in.Publisher != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[0] = in.Publisher.Run(ctx); errs[0] != nil {
				cancel()
			}
		}()
		if _, _, err := in.Publisher.Ready(ctx); err != nil {
			cancel()
			wg.Wait()
			return err
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if errs[1] = in.Worker.Run(ctx); errs[1] != nil {
			cancel()
		}
	}()
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
		errs[2] = err
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
