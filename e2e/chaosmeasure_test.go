package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// Peak RSS comes from the kernel's high-water mark (VmHWM), which clear_refs "5" resets: a
// peak between two samples of /metrics would be missed, this one is not.

// resetPeakRSS starts a new high-water mark for process pid.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS returns process pid's resident-memory high-water mark in bytes.
func peakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM:") }

// procStatus reads one "kB" figure of /proc/pid/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// buckets is a cumulative Prometheus histogram: count by upper bound (+Inf included).
type buckets map[float64]float64

// decisionBuckets reads condisagg_decision_seconds{stage="total"} from the router's /metrics.
func (s *Stack) decisionBuckets(ctx context.Context) (buckets, error) {
	return s.histogram(ctx, "condisagg_decision_seconds", `stage="total"`)
}

// histogram reads the buckets of the router's histogram name whose labels hold match.
func (s *Stack) histogram(ctx context.Context, name, match string) (buckets, error) {
	code, body, err := s.Get(ctx, "http://"+s.AdminAddr+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("condisagg /metrics: %d", code)
	}
	out := buckets{}
	for line := range strings.SplitSeq(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name+`_bucket{`)
		if !ok || !strings.Contains(rest, match) {
			continue
		}
		_, le, ok := strings.Cut(rest, `le="`)
		if !ok {
			continue
		}
		le, val, _ := strings.Cut(le, `"} `)
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return nil, fmt.Errorf("condisagg /metrics: %q: %w", line, err)
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("condisagg /metrics: %q: %w", line, err)
		}
		out[bound] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("condisagg /metrics: no %s{%s}", name, match)
	}
	return out, nil
}

// add returns b + (after - before), bound by bound: the decisions a router process made between
// two reads, added to those of earlier processes.
func (b buckets) add(after, before buckets) buckets {
	out := buckets{}
	for k, v := range b {
		out[k] = v
	}
	for k, v := range after {
		out[k] += v - before[k]
	}
	return out
}

// quantile interpolates within the bucket holding rank q·count, as Prometheus'
// histogram_quantile does. ok is false without observations; a rank in the +Inf bucket returns
// the largest finite bound and over = true.
func (b buckets) quantile(q float64) (v float64, over, ok bool) {
	bounds := make([]float64, 0, len(b))
	for k := range b {
		bounds = append(bounds, k)
	}
	slices.Sort(bounds)
	total := b[math.Inf(1)]
	if total <= 0 {
		return 0, false, false
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, ub := range bounds {
		c := b[ub]
		if c >= rank {
			if math.IsInf(ub, 1) {
				return prevBound, true, true
			}
			if c == prevCount {
				return ub, false, true
			}
			return prevBound + (ub-prevBound)*(rank-prevCount)/(c-prevCount), false, true
		}
		prevBound, prevCount = ub, c
	}
	return prevBound, true, true
}

// bookingsLeft polls `condisagg workers` and the open-bookings gauge until no worker holds
// booked load or wait runs out, and returns what is left: max(open bookings, Σ active
// requests), and a description of every non-zero figure.
func (s *Stack) bookingsLeft(ctx context.Context, wait time.Duration) (int64, string) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var left int64
	var detail string
	err := Poll(ctx, func() error {
		ws, err := s.ListWorkers(ctx)
		if err != nil {
			return err
		}
		open, err := s.RouterMetric(ctx, "condisagg_accounting_open_bookings")
		if err != nil {
			return err
		}
		var reqs int64
		var parts []string
		for _, w := range ws.Workers {
			reqs += w.ActiveRequests
			if w.ActiveRequests != 0 || w.ActivePrefillTokens != 0 || w.ActiveDecodeBlocks != 0 {
				parts = append(parts, fmt.Sprintf("%s: %d requests, %d prefill tokens, %d decode blocks",
					w.Name, w.ActiveRequests, w.ActivePrefillTokens, w.ActiveDecodeBlocks))
			}
		}
		if open != 0 {
			parts = append(parts, fmt.Sprintf("%g open bookings", open))
		}
		left, detail = max(int64(open), reqs), strings.Join(parts, "; ")
		if detail != "" {
			return fmt.Errorf("booked load left: %s", detail)
		}
		return nil
	})
	if err != nil && detail == "" {
		detail = err.Error() // the router could not be asked
		left = -1
	}
	return left, detail
}

// deadWindow is a time span in which a worker was dead and detected: no request Envoy received
// in [from, until) may be sent to any of addrs (as destination, upstream or decode host).
type deadWindow struct {
	worker      string
	addrs       []string
	from, until time.Time
}

// sentToDead waits until the access logs of envs hold a line for each of the requests sent
// through them since start (want[env]), and counts the lines inside a dead window. Lines that
// never appear are an error: the count would be a lower bound.
func (s *Stack) sentToDead(ctx context.Context, start time.Time, want map[*envoy.Process]int, windows []deadWindow) (int, []AccessEntry, error) {
	from := start.Add(-time.Millisecond) // the log's ms precision
	logs := map[*envoy.Process][]AccessEntry{}
	err := Poll(ctx, func() error {
		for env, n := range want {
			all, err := s.AccessLog(env)
			if err != nil {
				return err
			}
			var mine []AccessEntry
			for _, e := range all {
				if !e.Start.Before(from) {
					mine = append(mine, e)
				}
			}
			logs[env] = mine
			if len(mine) < n {
				return fmt.Errorf("access log: %d of %d requests logged", len(mine), n)
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	var hits []AccessEntry
	for _, entries := range logs {
		for _, e := range entries {
			for _, w := range windows {
				if e.Start.Before(w.from) || !e.Start.Before(w.until) {
					continue
				}
				if slices.Contains(w.addrs, e.Dest) || slices.Contains(w.addrs, e.Upstream) || slices.Contains(w.addrs, e.Decode) {
					hits = append(hits, e)
				}
			}
		}
	}
	return len(hits), hits, nil
}

// chaosRow is one scenario's line of the report.
type chaosRow struct {
	scenario         string
	requests         int
	failedAllowed    int   // failures the scenario's fault explains (see its allowed rule)
	failedUnexpected int   // requests that did not get the outcome the router promises
	toDead           int   // -1: no worker died in the scenario
	bookingsLeft     int64 // -1: could not be read
	peakRSS          int64 // bytes
	p99              float64
	p99Over, p99OK   bool
	notes            string
	wall             time.Duration
}

func (r chaosRow) cells() []string {
	dead := "—"
	if r.toDead >= 0 {
		dead = strconv.Itoa(r.toDead)
	}
	p99 := "—"
	if r.p99OK {
		p99 = strconv.FormatFloat(r.p99*1e3, 'f', 2, 64)
		if r.p99Over {
			p99 = "> " + p99
		}
	}
	return []string{r.scenario, strconv.Itoa(r.requests), strconv.Itoa(r.failedAllowed), strconv.Itoa(r.failedUnexpected),
		dead, strconv.FormatInt(r.bookingsLeft, 10), strconv.FormatFloat(float64(r.peakRSS)/(1<<20), 'f', 1, 64), p99,
		strconv.FormatFloat(r.wall.Seconds(), 'f', 1, 64), r.notes}
}

var chaosHeader = []string{"scenario", "requests", "failed (allowed)", "failed (unexpected)", "to dead worker after 2 s",
	"bookings left", "peak RSS MiB", "decision p99 ms", "wall s", "notes"}

// chaosTable renders rows as a Markdown table.
func chaosTable(rows []chaosRow) string {
	var b strings.Builder
	line := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	line(chaosHeader)
	sep := make([]string, len(chaosHeader))
	for i := range sep {
		sep[i] = "---"
		if i > 0 && i < len(sep)-1 {
			sep[i] = "---:"
		}
	}
	line(sep)
	for _, r := range rows {
		line(r.cells())
	}
	return b.String()
}
