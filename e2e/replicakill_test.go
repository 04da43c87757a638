package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/internal/adminclient"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Kill -9 of one of two replicas sharing bookings, under streaming load (issue 28 item 4).
const (
	killClients = 16
	killBefore  = 2 * time.Second // load before the kill
	killAfter   = 5 * time.Second // load after it
	killLease   = 2 * time.Second // replicas.lease: the dead replica's bookings end this long after its last word
)

// TestReplicaKill runs streaming chat requests from 16 clients through Envoy to two condisagg
// replicas sharing their bookings over NATS, kills replica 1 with SIGKILL mid-load, and keeps
// the load going. Once with Envoy fail-open (BUFFERED) and once fail-closed (FULL_DUPLEX). It
// measures the requests that failed or went undecided after the kill, the time from the kill
// to the last request the dead replica still cost (the survivor carries all traffic after it),
// how long until the survivor drops the dead one's bookings (one lease after its last
// heartbeat), and that every booking is 0 once the load ends.
//
// It asserts what holds on a loaded machine: fail-open, every request is answered; both
// modes, Envoy ejected the dead replica (outlier detection), no request started after the
// replica died failed or went undecided (Envoy replays a stream the dead replica had not
// answered on the survivor), at most the requests in flight at the kill failed, the dead
// replica's bookings leave the survivor within the lease plus 2 s, and every booking on the
// survivor is 0 once the load ends. The numbers and Envoy's ejection and retry counters are
// logged (docs/reliability.md records them).
func TestReplicaKill(t *testing.T) {
	for _, failOpen := range []bool{true, false} {
		name := map[bool]string{true: "fail_open", false: "fail_closed"}[failOpen]
		t.Run(name, func(t *testing.T) { replicaKill(t, failOpen) })
	}
}

func replicaKill(t *testing.T, failOpen bool) {
	s := startStack(t, Config{
		Disagg: mainDisagg, Replicas: 2, BookingBus: true, BookingLease: killLease, FullDuplexEnvoy: !failOpen,
		Workers: []WorkerSpec{
			{Name: "prefill-0", Role: Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: Decode, NumGPUBlocks: decodeKVBlocks},
		},
	})
	env := s.Envoy
	if !failOpen {
		env = s.EnvoyDuplex
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	survivor, conn, err := adminclient.Dial(s.Replicas[0].AdminGRPC, adminclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	c := newChaosClient(s, 30*time.Second)
	defer c.close()
	stopLoad := killLoad(c, env, killClients, 48)
	time.Sleep(killBefore)
	peerBefore, _ := s.metric(ctx, "http://"+s.Replicas[0].AdminAddr+"/metrics", "condisagg_peer_bookings")
	killed := time.Now()
	s.Replicas[1].Proc.Kill()
	dead := time.Now() // Kill returns once the process is reaped: it answers nothing after this
	// The dead replica's bookings must leave the survivor's load one lease after its last
	// heartbeat, while the load goes on.
	var peersGone time.Duration
	var watch sync.WaitGroup
	watch.Go(func() {
		for time.Since(killed) < killAfter {
			if v, err := s.metric(ctx, "http://"+s.Replicas[0].AdminAddr+"/metrics", "condisagg_peer_bookings"); err == nil && v == 0 {
				peersGone = time.Since(killed)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	time.Sleep(killAfter)
	watch.Wait()
	stopLoad()
	loadEnd := time.Now()
	settleErr := Poll(ctx, func() error { return survivorIdle(ctx, s, survivor) })
	settled := time.Since(killed)

	k := tallyKill(c.take(), killed, dead)
	mode := map[bool]string{true: "fail-open", false: "fail-closed"}[failOpen]
	t.Logf("%s, kill -9 of replica 1 of 2 (shared bookings, lease %v): %d requests (median %v), %d failed (%d of them started after the kill), %d answered without a decision "+
		"(Envoy's fail-open fallback), %d in flight at the kill (reaped %v after it), %d affected that started after; last request the dead replica cost started %v after the kill; "+
		"survivor held %g peer bookings before the kill and none %v after it; no booking of either kind %v after the kill (%v after the load ended)",
		mode, killLease, k.total, k.p50.Round(time.Millisecond), k.failed, k.failedAfter, k.undecided, k.inflight, dead.Sub(killed).Round(time.Millisecond), k.afterDeath, k.sinceKill.Round(time.Millisecond), peerBefore, peersGone.Round(time.Millisecond),
		settled.Round(time.Millisecond), time.Since(loadEnd).Round(time.Millisecond))
	for _, f := range k.firsts {
		t.Logf("  failed: %s", f)
	}
	// Envoy's own account: outlier ejections of the dead replica, and ext_proc streams it
	// replayed on the survivor.
	stats := map[string]uint64{}
	for _, n := range []string{"outlier_detection.ejections_enforced_consecutive_local_origin_failure", "upstream_rq_retry", "upstream_rq_retry_success",
		"upstream_cx_connect_fail", "upstream_rq_pending_failure_eject"} {
		v, err := env.Counter(ctx, "cluster.condisagg."+n)
		if err != nil && !errors.Is(err, envoy.ErrNoStat) {
			t.Fatal(err)
		}
		stats[n] = v
	}
	t.Logf("%s: Envoy cluster.condisagg: %v", mode, stats)
	if failOpen && k.failed > 0 {
		t.Errorf("fail-open: %d of %d requests failed across the kill of one replica", k.failed, k.total)
	}
	// Envoy ejects the dead replica at its first reset or refused connection and replays the
	// streams it had not answered on the survivor, so only requests whose ext_proc stream the
	// dead replica had already answered may fail (fail-closed) or lose their decision
	// (fail-open); no request started after it died may.
	if k.afterDeath > 0 {
		t.Errorf("%s: %d requests started after the replica died failed or went undecided (the last %v after the kill)", mode, k.afterDeath, k.sinceKill)
	}
	if k.failed > k.inflight {
		t.Errorf("%s: %d requests failed, more than the %d in flight at the kill", mode, k.failed, k.inflight)
	}
	if stats["outlier_detection.ejections_enforced_consecutive_local_origin_failure"] < 1 {
		t.Errorf("%s: Envoy never ejected the dead replica: %v", mode, stats)
	}
	if peersGone == 0 || peersGone > killLease+2*time.Second {
		t.Errorf("%s: the dead replica's bookings left the survivor %v after the kill (0: not within %v); want within the lease %v + 2s",
			mode, peersGone, killAfter, killLease)
	}
	if settleErr != nil {
		t.Errorf("%s: the survivor still holds bookings: %v", mode, settleErr)
	} else if settled > killAfter+killLease+3*time.Second+time.Since(loadEnd) {
		t.Errorf("%s: bookings back to 0 only %v after the kill", mode, settled)
	}
}

// survivorIdle: replica 0 holds no booking on any worker and no peer booking.
func survivorIdle(ctx context.Context, s *Stack, ac condisaggv1.AdminClient) error {
	ws, err := ac.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
	if err != nil {
		return err
	}
	var held []string
	for _, w := range ws.Workers {
		if w.ActiveDecodeBlocks != 0 || w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 {
			held = append(held, fmt.Sprintf("%s: %d blocks %d requests %d prefill tokens", w.Name, w.ActiveDecodeBlocks, w.ActiveRequests, w.ActivePrefillTokens))
		}
	}
	if v, err := s.metric(ctx, "http://"+s.Replicas[0].AdminAddr+"/metrics", "condisagg_peer_bookings"); err != nil || v != 0 {
		held = append(held, fmt.Sprintf("condisagg_peer_bookings %g (%v)", v, err))
	}
	if len(held) > 0 {
		sort.Strings(held)
		return fmt.Errorf("%v", held)
	}
	return nil
}

// killLoad runs clients streaming chat clients (prompts of 100 to 500 words, maxTokens tokens)
// through env, each sending its next request when the last ended, until the returned stop is
// called; stop returns once every client's last request has ended.
func killLoad(c *chaosClient, env *envoy.Process, clients, maxTokens int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				seed := c.nextSeed()
				body := ChatBody([]Message{{Role: "user", Content: Words(seed, 100+int(seed%400))}}, maxTokens)
				c.do(chaosReq{kind: "stream", via: env, body: body, expect: expectOK})
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// killTally is what a load cost around the kill of one replica at killed (reaped at dead).
type killTally struct {
	total, failed int
	failedAfter   int           // failed requests that started after the kill
	undecided     int           // answered without a router decision (Envoy's fail-open fallback)
	inflight      int           // requests in flight at the kill
	afterDeath    int           // failed or undecided requests that started once the replica was reaped
	sinceKill     time.Duration // from the kill to the start of the last request it cost (0: none after)
	p50           time.Duration // median duration of the requests answered in full
	firsts        []string      // the first three failures
}

func tallyKill(results []*chaosResult, killed, dead time.Time) killTally {
	var k killTally
	var lastAffected time.Time
	var durs []time.Duration
	for _, r := range results {
		k.total++
		if r.ok() {
			durs = append(durs, r.end.Sub(r.start))
		}
		bad := r.problem != ""
		if bad && r.start.After(killed) {
			k.failedAfter++
		}
		if (bad || r.decision == "") && !r.start.Before(dead) {
			k.afterDeath++
		}
		if bad {
			k.failed++
			if len(k.firsts) < 3 {
				k.firsts = append(k.firsts, r.String())
			}
		}
		if r.ok() && r.decision == "" {
			k.undecided++
		}
		if r.start.Before(killed) && r.end.After(killed) {
			k.inflight++
		}
		if (bad || r.decision == "") && r.start.After(lastAffected) {
			lastAffected = r.start
		}
	}
	if lastAffected.After(killed) {
		k.sinceKill = lastAffected.Sub(killed)
	}
	if len(durs) > 0 {
		slices.Sort(durs)
		k.p50 = durs[len(durs)/2]
	}
	return k
}
