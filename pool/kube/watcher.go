package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/condisagg/condisagg/pool"
)

// DefaultSource is the pool's name of the members the watcher registers.
const DefaultSource = "kubernetes"

// Target receives the discovered workers; *pool.Pool satisfies it.
type Target interface {
	SetMembers(source string, ms []pool.Member) ([]pool.Member, error)
}

// Options are the watcher's collaborators. Client and Metrics are required.
type Options struct {
	Client kubernetes.Interface
	// Namespace is the namespace of entries that name none (NewClient's answer).
	Namespace string
	Metrics   *Metrics
	Logger    *slog.Logger // default discards
	Source    string       // default DefaultSource
}

// Watcher keeps a Target's members equal to the ready endpoints of the EndpointSlices its
// entries select: one informer per entry (namespace and label selector), and one loop that,
// after any change, recomputes every entry's members and hands them to the Target at once.
type Watcher struct {
	entries []Entry
	target  Target
	opts    Options
	dirty   chan struct{} // capacity 1: one pending recomputation is enough

	mu       sync.Mutex // guards lastSkip
	lastSkip string     // the skips of the last sync, to log a change once
}

// NewWatcher validates the entries and returns a watcher; it starts nothing.
func NewWatcher(entries []Entry, target Target, opts Options) (*Watcher, error) {
	if opts.Client == nil || opts.Metrics == nil || target == nil {
		return nil, errors.New("kube: new watcher: Options.Client, Options.Metrics and the target are required")
	}
	c := Config{Namespace: opts.Namespace, Workers: entries}.WithDefaults()
	if err := c.Validate("discovery.kubernetes"); err != nil {
		return nil, fmt.Errorf("kube: new watcher: %w", err)
	}
	for i := range c.Workers {
		c.Workers[i].Namespace = cmp.Or(c.Workers[i].Namespace, opts.Namespace)
		if c.Workers[i].Namespace == "" {
			return nil, fmt.Errorf("kube: new watcher: entry %s has no namespace and Options.Namespace is empty", c.Workers[i].Name)
		}
	}
	opts.Source = cmp.Or(opts.Source, DefaultSource)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{entries: c.Workers, target: target, opts: opts, dirty: make(chan struct{}, 1)}, nil
}

// entryInformer is one entry's informer and the registration of the watcher's handler.
type entryInformer struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// Run watches until ctx is cancelled, and returns after every goroutine it started (one
// informer and one sync waiter per entry) has exited. The Target's members are left as they
// were. Until an entry's first list has arrived it contributes no member; after that its
// informer's cache is the truth, kept through failed watches (counted, logged) until the
// API server answers again.
func (w *Watcher) Run(ctx context.Context) error {
	infs := make([]entryInformer, len(w.entries))
	for i, e := range w.entries {
		var err error
		if infs[i], err = w.informer(e); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, ei := range infs {
		wg.Go(func() { ei.inf.RunWithContext(ctx) })
		wg.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), ei.reg.HasSynced) {
				w.kick()
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.dirty:
			w.sync(infs)
		}
	}
}

// informer builds entry e's EndpointSlice informer with the watcher's handlers.
func (w *Watcher) informer(e Entry) (entryInformer, error) {
	sel := e.Selector
	inf := discoveryinformers.NewFilteredEndpointSliceInformer(w.opts.Client, e.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = sel })
	// Only what Members reads is kept: the cache is bounded by the selected slices' endpoints.
	if err := inf.SetTransform(stripSlice); err != nil {
		return entryInformer{}, fmt.Errorf("kube: entry %s: %w", e.Name, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() != nil || err == io.EOF || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // shutdown, a normal close, or a relist the reflector does by itself
		}
		w.opts.Metrics.Errors.WithLabelValues(ReasonWatch).Inc()
		w.opts.Logger.Warn("kubernetes endpointslice watch failed; keeping the last known workers",
			"worker", e.Name, "namespace", e.Namespace, "selector", e.Selector, "err", err)
	}); err != nil {
		return entryInformer{}, fmt.Errorf("kube: entry %s: %w", e.Name, err)
	}
	kick := func(any) { w.kick() }
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: kick,
		UpdateFunc: func(_, _ any) { w.kick() }, DeleteFunc: kick})
	if err != nil {
		return entryInformer{}, fmt.Errorf("kube: entry %s: %w", e.Name, err)
	}
	return entryInformer{inf: inf, reg: reg}, nil
}

// stripSlice keeps a copy of the slice without what Members does not read (managed fields,
// annotations, hints) in the cache. It copies rather than edits: the object may still be read
// by its source (client-go's fake clientset hands its watchers the object it keeps, and copies
// it again on delete, which raced with an in-place edit here).
func stripSlice(obj any) (any, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil // a tombstone (cache.DeletedFinalStateUnknown) passes as is
	}
	cp := *sl
	cp.ManagedFields, cp.Annotations = nil, nil
	cp.Endpoints = make([]discoveryv1.Endpoint, len(sl.Endpoints))
	for i, ep := range sl.Endpoints {
		ep.Hints, ep.DeprecatedTopology = nil, nil
		cp.Endpoints[i] = ep
	}
	return &cp, nil
}

func (w *Watcher) kick() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// sync recomputes every synced entry's members and hands them to the target.
func (w *Watcher) sync(infs []entryInformer) {
	var all []pool.Member
	var skips []Skip
	for i, e := range w.entries {
		if !infs[i].reg.HasSynced() {
			continue
		}
		var list []*discoveryv1.EndpointSlice
		for _, o := range infs[i].inf.GetStore().List() {
			if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
				list = append(list, sl)
			}
		}
		slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
		ms, sk := Members(e, list)
		all = append(all, ms...)
		skips = append(skips, sk...)
	}
	accepted, err := w.target.SetMembers(w.opts.Source, all)
	m := w.opts.Metrics
	for _, s := range skips {
		m.Errors.WithLabelValues(s.Reason).Inc()
	}
	if n := len(all) - len(accepted); n > 0 {
		m.Errors.WithLabelValues(ReasonRejected).Add(float64(n))
	}
	count := map[pool.Role]int{}
	for _, a := range accepted {
		count[a.Worker.Role] += max(a.Worker.DataParallelSize, 1)
	}
	m.Workers.WithLabelValues(string(pool.RoleDecode)).Set(float64(count[pool.RoleDecode]))
	m.Workers.WithLabelValues(string(pool.RolePrefill)).Set(float64(count[pool.RolePrefill]))
	w.logSkips(skips, err)
}

// logSkips logs the problems of a sync once, when they differ from the previous sync's.
func (w *Watcher) logSkips(skips []Skip, err error) {
	var b strings.Builder
	for _, s := range skips {
		fmt.Fprintf(&b, "%s: %s; ", s.Slice, s.Reason)
	}
	if err != nil {
		b.WriteString(err.Error())
	}
	w.mu.Lock()
	changed := b.String() != w.lastSkip
	w.lastSkip = b.String()
	w.mu.Unlock()
	if changed && b.Len() > 0 {
		w.opts.Logger.Warn("kubernetes discovery left endpoints out", "err", b.String())
	}
}
