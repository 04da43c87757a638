package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/adminclient"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Active-active replicas load (issue 16 item 6). The same closed-loop load runs against a stack
// with one condisagg replica and against one with two replicas behind the same Envoy (an
// ext_proc cluster with two hosts, round robin per stream). Neither replica knows the other's
// bookings; both read the same KV event streams.
const (
	replicaClients       = 24  // concurrent clients, one request in flight each
	replicaConversations = 300 // two turns each: 600 requests per run
	replicaSampleEvery   = 3   // every third conversation is also explained on both replicas
	replicaMaxTokens     = 48
	// decodeBusyBlocks is θd·kvcap of mainDisagg on a decodeKVBlocks worker: the decode-busy
	// guard's threshold in projected blocks.
	decodeBusyBlocks = 0.8 * decodeKVBlocks
	samplePeriod     = 20 * time.Millisecond  // KV usage and bookings
	settleDelay      = 250 * time.Millisecond // a differing pair is explained again this much later
)

// replicaRun is what one run measured.
type replicaRun struct {
	replicas  int
	requests  int
	failed    []string
	wall      time.Duration
	decisions []float64 // condisagg_decisions_total gained on each replica
	decSecs   []float64 // mean condisagg_decision_seconds{stage="total"} on each replica
	// Disagreement: explained pairs, and pairs whose (route, prefill worker, decode worker) differ.
	// persist counts the differing pairs that still differ when explained again settleDelay
	// later (no longer a race with the KV events of turn 1 or with bookings about to end).
	samples, differ, persist int
	// differIndex counts the differing pairs whose replicas saw different per-worker prefix
	// overlaps: their KV indexes differed at that moment, whatever the bookings.
	differIndex int
	diffs       []string
	// With two replicas, the same body is also explained a second time on replica A at the
	// same moment (A against A'): the within-process floor under this very load, to tell a
	// difference between the replicas' states from the noise of two calls on a loaded machine.
	// selfDiffer counts the A/A' pairs that differ. selfGap is the booked-view gap of two
	// simultaneous ListWorkers on replica A (the sampler's own skew), beside viewGap (A against B).
	selfDiffer int
	selfGap    float64
	// viewEqual and selfEqual count the sampled (instant, decode worker) pairs whose A/B views,
	// and whose two A views, were equal: a lag leaves most equal, an offset none.
	viewEqual, selfEqual int
	// Decode-busy guard: peaks over the run, per decode worker, of the KV blocks the worker
	// really used (vllm:kv_cache_usage_perc × kvcap) and of the decode blocks booked on it,
	// summed over the replicas; both as a multiple of the threshold.
	peakActual, peakBooked map[string]float64
	// overActual and overBooked count the sampling instants where some decode worker's real
	// usage, or the bookings on it summed over the replicas, exceeded the threshold; scrapes
	// counts the instants.
	overActual, overBooked, scrapes int
	// events is each replica's KV event stream health at the end: events applied, skipped,
	// sequence gaps, dropped messages.
	events []string
	// turn2, turn2Local: turn-2 requests, and those decided route=decode (local prefill on the
	// decode worker, its prefix reused there).
	turn2, turn2Local int
	// With the booking bus (shared): each replica's booked view already holds the peers'
	// bookings, so peakBooked and overBooked read the larger of the replicas' views (what a
	// guard saw) rather than their sum. viewGap is the mean over sampled instants and decode
	// workers of |view A − view B| / threshold; busStats is each replica's bus counters at the
	// end; settled is how long after the last request every booking, local and peer, was 0.
	shared           bool
	viewGap          float64
	viewGapN         int
	busStats         []string
	settled          time.Duration
	settledErr       error
	received, qdrops []float64
}

// TestActiveActiveReplicas (about 20 s, in make test) runs 600 requests of two-turn
// conversations (a fresh prompt of 150-750 words, which goes remote by the ratio rule, then a
// follow-up that the KV-aware rule sends back to the decode worker holding turn 1) from 24
// concurrent clients, once against one condisagg replica and once against two behind the same
// Envoy, with mainDisagg's decode-busy guard (θd 0.8 of 400 blocks = 320 blocks). It measures:
//
//   - disagreement: for every third conversation, the turn-2 body is explained (Admin gRPC
//     Explain, nothing booked) on replica A and on replica B at the same moment, just before
//     turn 2 is sent; a pair disagrees when route, prefill worker or decode worker differ. With
//     one replica both explains go to it: the baseline for state moving between two calls. A
//     differing pair is explained again 250 ms later to tell a race from a lasting difference;
//     each replica's KV event counters are logged to show whether their indexes could differ;
//     with two replicas the body is also explained a second time on A at the same moment (A
//     against A′: the within-process floor under the same load), and the sampler reads A's
//     booked view twice beside B's (the two processes' offset against the sampler's own skew);
//   - KV reuse: the share of turn-2 requests decided route=decode (prefilled locally on the
//     decode worker that holds turn 1);
//   - guard overshoot: every 20 ms, each decode worker's real KV usage (vllm-sim's
//     vllm:kv_cache_usage_perc × 400) and the decode blocks booked on it (ListWorkers'
//     active_decode_blocks, summed over the replicas), peaks reported relative to 320;
//   - decisions per replica (condisagg_decisions_total) and per second of the run, and each
//     replica's mean decision time (stage total), whose inverse bounds one core's rate.
//
// It asserts every request succeeds, every request was decided exactly once, both replicas
// decided a fair share, and every measurement is finite; the numbers are logged (docs/deploy.md
// records them).
func TestActiveActiveReplicas(t *testing.T) {
	runs := []*replicaRun{runReplicaLoad(t, 1, false), runReplicaLoad(t, 2, false), runReplicaLoad(t, 2, true)}
	for _, r := range runs {
		t.Logf("%d replica(s)%s: %s", r.replicas, map[bool]string{true: " sharing bookings over NATS"}[r.shared], r)
		for i, st := range r.busStats {
			t.Logf("  replica %d bus: %s", i, st)
		}
		for i, e := range r.events {
			t.Logf("  replica %d KV events: %s", i, e)
		}
		for _, d := range r.diffs {
			t.Logf("  disagreement: %s", d)
		}
	}
	for _, r := range runs {
		if len(r.failed) > 0 {
			t.Errorf("%d replica(s): %d of %d requests failed, first: %s", r.replicas, len(r.failed), r.requests, r.failed[0])
		}
		total := 0.0
		for i, d := range r.decisions {
			total += d
			if r.replicas > 1 && d < 0.2*float64(r.requests) {
				t.Errorf("%d replicas: replica %d decided %g of %d requests; want both to take a share", r.replicas, i, d, r.requests)
			}
			if math.IsNaN(r.decSecs[i]) || r.decSecs[i] <= 0 {
				t.Errorf("%d replica(s): replica %d mean decision time %g", r.replicas, i, r.decSecs[i])
			}
		}
		if int(total) != r.requests {
			t.Errorf("%d replica(s): %g decisions for %d requests; want one each", r.replicas, total, r.requests)
		}
		if r.samples == 0 || r.scrapes == 0 {
			t.Errorf("%d replica(s): %d explain pairs, %d scrapes; want both > 0", r.replicas, r.samples, r.scrapes)
		}
		for w, v := range r.peakActual {
			if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
				t.Errorf("%d replica(s): %s peak actual KV %g", r.replicas, w, v)
			}
			if b := r.peakBooked[w]; math.IsNaN(b) || math.IsInf(b, 0) || b <= 0 {
				t.Errorf("%d replica(s): %s peak booked %g", r.replicas, w, b)
			}
		}
		if len(r.peakActual) != 2 {
			t.Errorf("%d replica(s): KV usage of %d decode workers, want 2", r.replicas, len(r.peakActual))
		}
	}
	one, split, shared := runs[0], runs[1], runs[2]
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
	t.Logf("shared bookings vs one replica: disagreement %.1f%% vs %.1f%% (%+.1f points; without the bus %.1f%%; with equal per-worker overlaps (same index) %.1f%% vs %.1f%%, without the bus %.1f%%), "+
		"turn 2 local %.1f%% vs %.1f%% (%+.1f points; without the bus %.1f%%), instants booked over the threshold %d/%d vs %d/%d, "+
		"peak booked decode-0 %.2f/%.2f vs %.2f/%.2f, mean view gap between the replicas %.3f of the threshold, bookings 0 %v after the last request",
		pct(shared.differ, shared.samples), pct(one.differ, one.samples), pct(shared.differ, shared.samples)-pct(one.differ, one.samples), pct(split.differ, split.samples),
		pct(shared.differ-shared.differIndex, shared.samples), pct(one.differ-one.differIndex, one.samples), pct(split.differ-split.differIndex, split.samples),
		pct(shared.turn2Local, shared.turn2), pct(one.turn2Local, one.turn2), pct(shared.turn2Local, shared.turn2)-pct(one.turn2Local, one.turn2), pct(split.turn2Local, split.turn2),
		shared.overBooked, shared.scrapes, one.overBooked, one.scrapes,
		shared.peakBooked["decode-0"], shared.peakBooked["decode-1"], one.peakBooked["decode-0"], one.peakBooked["decode-1"],
		shared.viewGap, shared.settled)
	// What holds however loaded the machine is: every booking and release reached the peer
	// (deltas received on both, none dropped for a full queue), and every booking, local or
	// peer, is back to 0 once the load ends.
	for i := range shared.received {
		if shared.received[i] == 0 {
			t.Errorf("shared bookings: replica %d received no delta from its peer", i)
		}
		if shared.qdrops[i] != 0 {
			t.Errorf("shared bookings: replica %d dropped %g deltas for a full queue", i, shared.qdrops[i])
		}
	}
	if shared.settledErr != nil {
		t.Errorf("shared bookings: bookings not back to 0 after the load: %v", shared.settledErr)
	}
}

func (r *replicaRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests in %v, %d failed; decisions per replica", r.requests, r.wall.Round(time.Millisecond), len(r.failed))
	for i, d := range r.decisions {
		fmt.Fprintf(&b, " [%d: %g = %.1f/s, mean %.2f ms]", i, d, d/r.wall.Seconds(), r.decSecs[i]*1e3)
	}
	fmt.Fprintf(&b, "; disagreement %d/%d (%.1f%%; %d with different overlaps), still after %v: %d", r.differ, r.samples,
		100*float64(r.differ)/float64(max(r.samples, 1)), r.differIndex, settleDelay, r.persist)
	if r.replicas > 1 {
		fmt.Fprintf(&b, "; replica A with itself at the same moment %d/%d (%.1f%%)", r.selfDiffer, r.samples, 100*float64(r.selfDiffer)/float64(max(r.samples, 1)))
	}
	if r.shared {
		fmt.Fprintf(&b, "; booked view gap A/B %.3f, A/A %.3f of the threshold; views equal A/B %d, A/A %d of %d", r.viewGap, r.selfGap,
			r.viewEqual, r.selfEqual, r.viewGapN)
	}
	fmt.Fprintf(&b, "; turn 2 local on decode %d/%d", r.turn2Local, r.turn2)
	fmt.Fprintf(&b, "; peak decode KV / threshold %.0f blocks: actual", decodeBusyBlocks)
	for _, w := range []string{"decode-0", "decode-1"} {
		fmt.Fprintf(&b, " %s %.2f", w, r.peakActual[w])
	}
	if r.shared {
		b.WriteString(", booked (larger replica view)")
	} else {
		b.WriteString(", booked (sum over replicas)")
	}
	for _, w := range []string{"decode-0", "decode-1"} {
		fmt.Fprintf(&b, " %s %.2f", w, r.peakBooked[w])
	}
	fmt.Fprintf(&b, "; sampled instants over the threshold: actual %d, booked %d of %d", r.overActual, r.overBooked, r.scrapes)
	return b.String()
}

func runReplicaLoad(t *testing.T, replicas int, shared bool) *replicaRun {
	t.Helper()
	s := startStack(t, Config{
		Disagg: mainDisagg, MaxBodyBytes: maxBodyBytes, Replicas: replicas, BookingBus: shared,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	if len(s.Replicas) != replicas {
		t.Fatalf("stack has %d replicas, want %d", len(s.Replicas), replicas)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run := &replicaRun{replicas: replicas, shared: shared, peakActual: map[string]float64{}, peakBooked: map[string]float64{}}
	counter := func(metric string, labels ...string) []float64 {
		out := make([]float64, len(s.Replicas))
		for i, r := range s.Replicas {
			v, err := s.metric(ctx, "http://"+r.AdminAddr+"/metrics", metric, labels...)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = v
		}
		return out
	}
	dec0, sum0, cnt0 := counter("condisagg_decisions_total"),
		counter("condisagg_decision_seconds_sum", `stage="total"`), counter("condisagg_decision_seconds_count", `stage="total"`)

	// Admin gRPC clients: replica A is the first, B the last (the same one with one replica).
	admins := make([]condisaggv1.AdminClient, len(s.Replicas))
	for i, r := range s.Replicas {
		ac, conn, err := adminclient.Dial(r.AdminGRPC, adminclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		admins[i] = ac
	}
	a, b := admins[0], admins[len(admins)-1]
	explain := func(ac condisaggv1.AdminClient, body []byte) (*condisaggv1.ExplainResponse, error) {
		return ac.Explain(ctx, &condisaggv1.ExplainRequest{Path: chatPath, Body: body})
	}
	// The sampler: real KV usage and bookings of each decode worker every 100 ms.
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	var mu sync.Mutex
	sampler.Go(func() {
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			booked := map[string]float64{}
			views := make([]map[string]float64, len(admins))
			var wg sync.WaitGroup
			var self map[string]float64 // replica A again, at the same moment
			if shared {
				wg.Go(func() {
					ws, err := a.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
					if err != nil {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					self = map[string]float64{}
					for _, w := range ws.Workers {
						if w.Role == string(Decode) {
							self[w.Name] = float64(w.ActiveDecodeBlocks)
						}
					}
				})
			}
			for i, ac := range admins {
				wg.Go(func() {
					ws, err := ac.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
					if err != nil {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					views[i] = map[string]float64{}
					for _, w := range ws.Workers {
						if w.Role == string(Decode) {
							views[i][w.Name] = float64(w.ActiveDecodeBlocks)
							if shared {
								booked[w.Name] = max(booked[w.Name], float64(w.ActiveDecodeBlocks))
							} else {
								booked[w.Name] += float64(w.ActiveDecodeBlocks)
							}
						}
					}
				})
			}
			actual := map[string]float64{}
			for _, w := range s.Workers {
				if w.Spec.Role != Decode {
					continue
				}
				if v, err := s.SimMetric(ctx, w, "vllm:kv_cache_usage_perc"); err == nil {
					actual[w.Spec.Name] = v * decodeKVBlocks / decodeBusyBlocks
				}
			}
			wg.Wait()
			mu.Lock()
			if shared && len(views) == 2 && views[0] != nil && views[1] != nil && self != nil {
				for w, v := range views[0] {
					run.viewGap += math.Abs(v-views[1][w]) / decodeBusyBlocks
					run.selfGap += math.Abs(v-self[w]) / decodeBusyBlocks
					run.viewGapN++
					if v == views[1][w] {
						run.viewEqual++
					}
					if v == self[w] {
						run.selfEqual++
					}
				}
			}
			run.scrapes++
			over := false
			for w, v := range actual {
				run.peakActual[w] = max(run.peakActual[w], v)
				over = over || v > 1
			}
			if over {
				run.overActual++
			}
			over = false
			for w, v := range booked {
				run.peakBooked[w] = max(run.peakBooked[w], v/decodeBusyBlocks)
				over = over || v > decodeBusyBlocks
			}
			if over {
				run.overBooked++
			}
			mu.Unlock()
		}
	})

	c := newChaosClient(s, 30*time.Second)
	defer c.close()
	var started atomic.Int64
	var clients sync.WaitGroup
	start := time.Now()
	for i := range replicaClients {
		delay := time.Second * time.Duration(i) / replicaClients
		clients.Go(func() {
			time.Sleep(delay)
			for {
				n := started.Add(1)
				if n > replicaConversations || ctx.Err() != nil {
					return
				}
				seed := c.nextSeed()
				msgs := []Message{{Role: "user", Content: Words(seed, 150+int(seed%601))}}
				r1 := c.do(chaosReq{kind: "turn1", via: s.Envoy, body: ChatBody(msgs, replicaMaxTokens), expect: expectOK})
				if !r1.ok() {
					continue
				}
				body := ChatBody(nextTurn(msgs, r1.text, c.nextSeed(), 30), replicaMaxTokens)
				if n%replicaSampleEvery == 0 {
					ea, eb, eself, err := explainPair(a, b, replicas > 1, explain, body)
					if err == nil {
						d := differs(ea, eb)
						if d {
							time.Sleep(settleDelay)
							if xa, xb, _, err := explainPair(a, b, false, explain, body); err == nil && differs(xa, xb) {
								mu.Lock()
								run.persist++
								mu.Unlock()
							}
						}
						mu.Lock()
						run.samples++
						if eself != nil && differs(ea, eself) {
							run.selfDiffer++
						}
						if d {
							run.differ++
							if overlapsText(ea) != overlapsText(eb) {
								run.differIndex++
							}
							run.diffs = append(run.diffs, fmt.Sprintf("A %s/%s p=%s d=%s preview=%s overlap=%d [%s] vs B %s/%s p=%s d=%s preview=%s overlap=%d [%s]",
								ea.Route, ea.Reason, ea.PrefillWorker, ea.DecodeWorker, ea.Inputs.GetPreviewDecode(), ea.Inputs.GetOverlapBlocks(), overlapsText(ea),
								eb.Route, eb.Reason, eb.PrefillWorker, eb.DecodeWorker, eb.Inputs.GetPreviewDecode(), eb.Inputs.GetOverlapBlocks(), overlapsText(eb)))
						}
						mu.Unlock()
					}
				}
				c.do(chaosReq{kind: "turn2", via: s.Envoy, body: body, expect: expectOK})
			}
		})
	}
	clients.Wait()
	run.wall = time.Since(start)
	close(stop)
	sampler.Wait()

	for _, r := range c.take() {
		run.requests++
		if r.problem != "" {
			run.failed = append(run.failed, r.String()+": "+r.problem)
		}
		if r.kind == "turn2" {
			run.turn2++
			if strings.HasPrefix(r.decision, "route=decode;") {
				run.turn2Local++
			}
		}
	}
	dec1, sum1, cnt1 := counter("condisagg_decisions_total"),
		counter("condisagg_decision_seconds_sum", `stage="total"`), counter("condisagg_decision_seconds_count", `stage="total"`)
	kv := map[string][]float64{}
	for _, m := range []string{"condisagg_kv_events_total", "condisagg_kv_events_skipped_total", "condisagg_kv_gaps_total",
		"condisagg_kv_messages_dropped_total", "condisagg_kv_history_lost_total"} {
		kv[m] = counter(m)
	}
	if shared {
		if run.viewGapN > 0 {
			run.viewGap /= float64(run.viewGapN)
			run.selfGap /= float64(run.viewGapN)
		}
		end := time.Now()
		run.settledErr = Poll(ctx, func() error { return bookingsZero(ctx, s, admins) })
		run.settled = time.Since(end)
		run.received = counter("condisagg_bus_deltas_received_total")
		run.qdrops = counter("condisagg_bus_deltas_dropped_total", `reason="queue_full"`)
		sent, disc := counter("condisagg_bus_deltas_sent_total"), counter("condisagg_bus_deltas_dropped_total", `reason="disconnected"`)
		// Peer bookings refused or expired would make the two views differ for longer than a
		// delta's flight.
		rejected := map[string][]float64{}
		for _, r := range []string{"invalid", "unknown_worker", "full"} {
			rejected[r] = counter("condisagg_peer_bookings_rejected_total", `reason="`+r+`"`)
		}
		expired := counter("condisagg_peer_bookings_expired_total")
		for i := range s.Replicas {
			run.busStats = append(run.busStats, fmt.Sprintf("sent %g, received %g, dropped: queue full %g, disconnected %g; peer bookings refused: invalid %g, unknown worker %g, full %g; expired %g",
				sent[i], run.received[i], run.qdrops[i], disc[i], rejected["invalid"][i], rejected["unknown_worker"][i], rejected["full"][i], expired[i]))
		}
	}
	for i := range s.Replicas {
		run.events = append(run.events, fmt.Sprintf("applied %g, skipped %g, gaps %g, dropped %g, history lost %g",
			kv["condisagg_kv_events_total"][i], kv["condisagg_kv_events_skipped_total"][i], kv["condisagg_kv_gaps_total"][i],
			kv["condisagg_kv_messages_dropped_total"][i], kv["condisagg_kv_history_lost_total"][i]))
		run.decisions = append(run.decisions, dec1[i]-dec0[i])
		run.decSecs = append(run.decSecs, (sum1[i]-sum0[i])/(cnt1[i]-cnt0[i]))
	}
	return run
}

// bookingsZero: no replica holds a booking, its own or a peer's, on any worker.
func bookingsZero(ctx context.Context, s *Stack, admins []condisaggv1.AdminClient) error {
	for i, ac := range admins {
		ws, err := ac.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
		if err != nil {
			return err
		}
		for _, w := range ws.Workers {
			if w.ActiveDecodeBlocks != 0 || w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 {
				return fmt.Errorf("replica %d: %s holds %d decode blocks, %d requests, %d prefill tokens",
					i, w.Name, w.ActiveDecodeBlocks, w.ActiveRequests, w.ActivePrefillTokens)
			}
		}
		if v, err := s.metric(ctx, "http://"+s.Replicas[i].AdminAddr+"/metrics", "condisagg_peer_bookings"); err != nil || v != 0 {
			return fmt.Errorf("replica %d: condisagg_peer_bookings %g (%v)", i, v, err)
		}
	}
	return nil
}

// explainPair explains body on a and b at the same moment, and with self on a a second time
// (eself) at that moment too.
func explainPair(a, b condisaggv1.AdminClient, self bool, explain func(condisaggv1.AdminClient, []byte) (*condisaggv1.ExplainResponse, error),
	body []byte) (ea, eb, eself *condisaggv1.ExplainResponse, err error) {
	var erra, errb, errs error
	var wg sync.WaitGroup
	wg.Go(func() { ea, erra = explain(a, body) })
	wg.Go(func() { eb, errb = explain(b, body) })
	if self {
		wg.Go(func() { eself, errs = explain(a, body) })
	}
	wg.Wait()
	if err := errors.Join(erra, errb, errs); err != nil {
		return nil, nil, nil, err
	}
	return ea, eb, eself, nil
}

// overlapsText is the per-worker GPU prefix overlap an explain saw, e.g. "decode-0:34 ".
func overlapsText(e *condisaggv1.ExplainResponse) string {
	var b strings.Builder
	for _, o := range e.Overlaps {
		if o.GpuBlocks > 0 {
			fmt.Fprintf(&b, "%s:%d ", o.Worker, o.GpuBlocks)
		}
	}
	return b.String()
}

// differs: two decisions disagree when route, prefill worker or decode worker differ.
func differs(a, b *condisaggv1.ExplainResponse) bool {
	return a.Route != b.Route || a.PrefillWorker != b.PrefillWorker || a.DecodeWorker != b.DecodeWorker
}
