package cluster

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
	"github.com/prometheus/client_golang/prometheus"
)

// Options are per-run callbacks.
type Options struct {
	// Progress, if set, is called with the number of finished requests and the total, at most
	// every 256 requests and once at the end.
	Progress func(done, total int)
	// Trace, if set, sees every operation the run performs on the router and the index, in
	// order: decisions, releases and KV events. Slices in an Op are the run's own; copy them
	// to keep them.
	Trace func(Op)
	// Prompt, if set, gives request r's prompt tokens in place of Config.Vocab's expansion of
	// its segments: a test that replays real request bodies (chat, rendered by the real
	// tokenizer) runs the simulator on the same tokens. The slice is read, never changed.
	Prompt func(r *workload.Request) []uint32
	// Subset, if set, gives request r's subset hint (route.Request.Subset, the gateway's
	// envoy.lb.subset_hint; nil: none), as an endpoint picker in front of the router would.
	Subset func(r *workload.Request) []string
	// Model, if set, names request r's model as a request's `model` field would: "" or the
	// base model, one of Config.Models (that model's fleet serves it), or one of
	// Config.LoRAAdapters, whose blocks the engines and the router key with the adapter's
	// identity.
	Model func(r *workload.Request) string
}

// Epoch is the wall time of virtual time 0: the pool's clock and the router's Now read Epoch plus the
// virtual time.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// engine is one simulated worker.
type engine struct {
	id      string
	index   *kvindex.Index // the prefix index of the engine's model
	decode  bool
	e       *sim.Engine
	reqs    map[sim.RequestID]int32 // engine request -> workload index
	res     *sim.StepResult         // outcome of the step in flight
	pending bool                    // a step end or wake-up is queued
	waking  bool                    // the queued event is a wake-up (pre-emptible)
	gen     uint32
	busy    time.Duration
}

// reqState is the cluster's state of one request.
type reqState struct {
	prompt []uint32 // held until the decode engine has the request
	output []uint32
	ticket *route.Ticket // the decision's booking and what its answer teaches the router
	lora   sim.Adapter   // the adapter the request runs with (zero: the base model)
	decode int32         // engine index
	whole  bool          // the request runs entirely on one engine (local prefill on a decode or a prefill worker)
	// leg: the request is in its prefill leg on another engine than its decoder (a remote
	// prefill on a prefill engine, or a handoff's on the decode engine holding the prefix):
	// that engine's token is not the client's, and its end hands the request to st.decode.
	leg  bool
	last time.Duration
	n    int
	res  *workload.Result
}

// router is the decision pipeline as the simulator uses it: decisions (with their tickets)
// and the shadow candidate; *route.Router satisfies it.
type router interface {
	Decide(ctx context.Context, req *route.Request) (route.Outcome, error)
	SetShadow(c *policy.Config) error
	ShadowStats() route.ShadowStats
	SessionStats() route.SessionStats
}

// virtualClock is the pool's clock: epoch plus the cluster's virtual now.
type virtualClock struct{ now *time.Duration }

func (c virtualClock) Now() time.Time { return Epoch.Add(*c.now) }

// Cluster is one run's state. It belongs to one goroutine.
type Cluster struct {
	cfg     Config
	pcfg    policy.Config
	bs      int
	engines []*engine
	byID    map[string]int32
	pools   []*pool.Pool // one per model, Config.Models order
	now     time.Duration
	seq     uint64
	eq      engineQueue
	dq      deliveryQueue
	hq      legQueue
	reqs    []workload.Request
	state   []reqState
	rep     *Report
	done    int
	err     error

	router  router            // the server's decision pipeline (route.New)
	learner *feedback.Learner // what the router learns from the answers (slo feedback, role advice)
	// adapters are Config.LoRAAdapters as the engines know them (ids from 1, in order), and
	// loraNames their names as the index keys them.
	adapters  map[string]sim.Adapter
	loraNames map[string][]byte
	store     kvindex.Store
	opts      Options
	lastEnd   time.Duration
}

// Run simulates reqs (in arrival order) on the fleet of cfg and returns the report. It fails
// on an invalid config, when ctx ends, or when an engine can make no progress.
func Run(ctx context.Context, cfg Config, reqs []workload.Request, opts Options) (*Report, error) {
	c, err := newCluster(cfg, reqs, opts)
	if err != nil {
		return nil, err
	}
	if err := c.loop(ctx); err != nil {
		return nil, err
	}
	return c.finish(), nil
}

func newCluster(cfg Config, reqs []workload.Request, opts Options) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cluster{cfg: cfg, pcfg: cfg.policyConfig(), reqs: reqs, opts: opts,
		byID: make(map[string]int32)}
	if err := c.pcfg.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: policy config: %w", err)
	}
	c.bs = c.pcfg.BlockSize
	c.rep = &Report{Results: make([]workload.Result, len(reqs)), Decisions: make([]route.Record, len(reqs))}
	pc := c.pcfg
	c.rep.Policy, c.rep.RouterSeed, c.rep.SessionConfig = c.pcfg, RouterSeed(cfg.Seed), cfg.Sessions
	c.learner = feedback.New()
	c.adapters, c.loraNames = map[string]sim.Adapter{}, map[string][]byte{}
	for k, name := range cfg.LoRAAdapters {
		c.adapters[name] = sim.Adapter{ID: int64(k + 1), Name: name, Path: "/adapters/" + name}
		c.loraNames[name] = []byte(name)
	}
	ropts := route.Options{Policy: &pc, Seed: c.rep.RouterSeed, Now: c.clock, Learner: c.learner, Sessions: cfg.Sessions}
	models := cfg.Models
	if len(models) == 0 {
		models = []string{""}
	}
	for k, name := range models {
		fleet, rm, err := c.addFleet(k, name)
		if err != nil {
			return nil, err
		}
		if k == 0 {
			fleet.LoRAAdapters, rm.LoRAAdapters = cfg.LoRAAdapters, cfg.LoRAAdapters
		}
		c.rep.Models = append(c.rep.Models, fleet)
		c.pools = append(c.pools, rm.Pool)
		ropts.Models = append(ropts.Models, rm)
	}
	var err error
	c.router, err = route.New(ropts)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if cfg.Shadow != nil {
		sc := cfg.shadowConfig()
		if err := c.router.SetShadow(&sc); err != nil {
			return nil, fmt.Errorf("cluster: shadow: %w", err)
		}
		c.rep.ShadowPolicy = &sc
	}
	c.state = make([]reqState, len(reqs))
	for i := range reqs {
		c.state[i].res = &c.rep.Results[i]
		c.rep.Results[i] = workload.Result{Index: reqs[i].Index, Arrival: reqs[i].Arrival, InputTokens: reqs[i].InputTokens}
		if i > 0 && reqs[i].Arrival < reqs[i-1].Arrival {
			return nil, fmt.Errorf("cluster: request %d arrives at %v, before request %d (%v): workload must be in arrival order",
				i, reqs[i].Arrival, i-1, reqs[i-1].Arrival)
		}
	}
	return c, nil
}

// addFleet creates model k's engines (ids prefixed "m<k>-" after the first model), its pool
// and its prefix index, and returns its fleet for the report and its route.Model.
func (c *Cluster) addFleet(k int, name string) (ModelFleet, route.Model, error) {
	prefix := ""
	if k > 0 {
		prefix = "m" + strconv.Itoa(k) + "-"
	}
	ix, err := kvindex.New(kvindex.Config{BlockSize: c.bs})
	if err != nil {
		return ModelFleet{}, route.Model{}, fmt.Errorf("cluster: %w", err)
	}
	var workers []pool.WorkerConfig
	add := func(role pool.Role, n int) error {
		for i := range n {
			ec := c.cfg.Engine
			ec.Seed, ec.Events, ec.BlockSize = c.cfg.Seed+uint64(len(c.engines)), true, c.bs
			e, err := sim.New(ec)
			if err != nil {
				return fmt.Errorf("cluster: %s engine %d: %w", role, i, err)
			}
			ec = e.Config()
			id := prefix + string(role) + "-" + strconv.Itoa(i)
			c.byID[id] = int32(len(c.engines))
			c.engines = append(c.engines, &engine{id: id, index: ix, decode: role == pool.RoleDecode, e: e, reqs: make(map[sim.RequestID]int32)})
			ix.SetCapacity(kvindex.WorkerID(id), ec.NumGPUBlocks)
			workers = append(workers, pool.WorkerConfig{Name: id, Role: role,
				Endpoint:            "10.0." + strconv.Itoa(len(c.engines)/250) + "." + strconv.Itoa(1+len(c.engines)%250) + ":8000",
				NumGPUBlocks:        int64(ec.NumGPUBlocks),
				MaxNumBatchedTokens: int64(ec.MaxNumBatchedTokens)})
		}
		return nil
	}
	if err := add(pool.RolePrefill, c.cfg.Prefill); err != nil {
		return ModelFleet{}, route.Model{}, err
	}
	if err := add(pool.RoleDecode, c.cfg.Decode); err != nil {
		return ModelFleet{}, route.Model{}, err
	}
	pc := pool.Config{Workers: workers, BlockSize: c.bs}
	p, err := pool.New(pc, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry()), Clock: virtualClock{&c.now}})
	if err != nil {
		return ModelFleet{}, route.Model{}, fmt.Errorf("cluster: %w", err)
	}
	return ModelFleet{Name: name, Pool: pc}, route.Model{Name: name, Index: ix, Pool: p}, nil
}

const never = time.Duration(math.MaxInt64)

// loop runs the event queue until every request is done and every engine idle.
func (c *Cluster) loop(ctx context.Context) error {
	next := 0
	for iter := 0; ; iter++ {
		if iter&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cluster: run at t=%v: %w", c.now, err)
			}
		}
		if c.err != nil {
			return c.err
		}
		tA, tE, tD, tH := never, never, never, never
		if !c.hq.empty() {
			tH = c.hq.peek().at
		}
		if next < len(c.reqs) {
			tA = c.reqs[next].Arrival
		}
		if len(c.eq) > 0 {
			tE = c.eq[0].at
		}
		if !c.dq.empty() {
			tD = c.dq.peek().at
		}
		switch t := min(tA, tE, tD, tH); {
		case t == never:
			return c.checkDone()
		case t == tD:
			c.now = t
			d := c.dq.pop()
			c.apply(c.engines[d.eng], &d.ev)
		case t == tH:
			c.now = t
			c.handOver(c.hq.pop())
		case t == tE:
			c.now = t
			ev := c.eq.pop()
			c.fire(ev)
		default:
			c.now = t
			c.arrive(next)
			next++
		}
	}
}

// checkDone reports requests that never finished (an engine made no progress).
func (c *Cluster) checkDone() error {
	for i := range c.state {
		r := c.state[i].res
		if r.Err == "" && r.E2E == 0 {
			return fmt.Errorf("cluster: request %d (isl %d) never finished", i, c.reqs[i].InputTokens)
		}
	}
	return nil
}

// fire handles one engine event.
func (c *Cluster) fire(ev engineEvent) {
	en := c.engines[ev.eng]
	if ev.gen != en.gen {
		return // a pre-empted wake-up
	}
	en.pending, en.waking = false, false
	if ev.kind == kindStepEnd {
		c.deliver(ev.eng, en.res)
		en.res = nil
		c.lastEnd = max(c.lastEnd, c.now)
	}
	c.step(ev.eng)
}

// kick starts engine i if it is idle or only waiting for a transfer.
func (c *Cluster) kick(i int32) {
	en := c.engines[i]
	if en.pending && !en.waking {
		return
	}
	en.gen++
	en.pending, en.waking = false, false
	c.step(i)
}

// step runs one engine step at now and queues its end, or a wake-up for a pending transfer.
func (c *Cluster) step(i int32) {
	en := c.engines[i]
	if en.e.Idle() {
		return
	}
	res := en.e.Step(c.now)
	if res.Duration > 0 {
		en.res, en.pending = res, true
		en.busy += res.Duration
		c.push(i, c.now+res.Duration, kindStepEnd)
		return
	}
	c.publish(i, res.Events) // a transfer that completed with nothing to compute
	if t, ok := en.e.NextTransfer(); ok {
		en.pending, en.waking = true, true
		c.push(i, max(t, c.now+1), kindWake)
		return
	}
	c.err = fmt.Errorf("cluster: engine %s stuck at t=%v: %d running, %d waiting, %d of %d blocks used",
		en.id, c.now, en.e.Stats().Running, en.e.Stats().Waiting, en.e.Stats().UsedBlocks, en.e.Stats().NumGPUBlocks)
}

func (c *Cluster) push(i int32, at time.Duration, kind wakeKind) {
	c.seq++
	c.eq.push(engineEvent{at: at, seq: c.seq, eng: i, kind: kind, gen: c.engines[i].gen})
}
