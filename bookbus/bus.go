package bookbus

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/condisagg/condisagg/pool"
)

// Defaults of Config.
const (
	DefaultSubject       = "condisagg.bookings"
	DefaultLease         = 10 * time.Second
	DefaultQueueSize     = 4096
	DefaultReconnectWait = 250 * time.Millisecond
	// DefaultResyncInterval is the least time between two re-sends of this replica's open
	// bookings (README "Resync"): a fleet-wide reconnect, or a burst of joins, costs one resync
	// now and at most one more an interval later.
	DefaultResyncInterval = 500 * time.Millisecond
)

// maxHeartbeatBytes bounds the request ids of one heartbeat (well under NATS's default 1 MiB
// max_payload); a replica with more open bookings sends a partial heartbeat, which renews but
// drops nothing.
const maxHeartbeatBytes = 256 << 10

// Bounds of one resync: per model at most maxResyncBookings bookings, and at most
// maxResyncBytes over all models (an 8k-token bypass is about 4 KiB, so 32 MiB is about 8,000
// of them). What is left out is counted (dropped{reason="resync_limit"}); a peer then
// undercounts those requests until they end, as before resyncs existed.
const (
	maxResyncBookings = 16384
	maxResyncBytes    = 32 << 20
)

// Config is one bus connection. URL and Replica are required; zero values take the defaults.
type Config struct {
	URL     string // NATS server URL(s), comma separated: nats://host:4222, tls://host:4222
	Subject string // the subject every replica of the fleet publishes on and reads
	Replica string // this replica's id, unique in the fleet (the host name by default in serve)
	// Lease is how long a peer holds each of this replica's bookings after the last delta or
	// heartbeat that named it; heartbeats go out every Lease/3.
	Lease time.Duration
	// Credentials: a token, or a user and password (never in URL). CAFile checks the server's
	// certificate; CertFile and KeyFile are this client's (mTLS).
	Token, User, Password     string
	CAFile, CertFile, KeyFile string
	QueueSize                 int           // outgoing deltas waiting to be published; more are dropped
	ReconnectWait             time.Duration // between reconnect attempts
	ResyncInterval            time.Duration // least time between two re-sends of the open bookings
	Metrics                   *Metrics      // required
	Logger                    *slog.Logger  // default discards
}

func (c Config) withDefaults() Config {
	c.Subject = cmp.Or(c.Subject, DefaultSubject)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.QueueSize = cmp.Or(c.QueueSize, DefaultQueueSize)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, DefaultReconnectWait)
	c.ResyncInterval = cmp.Or(c.ResyncInterval, DefaultResyncInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Validate returns every problem of c, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("bookbus: url: empty"))
	}
	for _, u := range strings.Split(c.URL, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			errs = append(errs, fmt.Errorf("bookbus: url: %s carries credentials; give them as a token or user and password instead", Redact(u)))
		}
	}
	if c.Replica == "" {
		errs = append(errs, errors.New("bookbus: replica: empty"))
	}
	if c.Lease != 0 && (c.Lease < pool.MinPeerLease || c.Lease > pool.MaxPeerLease) {
		errs = append(errs, fmt.Errorf("bookbus: lease: %s is outside [%s, %s]", c.Lease, pool.MinPeerLease, pool.MaxPeerLease))
	}
	if c.ResyncInterval < 0 || c.ResyncInterval > time.Minute {
		errs = append(errs, fmt.Errorf("bookbus: resync_interval: %s is outside [0, 1m] (0 = %s)", c.ResyncInterval, DefaultResyncInterval))
	}
	if c.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("bookbus: queue_size: %d must be >= 0", c.QueueSize))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("bookbus: cert_file and key_file: give both or neither"))
	}
	if c.Metrics == nil {
		errs = append(errs, errors.New("bookbus: Metrics is nil"))
	}
	return errors.Join(errs...)
}

// Redact is a NATS URL list with any credentials cut out, for logs and errors.
func Redact(urls string) string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			out = append(out, "<unparsable url>")
			continue
		}
		p.User = nil
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

// Pool is what the bus needs of one model's pool.Pool.
type Pool interface {
	ApplyPeer(pool.PeerDelta) (pool.PeerStats, error)
	ExpirePeers() int
	OpenBookings() []string
	LocalBookings(max int) ([]pool.Booking, int)
}

// Bus shares this replica's bookings with its peers over NATS and applies theirs (doc.go).
type Bus struct {
	cfg         Config
	m           *Metrics
	log         *slog.Logger
	incarnation uint64
	out         chan []byte   // encoded deltas for the sender (bounded: Config.QueueSize)
	up          chan struct{} // capacity 1: NATS (re)connected; Run confirms the subscription, then shares
	join        chan struct{} // capacity 1: a peer said hello; Run re-sends the open bookings
	connected   atomic.Bool
	dupWarned   atomic.Bool

	mu     sync.RWMutex    // guards models
	models map[string]Pool // by model name
}

// New validates cfg and builds the bus; it does no I/O and starts nothing (Run does).
func New(cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	b := &Bus{cfg: cfg, m: cfg.Metrics, log: cfg.Logger, incarnation: binary.LittleEndian.Uint64(seed[:]),
		out: make(chan []byte, cfg.QueueSize), up: make(chan struct{}, 1), join: make(chan struct{}, 1), models: map[string]Pool{}}
	b.m.Connected.Set(0)
	return b, nil
}

// Attach makes p the pool of model: peers' deltas for model apply to it, and its open
// bookings go out in heartbeats.
func (b *Bus) Attach(model string, p Pool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.models[model] = p
}

// Connected reports whether the bus is up (condisagg_bus_connected).
func (b *Bus) Connected() bool { return b.connected.Load() }

// Replica is this replica's id.
func (b *Bus) Replica() string { return b.cfg.Replica }

// Local is model's pool.Options.OnLocal: it encodes the change and queues it for the sender
// without blocking. While the bus is down, or when the queue is full, the change is dropped and
// counted; the lease and the next heartbeat heal what a peer missed.
func (b *Bus) Local(model string) func(pool.LocalChange) {
	return func(c pool.LocalChange) {
		if !b.connected.Load() {
			b.m.Dropped.WithLabelValues("disconnected").Inc()
			return
		}
		m := message{replica: b.cfg.Replica, incarnation: b.incarnation, model: model,
			d: pool.PeerDelta{RequestID: c.RequestID, Lease: b.cfg.Lease}}
		switch c.Kind {
		case pool.LocalBook:
			m.d.Kind, m.d.Booking = pool.PeerBook, c.Booking
		case pool.LocalReleasePrefill:
			m.d.Kind = pool.PeerReleasePrefill
		case pool.LocalRelease:
			m.d.Kind = pool.PeerRelease
		default:
			return
		}
		select {
		case b.out <- encode(make([]byte, 0, 64+8*len(m.d.Booking.Keys)), &m):
		default:
			b.m.Dropped.WithLabelValues("queue_full").Inc()
		}
	}
}

// Run connects and serves the bus until ctx ends: one NATS connection (reconnecting forever),
// one subscription whose callback applies peers' deltas, and this goroutine, which publishes
// the queue, heartbeats every Lease/3 and expires peer leases. A server that cannot be reached
// is not an error: the replica books locally until it can. On ctx's end it tells the peers it
// is gone and closes the connection. It returns an error only for options NATS refuses.
func (b *Bus) Run(ctx context.Context) error {
	closed := make(chan struct{})
	nc, err := nats.Connect(b.cfg.URL, b.options(closed)...)
	if err != nil {
		return fmt.Errorf("bookbus: connect %s: %w", Redact(b.cfg.URL), err)
	}
	sub, err := nc.Subscribe(b.cfg.Subject, b.receive)
	if err != nil {
		nc.Close()
		<-closed
		return fmt.Errorf("bookbus: subscribe %s: %w", b.cfg.Subject, err)
	}
	_ = sub.SetPendingLimits(65536, 64<<20)
	b.wake()
	b.loop(ctx, nc)
	b.goodbye(nc)
	if err := nc.Drain(); err != nil {
		nc.Close()
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		nc.Close()
		<-closed
	}
	b.setConnected(false, "closed")
	return nil
}

func (b *Bus) options(closed chan struct{}) []nats.Option {
	opts := []nats.Option{
		nats.Name("condisagg " + b.cfg.Replica), nats.NoEcho(),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(b.cfg.ReconnectWait),
		nats.ReconnectJitter(b.cfg.ReconnectWait/4, b.cfg.ReconnectWait/2),
		// No buffering while disconnected: a stale delta is worth less than the heartbeat that
		// follows the reconnect, and a buffer would hold the decision path's memory.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2),
		nats.ConnectHandler(func(*nats.Conn) { b.wake() }),
		nats.ReconnectHandler(func(*nats.Conn) { b.m.Reconnects.Inc(); b.wake() }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { b.setConnected(false, "disconnected", "err", err) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				b.m.Dropped.WithLabelValues("slow_consumer").Inc()
				return
			}
			b.log.Warn("booking bus error", "err", err)
		}),
	}
	switch {
	case b.cfg.Token != "":
		opts = append(opts, nats.Token(b.cfg.Token))
	case b.cfg.User != "":
		opts = append(opts, nats.UserInfo(b.cfg.User, b.cfg.Password))
	}
	if b.cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(b.cfg.CAFile))
	}
	if b.cfg.CertFile != "" {
		opts = append(opts, nats.ClientCert(b.cfg.CertFile, b.cfg.KeyFile))
	}
	return opts
}

// wake tells Run's goroutine that NATS is (re)connected.
func (b *Bus) wake() {
	select {
	case b.up <- struct{}{}:
	default:
	}
}

// confirm marks the bus up once the server has processed this connection's subscription (a
// flush is a round trip behind it), so that nothing a peer publishes after it is missed, says
// hello (the peers re-send their open bookings, which this replica may have missed) and sends
// a heartbeat at once. It reports whether the bus just came up; the loop then re-sends this
// replica's own open bookings, which the peers may have missed.
func (b *Bus) confirm(nc *nats.Conn) bool {
	if b.connected.Load() || !nc.IsConnected() {
		return false
	}
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		b.wake() // try again on the loop's next turn
		return false
	}
	b.setConnected(true, "connected")
	b.publish(nc, encode(nil, &message{replica: b.cfg.Replica, incarnation: b.incarnation, d: pool.PeerDelta{Kind: kindHello, Lease: b.cfg.Lease}}))
	b.heartbeat(nc)
	return true
}

func (b *Bus) setConnected(up bool, msg string, attrs ...any) {
	if b.connected.Swap(up) == up {
		return
	}
	if up {
		b.m.Connected.Set(1)
		b.log.Info("booking bus "+msg, append(attrs, "endpoint", Redact(b.cfg.URL))...)
		return
	}
	b.m.Connected.Set(0)
	b.log.Warn("booking bus "+msg+"; booking locally", append(attrs, "endpoint", Redact(b.cfg.URL))...)
}

// loop publishes queued deltas, heartbeats, re-sends the open bookings when asked (at most
// once per ResyncInterval) and expires leases until ctx ends.
func (b *Bus) loop(ctx context.Context, nc *nats.Conn) {
	t := time.NewTicker(b.cfg.Lease / 3)
	defer t.Stop()
	rs := resyncer{interval: b.cfg.ResyncInterval, timer: time.NewTimer(time.Hour)}
	rs.timer.Stop()
	defer rs.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case buf := <-b.out:
			b.publish(nc, buf)
		case <-b.up:
			if b.confirm(nc) && rs.ask("connect", time.Now()) {
				b.resync(nc, "connect")
			}
		case <-b.join:
			if rs.ask("peer_join", time.Now()) {
				b.resync(nc, "peer_join")
			}
		case now := <-rs.timer.C:
			b.resync(nc, rs.fire(now))
		case <-t.C:
			b.heartbeat(nc)
			for _, p := range b.pools() {
				p.ExpirePeers()
			}
		}
	}
}

func (b *Bus) publish(nc *nats.Conn, buf []byte) bool {
	if err := nc.Publish(b.cfg.Subject, buf); err != nil {
		b.m.Dropped.WithLabelValues("publish_error").Inc()
		return false
	}
	b.m.Sent.Inc()
	return true
}

// heartbeat renews every open booking of each model at the peers, and lets them drop what
// this replica no longer holds (a release the bus lost) when the list is complete.
func (b *Bus) heartbeat(nc *nats.Conn) {
	if !b.connected.Load() {
		return
	}
	for model, p := range b.pools() {
		ids := p.OpenBookings()
		open, size := ids[:0], 0
		for _, id := range ids {
			if size += len(id) + 2; size > maxHeartbeatBytes || len(open) == maxOpen {
				break
			}
			open = append(open, id)
		}
		m := message{replica: b.cfg.Replica, incarnation: b.incarnation, model: model,
			d: pool.PeerDelta{Kind: pool.PeerRenew, Lease: b.cfg.Lease, Open: open, Complete: len(open) == len(ids)}}
		b.publish(nc, encode(nil, &m))
	}
}

// resyncer rate-limits resyncs: one at once when the last is an interval old, otherwise one
// when the interval ends, whatever number of asks came meanwhile (they coalesce). Owned by
// the loop's goroutine.
type resyncer struct {
	interval time.Duration
	timer    *time.Timer
	last     time.Time
	armed    string // the trigger of the resync the timer will run ("" : none)
}

// ask reports whether to resync now; otherwise it arms the timer (once).
func (r *resyncer) ask(trigger string, now time.Time) bool {
	if r.armed != "" {
		return false
	}
	if wait := r.interval - now.Sub(r.last); !r.last.IsZero() && wait > 0 {
		r.armed = trigger
		r.timer.Reset(wait)
		return false
	}
	r.last = now
	return true
}

// fire is the armed resync's trigger, when its timer ran out.
func (r *resyncer) fire(now time.Time) string {
	t := r.armed
	r.armed, r.last = "", now
	return t
}

// resync re-sends this replica's open bookings to the peers as PeerBook deltas, as they stand
// now (README "Resync"). It runs on the loop's goroutine, so it is ordered with the queued
// deltas: a booking it sends was open when it was read, and the release that ends it is
// queued after. A peer that holds a booking already renews it; the bounds (maxResyncBookings,
// maxResyncBytes) leave the rest out and count them.
func (b *Bus) resync(nc *nats.Conn, trigger string) {
	if !b.connected.Load() {
		return // the reconnect resyncs
	}
	budget, sent := maxResyncBytes, 0
	for model, p := range b.pools() {
		bs, open := p.LocalBookings(maxResyncBookings)
		n := 0
		for i := range bs {
			m := message{replica: b.cfg.Replica, incarnation: b.incarnation, model: model,
				d: pool.PeerDelta{Kind: pool.PeerBook, RequestID: bs[i].RequestID, Booking: bs[i], Lease: b.cfg.Lease}}
			buf := encode(make([]byte, 0, 64+8*len(bs[i].Keys)), &m)
			if budget -= len(buf); budget < 0 || !b.publish(nc, buf) {
				break
			}
			n++
		}
		sent += n
		if left := open - n; left > 0 {
			b.m.Dropped.WithLabelValues("resync_limit").Add(float64(left))
		}
	}
	b.m.Resyncs.WithLabelValues(trigger).Inc()
	b.m.ResyncBookings.Add(float64(sent))
	b.log.Debug("booking bus resync", "trigger", trigger, "bookings", sent)
}

// goodbye tells the peers this replica is gone, so they drop its bookings at once.
func (b *Bus) goodbye(nc *nats.Conn) {
	if !nc.IsConnected() {
		return
	}
	for model := range b.pools() {
		m := message{replica: b.cfg.Replica, incarnation: b.incarnation, model: model, d: pool.PeerDelta{Kind: pool.PeerGone, Lease: b.cfg.Lease}}
		b.publish(nc, encode(nil, &m))
	}
	_ = nc.FlushTimeout(time.Second)
}

func (b *Bus) pools() map[string]Pool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]Pool, len(b.models))
	for k, v := range b.models {
		out[k] = v
	}
	return out
}

// receive applies one peer message (on the subscription's goroutine: one at a time, in the
// order NATS delivered them, which is each publisher's order).
func (b *Bus) receive(msg *nats.Msg) {
	m, err := decode(msg.Data)
	if err != nil {
		b.m.Dropped.WithLabelValues("decode_error").Inc()
		b.log.Debug("booking bus message refused", "err", err)
		return
	}
	if m.replica == b.cfg.Replica {
		if m.incarnation != b.incarnation && !b.dupWarned.Swap(true) {
			b.log.Warn("another router replica uses this replica id; its bookings are ignored (set replicas.id)", "replica", m.replica)
		}
		if m.incarnation != b.incarnation {
			b.m.Dropped.WithLabelValues("duplicate_replica").Inc()
		}
		return
	}
	if m.d.Kind == kindHello {
		b.m.Joins.Inc()
		select { // the loop re-sends the open bookings (rate-limited)
		case b.join <- struct{}{}:
		default:
		}
		return
	}
	b.mu.RLock()
	p := b.models[m.model]
	b.mu.RUnlock()
	if p == nil {
		b.m.Dropped.WithLabelValues("unknown_model").Inc()
		return
	}
	b.m.Received.Inc()
	_, _ = p.ApplyPeer(m.d) // refusals are counted by the pool (condisagg_peer_bookings_rejected_total)
}
