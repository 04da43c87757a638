package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/bookbus"
	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/server/config"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/kvevents"
	kvzmq "github.com/condisagg/condisagg/kvevents/zmq"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/pool/kube"
	"github.com/condisagg/condisagg/pool/probe"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/server/eventstreams"
	"github.com/condisagg/condisagg/tokenizer"
)

// fileCheckInterval is how often serve looks for a changed configuration file.
const fileCheckInterval = 2 * time.Second

// Addrs are the bound addresses of one serve.
type Addrs struct {
	GRPC      string // ext_proc + health (Envoy)
	AdminGRPC string // Admin service
	HTTP      string // admin HTTP
}

// Hooks let tests observe the server; main passes none.
type Hooks struct {
	Listening func(Addrs)
	ExtProc   func(*grpc.Server)              // the ext_proc server, once built (tests stop it to see serve fail)
	Reloaded  func(trigger string, err error) // after every reload attempt
}

// servedModel is one model's index, workers and event streams.
type servedModel struct {
	name    string
	pool    *pool.Pool
	index   *kvindex.Index
	streams *eventstreams.Streams // nil without --router-kv-events
	group   *kvzmq.Group
	events  *kvzmq.Metrics // the model's event-stream metrics (nil without --router-kv-events)
	watcher *kube.Watcher  // nil without discovery.kubernetes entries for the model
	// warmBlocks are the index entries copied from a peer at start; warm says the copy was
	// imported (warm.go).
	warmBlocks int
	warm       bool
}

// service is one running `condisagg serve`.
type service struct {
	flags  *config.Flags
	log    *slog.Logger
	level  *slog.LevelVar
	cfg    atomic.Pointer[config.Config]
	reg    *prometheus.Registry
	models []*servedModel // in configuration order
	// bound is the SUB socket that publishers dial (router.kv_events_bind), run by run; nil
	// when nothing is bound.
	bound *kvzmq.Central
	// bus shares booked load with the other router replicas (replicas.nats_url); nil without.
	bus    *bookbus.Bus
	router *route.Router
	ext    *extproc.Server
	recent *decisionlog.Recent // the status page's last decisions and placement mix
	health *health.Server
	ready  atomic.Bool
	// startBodyBytes is max_body_bytes at startup: it fixed the ext_proc gRPC message limit.
	startBodyBytes int
	hooks          Hooks
	mu             sync.Mutex // serialises reloads
	// kube is the Kubernetes API client of discovery.kubernetes and kubeNS the namespace of
	// its entries that name none; nil without Kubernetes discovery (set by run before build).
	kube   kubernetes.Interface
	kubeNS string
	// warm is the peer's index fetched before build (replicas.warm_from); nil without it.
	warm        *warmStart
	warmMetrics *warmMetrics // registered by reportWarm
}

// Run is `condisagg serve`: it parses the flags, validates the configuration and serves until
// ctx ends. It returns the exit code: 2 for bad flags or configuration, 1 when serving failed.
func Run(ctx context.Context, args []string, stderr io.Writer, hooks Hooks) int {
	f := config.NewFlags()
	f.FS.SetOutput(stderr)
	if err := f.FS.Parse(args); err != nil {
		return 2
	}
	cfg, err := f.Load()
	if err != nil {
		fmt.Fprintf(stderr, "condisagg serve: invalid configuration:\n%v\n", err)
		return 2
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	s := &service{flags: f, level: level, log: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))}
	s.cfg.Store(cfg)
	s.hooks = hooks
	if err := s.run(ctx, hooks); err != nil {
		s.log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}

// run builds every component and serves until ctx ends.
func (s *service) run(ctx context.Context, hooks Hooks) error {
	cfg := s.cfg.Load()
	for _, w := range cfg.Settings.Policy.Warnings() {
		s.log.Warn("configuration warning", "err", w)
	}
	s.logCostModel(cfg)
	toks := make([]*tokenizer.Tokenizer, len(cfg.Models))
	for i, m := range cfg.Models {
		var err error
		// A Hub model ("hf:org/name") is fetched once into the hub cache and read from there
		// after; HF_HUB_OFFLINE=1 forbids the download (huggingface_hub's environment).
		toks[i], err = tokenizer.LoadModel(ctx, m.Tokenizer, tokenizer.HubOptionsFromEnv(),
			tokenizer.Options{CacheSegments: m.CacheSegments, ChatTemplateFile: m.ChatTemplate})
		if err != nil {
			return fmt.Errorf("load tokenizer %s of model %q: %w", m.Tokenizer, m.Name, err)
		}
	}
	if cfg.Kubernetes != nil {
		// client-go logs through klog: send it to the service's logger.
		klog.SetSlogLogger(s.log)
		var err error
		if s.kube, s.kubeNS, err = kube.NewClient(*cfg.Kubernetes); err != nil {
			return err
		}
	}
	defer func() {
		for _, m := range s.models {
			if m.group != nil {
				m.group.Close()
			}
		}
	}()
	// The peer's index is fetched before any model's event stream starts (build starts them),
	// so each stream resumes from the batch the copied index ends at.
	s.warm = fetchWarm(ctx, cfg)
	if err := s.build(ctx, cfg, toks); err != nil {
		return err
	}
	if s.bound != nil {
		stop, err := s.runBound(ctx, cfg.BoundEvents.Endpoint)
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.serve(ctx, cfg, hooks)
}

// runBound runs the bound KV event socket on a goroutine until the returned stop is called.
// It returns once the socket is bound, or the bind error (an address in use, a host that is
// not local) as a startup error.
func (s *service) runBound(ctx context.Context, endpoint string) (stop func(), err error) {
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = s.bound.Run(bctx) })
	stop = func() { cancel(); wg.Wait() }
	ep, err := s.bound.Endpoint(ctx)
	if ep == "" {
		stop()
		return nil, fmt.Errorf("router.kv_events_bind: %s cannot be bound (another process may hold the port): %w", endpoint, cmp.Or(runErr, err))
	}
	s.log.Info("KV event socket bound", "endpoint", ep)
	return stop, nil
}

// build creates the registry and, per model, the index, pool and event group, then the router.
func (s *service) build(ctx context.Context, cfg *config.Config, toks []*tokenizer.Tokenizer) error {
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Bus != nil {
		bc := *cfg.Bus
		bc.Metrics, bc.Logger = bookbus.NewMetrics(s.reg), s.log
		var err error
		if s.bus, err = bookbus.New(bc); err != nil {
			return err
		}
	}
	learner := feedback.New()
	ropts := route.Options{Policy: cfg.Settings.Policy, MaxPretokenBytes: cfg.MaxPretokenBytes, Learner: learner,
		Sessions: route.SessionConfig{Enabled: cfg.Session.Affinity, TTL: cfg.Session.TTL, Max: cfg.Session.MaxSessions}}
	if cfg.UnknownModel == "passthrough" {
		ropts.UnknownModel = route.UnknownPassthrough
	}
	for _, mc := range cfg.Models {
		m, err := s.buildModel(ctx, cfg, mc)
		if err != nil {
			return err
		}
		s.models = append(s.models, m)
	}
	warmModels, warmBlocks := 0, 0
	for _, m := range s.models {
		if m.warm {
			warmModels, warmBlocks = warmModels+1, warmBlocks+m.warmBlocks
		}
	}
	s.reportWarm(warmModels, warmBlocks)
	if err := s.buildBound(cfg); err != nil {
		return err
	}
	for i, mc := range cfg.Models {
		m := s.models[i]
		if m.group != nil {
			m.streams = eventstreams.New(m.group, s.bound)
		}
		rm := route.Model{Name: mc.Name, LoRAAdapters: mc.LoRAAdapters, Tokenizer: toks[i], Index: m.index,
			Pool: m.pool, BlockSize: mc.Pool.BlockSize, MaxModelLen: mc.MaxModelLen}
		if m.streams != nil {
			rm.Streams = m.streams
		}
		ropts.Models = append(ropts.Models, rm)
	}
	var err error
	if s.router, err = route.New(ropts); err != nil {
		return err
	}
	s.importWarmSessions(cfg.Session.Affinity)
	if s.recent, err = decisionlog.NewRecent(decisionlog.RecentOptions{}); err != nil {
		return err
	}
	s.ext, err = extproc.NewServer(extproc.ServerOptions{Router: s.router, Settings: cfg.Settings,
		Metrics: extproc.NewMetrics(s.reg), Logger: s.log, DecisionConcurrency: cfg.DecisionConcurrency, Recent: s.recent})
	if err != nil {
		return err
	}
	// The role advice is for the first model's fleet (both roles).
	workers := func() int { return len(s.router.Pool().Workers()) }
	return errors.Join(s.reg.Register(indexCollector{s.router.Models}),
		s.reg.Register(sessionCollector{s.router.SessionStats}),
		s.reg.Register(feedback.NewCollector(learner, s.router.Policy, workers)))
}

// buildModel creates one model's index, event group and pool. With several models each
// model's pool and event-stream metrics carry a constant label model=<name>.
func (s *service) buildModel(ctx context.Context, cfg *config.Config, mc config.Model) (*servedModel, error) {
	reg := prometheus.Registerer(s.reg)
	if len(cfg.Models) > 1 {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"model": mc.Name}, s.reg)
	}
	m := &servedModel{name: mc.Name}
	var err error
	keys := kvindex.KeysPlain
	if mc.Pool.Speculative == pool.SpeculativeEagle {
		keys = kvindex.KeysBigram // SGLang's EAGLE pages: a block with the token after it
	}
	if m.index, err = kvindex.New(kvindex.Config{BlockSize: mc.Pool.BlockSize, Keys: keys}); err != nil {
		return nil, err
	}
	m.warmBlocks, m.warm = s.importWarm(m)
	var onChange func(added, removed []pool.WorkerInfo)
	if cfg.Router.KVEvents {
		m.events = kvzmq.NewMetrics(reg)
		if m.group, err = kvzmq.NewGroup(kvzmq.Config{Metrics: m.events, Logger: s.log,
			MaxPayloadBytes: cfg.KVEventsMaxMessageBytes}, m.index, kvevents.Limits{}); err != nil {
			return nil, err
		}
		onChange = func(added, removed []pool.WorkerInfo) { s.membership(ctx, m, added, removed) }
	}
	// pool.New reports the workers it starts with through OnChange, so their event streams
	// start here; DNS-named workers follow when the pool's shell (pool/probe) resolves them.
	popts := pool.Options{Metrics: pool.NewMetrics(reg), Logger: s.log, OnChange: onChange}
	if s.bus != nil {
		popts.OnLocal = s.bus.Local(mc.Name)
	}
	m.pool, err = pool.New(mc.Pool, popts)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", mc.Name, err)
	}
	if s.bus != nil {
		s.bus.Attach(mc.Name, m.pool)
	}
	// Discovered workers join and leave m.pool through pool.SetMembers, which calls onChange
	// as a resolved DNS address does. The metrics exist even without discovery (dashboards).
	km := kube.NewMetrics(reg)
	if len(mc.Discovery) > 0 {
		if s.kube == nil {
			return nil, fmt.Errorf("model %q: discovery.kubernetes entries without a Kubernetes client", mc.Name)
		}
		m.watcher, err = kube.NewWatcher(mc.Discovery, m.pool, kube.Options{Client: s.kube, Namespace: s.kubeNS, Metrics: km, Logger: s.log})
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", mc.Name, err)
		}
	}
	return m, nil
}

// buildBound builds the bound KV event socket's streams (not yet running): each applies to its
// model's index and counts in its model's metrics; messages of no configured topic count in
// the first model's.
func (s *service) buildBound(cfg *config.Config) error {
	be := cfg.BoundEvents
	if be == nil {
		return nil
	}
	var streams []kvzmq.CentralStream
	for i, bs := range be.Streams {
		m := s.models[i]
		for _, b := range bs {
			streams = append(streams, kvzmq.CentralStream{Index: m.index, Metrics: m.events,
				StreamConfig: kvzmq.StreamConfig{Worker: b.Worker, Rank: int64(b.Rank), Topic: b.Topic, ReplayEndpoint: b.KVReplay}})
		}
	}
	var err error
	s.bound, err = kvzmq.NewCentralStreams(kvzmq.Config{Metrics: s.models[0].events, Logger: s.log,
		MaxPayloadBytes: cfg.KVEventsMaxMessageBytes}, be.Endpoint, streams, kvevents.Limits{})
	return err
}

// membership starts and stops model m's event streams as its workers join and leave.
func (s *service) membership(ctx context.Context, m *servedModel, added, removed []pool.WorkerInfo) {
	for _, w := range removed {
		if err := m.group.Remove(ctx, w.Engine, int64(w.Rank)); err != nil {
			s.log.Warn("stop event stream", "worker", w.ID, "err", err)
		}
		m.index.RemoveWorker(kvindex.WorkerID(w.ID))
	}
	for _, w := range added {
		if w.KVCapacityBlocks > 0 {
			m.index.SetCapacity(kvindex.WorkerID(w.ID), int(w.KVCapacityBlocks))
		}
		if w.KVEvents == "" {
			continue
		}
		// One stream per data-parallel rank: the pool already offset the endpoints by the rank,
		// and the stream indexes under kvevents.IndexWorkerID(engine, rank) == w.ID.
		sc := kvzmq.StreamConfig{Worker: w.Engine, Rank: int64(w.Rank), Endpoint: w.KVEvents, ReplayEndpoint: w.KVReplay}
		if err := m.group.Add(ctx, sc); err != nil {
			s.log.Warn("start event stream", "worker", w.ID, "endpoint", w.KVEvents, "err", err)
		}
	}
}

// serve runs the ext_proc gRPC server, the Admin gRPC server, the admin HTTP server and the
// background loops until ctx ends or a server fails (then the process exits non-zero, so its
// supervisor restarts it).
func (s *service) serve(ctx context.Context, cfg *config.Config, hooks Hooks) error {
	svc, err := admin.New(admin.Options{Router: s.router, Streams: s.reporter(), Reload: s.reloadFromAdmin,
		Promote: func(context.Context) error { return s.ext.PromoteShadow() }, Server: s.ext})
	if err != nil {
		return err
	}
	s.startBodyBytes = cfg.Settings.MaxBodyBytes
	gopts := extproc.GRPCOptions{MaxBodyBytes: s.startBodyBytes, TLS: cfg.TLS, MaxConcurrentStreams: uint32(cfg.MaxStreamsPerConnection)}
	g, hs := extproc.NewGRPCServer(s.ext, gopts)
	s.health = hs
	if hooks.ExtProc != nil {
		hooks.ExtProc(g)
	}
	ag := admin.NewServer(svc, admin.ServerOptions{TLS: cfg.Admin.TLS, Token: cfg.Admin.Token})
	var lis [3]net.Listener
	for i, addr := range []string{cfg.Listen, cfg.AdminGRPCListen, cfg.AdminListen} {
		if lis[i], err = net.Listen("tcp", addr); err != nil {
			for _, l := range lis[:i] {
				l.Close()
			}
			return fmt.Errorf("listen %s: %w", addr, err)
		}
	}
	// A connection past max_connections waits in the kernel's accept queue until one closes.
	glis, alis, hlis := netutil.LimitListener(lis[0], cfg.MaxConnections), lis[1], lis[2]
	if cfg.Admin.TLS != nil {
		hlis = tls.NewListener(hlis, cfg.Admin.TLS)
	}
	hsrv := &http.Server{Handler: s.httpHandler(svc, cfg.Admin.Token), ReadHeaderTimeout: 10 * time.Second}
	// Readiness is known before the first health check can arrive: Envoy marks a router that
	// answers NOT_SERVING unhealthy and does not ask again for its whole interval.
	s.updateReady()
	s.log.Info("serving", "endpoint", glis.Addr().String(), "admin_grpc", alis.Addr().String(),
		"admin", hlis.Addr().String(), "policy", string(cfg.Settings.Policy.Disagg.Policy))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if hooks.Listening != nil {
		hooks.Listening(Addrs{GRPC: glis.Addr().String(), AdminGRPC: alis.Addr().String(), HTTP: hlis.Addr().String()})
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 4+len(s.models)) // three servers, the bus and at most one discovery watcher per model
	failed := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("%s: %w", what, err)
			stop()
		}
	}
	for _, m := range s.models {
		wg.Go(func() { probe.New(m.pool, probe.Options{Logger: s.log}).Run(ctx) })
		if m.watcher != nil {
			wg.Go(func() { failed("kubernetes discovery", m.watcher.Run(ctx)) })
		}
	}
	if s.bus != nil {
		wg.Go(func() { failed("replicas bus", s.bus.Run(ctx)) })
	}
	wg.Go(func() { s.watchReady(ctx) })
	wg.Go(func() { s.watchConfig(ctx, hup) })
	wg.Go(func() {
		err := extproc.Serve(ctx, g, hs, glis, cfg.UnreadyDelay, cfg.DrainTimeout)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped unexpectedly")
		}
		failed("ext_proc gRPC server", err)
	})
	wg.Go(func() {
		err := ag.Serve(alis)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		failed("admin gRPC server", err)
	})
	wg.Go(func() {
		if err := hsrv.Serve(hlis); !errors.Is(err, http.ErrServerClosed) {
			failed("admin HTTP server", err)
		}
	})
	<-ctx.Done()
	ag.Stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hsrv.Shutdown(shutdownCtx)
	cancel()
	wg.Wait()
	s.ext.Wait() // every ext_proc stream's receive goroutine (the gRPC server has stopped)
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// reporter is the admin's stream reporter (nil without event streams).
func (s *service) reporter() admin.StreamReporter {
	var all eventstreams.Models
	for _, m := range s.models {
		if m.streams != nil {
			all = append(all, m.streams)
		}
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

// readyEvery is how often readiness and stream silence are re-evaluated.
const readyEvery = 250 * time.Millisecond

// watchReady re-evaluates readiness and stream silence every readyEvery.
func (s *service) watchReady(ctx context.Context) {
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	silent := map[string]bool{}
	for {
		s.updateReady()
		for _, w := range s.ext.UpdateSilence(time.Now(), silent) {
			s.log.Warn("KV event stream silence changed", "worker", w, "silent", silent[w])
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// updateReady sets gRPC health from the pool: SERVING while at least one decode worker is
// healthy. One unhealthy worker does not flip the whole service; /readyz lists it.
func (s *service) updateReady() {
	ready, _ := s.readiness()
	if s.ready.Swap(ready) != ready || ready {
		extproc.SetReady(s.health, ready)
	}
}

// readiness reports whether the router can route (a healthy decode worker exists) and one line
// per worker for /readyz: role, health, and whether its KV event stream has been seen.
// With several models, each line starts with the model's name, and a model without a healthy
// decode worker is named (its requests get 503) while the others keep the router ready.
func (s *service) readiness() (bool, []string) {
	var lines []string
	ready := false
	for _, m := range s.models {
		prefix, modelReady := "", false
		if len(s.models) > 1 {
			prefix = "model " + m.name + ": "
		}
		for _, w := range m.pool.Workers() {
			state := "healthy"
			if !w.Healthy {
				state = fmt.Sprintf("unhealthy (%s for %s)", w.HealthReason, time.Since(w.HealthSince).Round(time.Second))
			}
			modelReady = modelReady || (w.Role == pool.RoleDecode && w.Healthy)
			line := fmt.Sprintf("%s%s %s %s", prefix, w.ID, w.Role, state)
			if m.streams != nil && (w.KVEvents != "" || m.streams.Has(w.ID)) && !m.streams.Seen(w.ID) {
				line += " (no KV event yet: no cache credit)"
			}
			lines = append(lines, line)
		}
		if !modelReady && len(s.models) > 1 {
			lines = append(lines, prefix+"no healthy decode worker")
		}
		ready = ready || modelReady
	}
	if !ready {
		lines = append(lines, "no healthy decode worker")
	}
	if s.bus != nil {
		lines = append(lines, s.busLine())
	}
	return ready, lines
}

// busLine is the /readyz line of the shared-booking bus. A lost bus does not make the
// replica unready: it books what it routes, as a single replica does.
func (s *service) busLine() string {
	peers := 0
	for _, m := range s.models {
		peers += m.pool.PeerBookings()
	}
	if s.bus.Connected() {
		return fmt.Sprintf("replicas bus: connected as %s (%d peer bookings)", s.bus.Replica(), peers)
	}
	return fmt.Sprintf("replicas bus: down, booking locally as %s (%d peer bookings until their leases end)", s.bus.Replica(), peers)
}

// watchConfig reloads on SIGHUP (hup) and when the file changes.
func (s *service) watchConfig(ctx context.Context, hup <-chan os.Signal) {
	path := s.flags.ConfigPath
	// The cost model file (router.cost_model_file) is watched with the configuration: a new
	// calibration applies as a changed configuration does, and a bad one is rejected alike.
	stamps := func() [2]config.Stamp {
		return [2]config.Stamp{config.FileStamp(path), config.FileStamp(s.cfg.Load().Router.CostModelFile)}
	}
	last := stamps()
	t := time.NewTicker(fileCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = s.reload("sighup")
			last = stamps()
		case <-t.C:
			if st := stamps(); st != last {
				last = st
				_ = s.reload("file_changed")
			}
		}
	}
}

func (s *service) reloadFromAdmin(context.Context) error { return s.reload("admin") }

// reload re-reads the file (flags still override it), validates it and swaps the
// reloadable settings in; a bad file keeps the old configuration.
func (s *service) reload(trigger string) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hooks.Reloaded != nil {
		defer func() { s.hooks.Reloaded(trigger, err) }()
	}
	cfg, err := s.flags.Load()
	if err != nil {
		s.log.Warn("configuration reload rejected; keeping the old configuration", "reason", trigger, "err", err)
		return err
	}
	old := s.cfg.Load()
	ceiling := extproc.BodyCeiling(s.startBodyBytes)
	if err = blockSizeChange(old, cfg); err != nil {
		s.log.Warn("configuration reload rejected; keeping the old configuration", "reason", trigger, "err", err)
		return err
	}
	if cfg.Settings.MaxBodyBytes > ceiling {
		// A body the gRPC message limit cannot carry would skip routing instead of getting 413.
		err = fmt.Errorf("config: max_body_bytes: %d is above %d, the most the ext_proc gRPC message limit set at "+
			"startup carries; restart to raise it", cfg.Settings.MaxBodyBytes, ceiling)
	} else {
		err = s.ext.Reload(cfg.Settings)
	}
	if err != nil {
		s.log.Warn("configuration reload rejected; keeping the old configuration", "reason", trigger, "err", err)
		return err
	}
	s.cfg.Swap(cfg)
	s.level.Set(cfg.LogLevel)
	if restart := config.RestartNeeded(old, cfg); restart != "" {
		s.log.Warn("configuration reloaded; some changes need a restart", "reason", trigger, "err", restart)
		return nil
	}
	s.log.Info("configuration reloaded", "reason", trigger, "policy", string(cfg.Settings.Policy.Disagg.Policy))
	s.logCostModel(cfg)
	return nil
}

// logCostModel says which cost model the slo policy (live and shadow) forecasts with: a model
// file (router.cost_model_file) or a named calibration.
func (s *service) logCostModel(cfg *config.Config) {
	for _, c := range []struct {
		which string
		pc    *policy.Config
	}{{"live", cfg.Settings.Policy}, {"shadow", cfg.Settings.Shadow}} {
		if c.pc == nil || c.pc.Disagg.Policy != policy.SLOKind {
			continue
		}
		d := c.pc.Disagg
		s.log.Info("slo policy cost model", "policy", c.which, "cost_model", d.Cost.Name, "source", d.CostModelSource())
	}
}

// blockSizeChange refuses a reload that changes a model's block size (the running index and
// pool keep theirs); a changed model list only warns through RestartNeeded.
func blockSizeChange(old, cur *config.Config) error {
	if len(old.Models) == 1 && len(cur.Models) == 1 {
		if o, c := old.Models[0].Pool.BlockSize, cur.Models[0].Pool.BlockSize; o != c {
			return fmt.Errorf("config: model.block_size: %d cannot change on reload (running with %d); restart instead", c, o)
		}
		return nil
	}
	for i, om := range old.Models {
		for _, cm := range cur.Models {
			if cm.Name == om.Name && cm.Pool.BlockSize != om.Pool.BlockSize {
				return fmt.Errorf("config: models[%d].block_size: %d cannot change on reload (running with %d); restart instead",
					i, cm.Pool.BlockSize, om.Pool.BlockSize)
			}
		}
	}
	return nil
}
