package pool

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sentinel errors, matched with errors.Is.
var (
	ErrUnknownWorker    = errors.New("unknown worker")
	ErrDuplicateRequest = errors.New("request already booked")
	ErrInvalidBooking   = errors.New("invalid booking")
)

// Clock supplies the time of every booking stamp, expiry, scrape age, health transition and
// probe slot.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options are the injected collaborators of a Pool. Metrics is required.
type Options struct {
	Metrics *Metrics
	Clock   Clock        // default the system clock
	Logger  *slog.Logger // default discards
	// OnChange, if set, is called after a membership change with the added and removed
	// workers, outside Pool.mu, on the goroutine that ran New, ApplyLookups or SetMembers; calls
	// are serialised in the order of the changes (kvevents uses it to open and close
	// subscriptions and drop a departed worker's index entries).
	OnChange func(added, removed []WorkerInfo)
	// OnLocal, if set, is told of every change of this replica's own bookings (Book,
	// ReleasePrefill, Release, Sweep), in their order, under Pool.mu: it must not block or call
	// the pool (the shared-booking shell, bookbus, copies the change into a bounded queue).
	OnLocal func(LocalChange)
}

// Pool is the worker registry and its load accounting. All methods are safe for concurrent use.
type Pool struct {
	cfg     Config
	hp      healthParams
	m       *Metrics
	clock   Clock
	log     *slog.Logger
	onChg   func(added, removed []WorkerInfo)
	onLocal func(LocalChange)
	kick    chan struct{} // wakes the shell's probe loop (capacity 1: one pending wake-up is enough)

	// discMu serialises membership changes (New, ApplyLookups, SetMembers and their OnChange
	// calls) and guards resolved and members; it is taken before mu, never while holding it.
	discMu   sync.Mutex
	resolved []spec            // the config's workers at the last ApplyLookups (literal IPs at New)
	members  map[string][]spec // the workers of each discovery source (SetMembers), by source

	mu       sync.RWMutex       // guards everything below and every worker's mutable fields
	byID     map[string]*worker // discovered workers
	decode   []*worker          // discovered decode workers, in discovery order
	prefill  []*worker          // discovered prefill workers, in discovery order
	version  uint64             // bumped on every membership or eligibility change
	changed  chan struct{}      // closed and replaced with every version bump (Changed)
	probing  bool               // the shell probes (BeginProbing): passive signals count
	bookings map[string]*record // open bookings by request id
	// freeKeys are key slices of released bookings, reused by Book so that a steady stream of
	// decisions does not allocate a copy of every prompt's keys (at most maxFreeKeySlices,
	// each of capacity at most maxFreeKeyCap: 8 MiB retained at most).
	freeKeys [][]uint64
	peers    map[peerKey]*peerRecord // other replicas' open bookings (peer.go)
	released map[peerKey]time.Time   // peer releases that arrived before their booking, until when they are kept
}

const (
	maxFreeKeySlices = 128
	maxFreeKeyCap    = 8192 // keys: a 128k-token prompt at 16-token blocks
)

// worker is one discovered worker. Immutable fields are set at discovery; the rest is guarded
// by Pool.mu.
type worker struct {
	id, name           string
	engine             string // id of the server (rank 0's id); == id without data parallelism
	kind               EngineKind
	rank, dpSize       int // data-parallel rank and size (1 without data parallelism)
	role               Role
	endpoint           string // resolved ip:port
	kvEvents, kvReplay string
	cfgKVCap, cfgMNBT  int64 // from config, 0 = unknown
	g                  workerGauges

	removed bool
	// Health inputs; the worker is eligible only while none excludes it (README "Health", H6).
	extHealthy     bool        // SetHealth; true at discovery
	scrapeFailures int         // consecutive failed /metrics scrapes
	health         healthState // probes and passive signals
	probe          probeSlot
	eligible       bool         // every input says healthy; what Snapshot and Book read
	reason         HealthReason // why eligible last changed, or what still excludes it
	since          time.Time    // when eligible last changed (Options.Clock)
	scrape         Scrape
	apt            int64     // active prefill tokens
	active         keyCounts // chained block key -> reference count (bypass bookings)
	unique         int64     // unique blocks: remote bookings and partial tails
	requests       int64     // open bookings that touch this worker
	decoding       int64     // open bookings that decode on this worker
}

// New validates cfg and registers every worker whose endpoint is a literal IP. Workers named by
// DNS appear at the first ApplyLookups (pool/probe resolves at once). The Pool starts no
// goroutine and does no I/O: the shell (pool/probe) probes, scrapes and resolves for it.
func New(cfg Config, opts Options) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool: new: %w", err)
	}
	if opts.Metrics == nil {
		return nil, fmt.Errorf("pool: new: Options.Metrics is nil: %w", ErrInvalidBooking)
	}
	p := &Pool{
		cfg:      cfg.withDefaults(),
		m:        opts.Metrics,
		kick:     make(chan struct{}, 1),
		changed:  make(chan struct{}),
		clock:    opts.Clock,
		log:      opts.Logger,
		onChg:    opts.OnChange,
		onLocal:  opts.OnLocal,
		peers:    make(map[peerKey]*peerRecord),
		released: make(map[peerKey]time.Time),
		byID:     make(map[string]*worker),
		bookings: make(map[string]*record),
		members:  make(map[string][]spec),
	}
	if p.clock == nil {
		p.clock = systemClock{}
	}
	if p.log == nil {
		p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var want []spec
	for _, wc := range p.cfg.Workers {
		host, port, _ := splitHostPort(wc.Endpoint)
		if _, err := netip.ParseAddr(host); err == nil {
			want = append(want, newSpecs(wc, wc.Name, host, port, "")...)
		}
	}
	p.hp = p.cfg.healthParams()
	p.discMu.Lock()
	defer p.discMu.Unlock()
	p.resolved = want
	p.applyLocked()
	return p, nil
}

// spec is one worker that discovery wants present: one data-parallel rank of one address.
type spec struct {
	id     string
	engine string // the id of the address (rank 0's id)
	rank   int
	wc     WorkerConfig
	ep     string
	ev     string
	rp     string
}

// newSpecs returns the workers of one address of wc: one per data-parallel rank, rank r > 0
// named RankID(id, r), with the event endpoints offset by r as vLLM offsets them.
func newSpecs(wc WorkerConfig, id, ip, port, dnsHost string) []spec {
	ev, rp := rewriteHost(wc.KVEvents, dnsHost, ip), rewriteHost(wc.KVReplay, dnsHost, ip)
	out := make([]spec, wc.ranks())
	for r := range out {
		out[r] = spec{id: RankID(id, r), engine: id, rank: r, wc: wc, ep: joinHostPort(ip, port),
			ev: offsetPort(ev, r), rp: offsetPort(rp, r)}
	}
	return out
}

// SplitRankID is the inverse of RankID: the server's id and the rank of worker id. Worker
// names cannot contain '/', so the split is unambiguous.
func SplitRankID(id string) (engine string, rank int) {
	i := strings.LastIndex(id, "/dp")
	if i < 0 {
		return id, 0
	}
	r, err := strconv.Atoi(id[i+3:])
	if err != nil || r <= 0 || strconv.Itoa(r) != id[i+3:] {
		return id, 0
	}
	return id[:i], r
}

// RankID is the worker id of data-parallel rank rank of the server whose worker id is id:
// id itself for rank 0, "<id>/dp<rank>" otherwise. It equals kvevents.IndexWorkerID, so a
// rank's event stream indexes under its worker id.
func RankID(id string, rank int) string {
	if rank == 0 {
		return id
	}
	return id + "/dp" + strconv.Itoa(rank)
}

// rewriteHost replaces the host of a tcp:// URL by ip when it equals dnsHost.
func rewriteHost(raw, dnsHost, ip string) string {
	if raw == "" || dnsHost == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() != dnsHost {
		return raw
	}
	u.Host = joinHostPort(ip, u.Port())
	return u.String()
}

// Lookup is the DNS answer for one config worker whose endpoint names a host: Lookups lists
// them, the shell (pool/probe) fills Addrs or Err, and ApplyLookups applies the answers.
type Lookup struct {
	Name  string   // the config worker's name
	Host  string   // the DNS name of its endpoint
	Addrs []string // the addresses found
	Err   error    // the lookup's failure
}

// Lookups returns one Lookup to perform per DNS-named config worker, in config order.
func (p *Pool) Lookups() []Lookup {
	var out []Lookup
	for _, wc := range p.cfg.Workers {
		host, _, _ := splitHostPort(wc.Endpoint)
		if _, err := netip.ParseAddr(host); err != nil {
			out = append(out, Lookup{Name: wc.Name, Host: host})
		}
	}
	return out
}

// ApplyLookups applies one round of DNS answers (from Lookups) as the membership change: new
// addresses join, vanished ones leave (their bookings are dropped). A name whose lookup failed
// (or that ls does not answer) keeps its previous workers; the errors are returned joined.
// Workers of discovery sources (SetMembers) are not touched.
func (p *Pool) ApplyLookups(ls []Lookup) error {
	var want []spec
	var errs []error
	var failed []string // config names whose current workers are kept
	for _, wc := range p.cfg.Workers {
		host, port, _ := splitHostPort(wc.Endpoint)
		if _, err := netip.ParseAddr(host); err == nil {
			want = append(want, newSpecs(wc, wc.Name, host, port, "")...)
			continue
		}
		addrs, err := lookupOf(ls, wc.Name)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			p.m.ResolveErrors.WithLabelValues(wc.Name).Inc()
			errs = append(errs, fmt.Errorf("pool: resolve worker=%s host=%s: %w", wc.Name, host, err))
			failed = append(failed, wc.Name)
			continue
		}
		for _, a := range slices.Compact(slices.Sorted(slices.Values(addrs))) {
			if _, err := netip.ParseAddr(a); err != nil {
				continue
			}
			want = append(want, newSpecs(wc, wc.Name+"@"+joinHostPort(a, port), a, port, host)...)
		}
	}
	p.discMu.Lock()
	defer p.discMu.Unlock()
	for _, s := range p.resolved {
		if slices.Contains(failed, s.wc.Name) {
			want = append(want, s)
		}
	}
	p.resolved = want
	p.applyLocked()
	return errors.Join(errs...)
}

// lookupOf returns the answer of ls for config worker name.
func lookupOf(ls []Lookup, name string) ([]string, error) {
	for _, l := range ls {
		if l.Name == name {
			return l.Addrs, l.Err
		}
	}
	return nil, errors.New("not looked up")
}

// Config returns the pool's configuration with its defaults filled in: the shell reads its
// intervals, timeouts and paths there.
func (p *Pool) Config() Config {
	c := p.cfg
	c.Workers = slices.Clone(c.Workers)
	return c
}

// applyLocked makes the registry equal to the config's resolved workers plus every discovery
// source's; p.discMu must be held.
func (p *Pool) applyLocked() {
	want := slices.Clone(p.resolved)
	for _, src := range slices.Sorted(maps.Keys(p.members)) {
		want = append(want, p.members[src]...)
	}
	p.apply(want)
}

// apply makes the discovered set equal to want. A worker whose spec changed under the same id
// (another endpoint, event endpoints, role or capacity) leaves and joins again.
func (p *Pool) apply(want []spec) {
	var added, removed []WorkerInfo
	p.mu.Lock()
	wantID := make(map[string]bool, len(want))
	for _, s := range want {
		wantID[s.id] = true
	}
	for id, w := range p.byID {
		if wantID[id] {
			continue
		}
		removed = append(removed, p.infoLocked(w))
		p.removeLocked(w)
	}
	for _, s := range want {
		if w, ok := p.byID[s.id]; ok {
			if w.sameSpec(s) {
				continue
			}
			removed = append(removed, p.infoLocked(w))
			p.removeLocked(w)
		}
		w := &worker{id: s.id, engine: s.engine, kind: s.wc.Engine.Kind(), rank: s.rank, dpSize: s.wc.ranks(), name: s.wc.Name, role: s.wc.Role,
			endpoint: s.ep, kvEvents: s.ev, kvReplay: s.rp,
			cfgKVCap: s.wc.NumGPUBlocks, cfgMNBT: s.wc.MaxNumBatchedTokens, extHealthy: true,
			eligible: true, reason: ReasonDiscovered, since: p.clock.Now()}
		w.scrape.NumGPUBlocks, w.scrape.MaxNumBatchedTokens, w.scrape.BlockSize = -1, -1, -1
		w.g = p.m.workerGauges(w.id, w.role)
		p.byID[w.id] = w
		if w.role == RoleDecode {
			p.decode = append(p.decode, w)
		} else {
			p.prefill = append(p.prefill, w)
		}
		p.publishLocked(w)
		added = append(added, p.infoLocked(w))
	}
	if len(added)+len(removed) > 0 {
		p.bumpLocked()
	}
	p.m.Workers.WithLabelValues(string(RoleDecode)).Set(float64(len(p.decode)))
	p.m.Workers.WithLabelValues(string(RolePrefill)).Set(float64(len(p.prefill)))
	p.mu.Unlock()
	if len(added) > 0 {
		p.kickProber() // probe newcomers at once
	}
	if p.onChg != nil && len(added)+len(removed) > 0 {
		p.onChg(added, removed)
	}
}

// sameSpec reports whether w is what s describes, so that re-applying s keeps w.
func (w *worker) sameSpec(s spec) bool {
	return w.engine == s.engine && w.kind == s.wc.Engine.Kind() && w.rank == s.rank && w.dpSize == s.wc.ranks() && w.name == s.wc.Name &&
		w.role == s.wc.Role && w.endpoint == s.ep && w.kvEvents == s.ev && w.kvReplay == s.rp &&
		w.cfgKVCap == s.wc.NumGPUBlocks && w.cfgMNBT == s.wc.MaxNumBatchedTokens
}

// removeLocked drops w from discovery with all its load; bookings that also touch another
// worker keep that part.
func (p *Pool) removeLocked(w *worker) {
	w.removed = true
	delete(p.byID, w.id)
	if w.role == RoleDecode {
		p.decode = slices.DeleteFunc(p.decode, func(x *worker) bool { return x == w })
	} else {
		p.prefill = slices.DeleteFunc(p.prefill, func(x *worker) bool { return x == w })
	}
	w.apt, w.unique, w.requests = 0, 0, 0
	w.active.reset()
	p.m.deleteWorker(w.id)
}

// SetHealth marks a worker healthy or not by hand (reason "manual"). It is one input of
// eligibility: SetHealth(id, true) does not bring back a worker that probes or scrapes
// exclude. Ineligible workers are left out of every Snapshot and Book.
func (p *Pool) SetHealth(id string, healthy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("pool: set health worker=%s: %w", id, ErrUnknownWorker)
	}
	if w.extHealthy != healthy {
		w.extHealthy = healthy
		p.updateHealthLocked(w, ReasonManual, nil)
	}
	return nil
}

func (p *Pool) healthyLocked(w *worker) bool { return w.eligible }

// kvCap is kvcap: config, else scraped (0 is vLLM's Ray-DP sentinel), else -1 (unknown).
func (w *worker) kvCap() int64 {
	if w.cfgKVCap > 0 {
		return w.cfgKVCap
	}
	return w.scrape.NumGPUBlocks
}

// mnbt is max_num_batched_tokens: config, else scraped, else 0 (unknown).
func (w *worker) mnbt() int64 {
	if w.cfgMNBT > 0 {
		return w.cfgMNBT
	}
	return max(w.scrape.MaxNumBatchedTokens, 0)
}

func (w *worker) decodeBlocks() int64 { return int64(w.active.len()) + w.unique }

// WorkerInfo describes one discovered worker for ListWorkers, discovery callbacks and logs.
type WorkerInfo struct {
	ID, Name string
	// Engine is the id of the worker's server (its rank 0); Rank and DataParallelSize place
	// the worker among that server's data-parallel ranks (0 and 1 without data parallelism).
	Engine              string
	EngineKind          EngineKind // WorkerConfig.Engine, "" read as vLLM
	Rank                int
	DataParallelSize    int
	Role                Role
	Endpoint            string // resolved ip:port
	KVEvents, KVReplay  string
	Healthy             bool         // eligible for selection: no health input excludes it
	HealthReason        HealthReason // why Healthy last changed, or what excludes it now
	HealthSince         time.Time    // when Healthy last changed (discovery if never), Options.Clock
	KVCapacityBlocks    int64        // kvcap, -1 unknown
	MaxBatchedTokens    int64        // mnbt, 0 unknown
	ActivePrefillTokens int64
	ActiveDecodeBlocks  int64
	ActiveRequests      int64
	Scrape              Scrape // last successful scrape; zero At = never
}

func (p *Pool) infoLocked(w *worker) WorkerInfo {
	return WorkerInfo{ID: w.id, Name: w.name, Engine: w.engine, EngineKind: w.kind, Rank: w.rank, DataParallelSize: w.dpSize, Role: w.role, Endpoint: w.endpoint, KVEvents: w.kvEvents,
		KVReplay: w.kvReplay, Healthy: w.eligible, HealthReason: w.reason, HealthSince: w.since, KVCapacityBlocks: w.kvCap(), MaxBatchedTokens: w.mnbt(),
		ActivePrefillTokens: w.apt, ActiveDecodeBlocks: w.decodeBlocks(), ActiveRequests: w.requests, Scrape: w.scrape}
}

// Workers lists every discovered worker, decode workers first, each pool in discovery order.
func (p *Pool) Workers() []WorkerInfo {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]WorkerInfo, 0, len(p.byID))
	for _, w := range p.decode {
		out = append(out, p.infoLocked(w))
	}
	for _, w := range p.prefill {
		out = append(out, p.infoLocked(w))
	}
	return out
}

// publishLocked refreshes w's per-worker gauges.
func (p *Pool) publishLocked(w *worker) {
	if w.removed {
		return
	}
	w.g.apt.Set(float64(w.apt))
	w.g.adb.Set(float64(w.decodeBlocks()))
	w.g.requests.Set(float64(w.requests))
	w.g.kvCap.Set(float64(w.kvCap()))
	if w.eligible {
		w.g.healthy.Set(1)
	} else {
		w.g.healthy.Set(0)
	}
}
