package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// TestExtProcLoad is a measurement, not part of make test: E2E_LOAD=N sends N concurrent
// streaming chat requests (E2E_LOAD_WORDS words of fresh prompt each, default 1500) in one
// burst through the BUFFERED Envoy and reports the answers' statuses, Envoy's ext_proc
// counters and condisagg's decision latency. Run:
//
//	E2E_LOAD=500 go test ./e2e -run TestExtProcLoad -v -count=1
func TestExtProcLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("E2E_LOAD"))
	if n <= 0 {
		t.Skip("set E2E_LOAD=N to run the ext_proc load measurement")
	}
	words, tokens := envInt("E2E_LOAD_WORDS", 1500), envInt("E2E_LOAD_TOKENS", 16)
	s := startStack(t, Config{Workers: []WorkerSpec{
		{Name: "prefill-0", Role: Prefill, NumGPUBlocks: 1 << 20, MaxNumBatchedTokens: 8192},
		{Name: "decode-0", Role: Decode, NumGPUBlocks: 1 << 20},
		{Name: "decode-1", Role: Decode, NumGPUBlocks: 1 << 20},
	}, MaxBodyBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bodies := make([][]byte, n)
	for i := range n {
		bodies[i] = ChatBody([]Message{{Role: "user", Content: Words(uint64(1000+i), words)}}, tokens)
	}
	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		ttfb     []time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			r, err := s.Chat(ctx, bodies[i], nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses["error"]++
				return
			}
			statuses[strconv.Itoa(r.Status)+"/"+r.Decision.Reason]++
			ttfb = append(ttfb, r.TTFT)
			_ = t0
		})
	}
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(ttfb)
	t.Logf("%d requests, %d words, %d output tokens each, wall %v", n, words, tokens, wall.Round(time.Millisecond))
	t.Logf("answers: %v", statuses)
	if len(ttfb) > 0 {
		t.Logf("client TTFT p50 %v p99 %v max %v", ttfb[len(ttfb)/2].Round(time.Millisecond),
			ttfb[len(ttfb)*99/100].Round(time.Millisecond), ttfb[len(ttfb)-1].Round(time.Millisecond))
	}
	for _, name := range []string{"http.llm.ext_proc.message_timeouts", "http.llm.ext_proc.failure_mode_allowed",
		"http.llm.ext_proc.streams_failed", "http.llm.ext_proc.streams_started", "cluster.condisagg.upstream_rq_pending_overflow",
		"cluster.condisagg.upstream_cx_total", "cluster.condisagg.upstream_rq_total"} {
		v, err := s.Envoy.Counter(ctx, name)
		t.Logf("envoy %s = %d %v", name, v, errString(err))
	}
	for _, q := range []string{"condisagg_decision_seconds_count", "condisagg_decision_seconds_sum"} {
		v, err := s.RouterMetric(ctx, q, `stage="total"`)
		t.Logf("condisagg %s{total} = %g %v", q, v, errString(err))
	}
	for _, stage := range []string{"tokenize", "total"} {
		t.Logf("condisagg decision %s: %s", stage, histQuantiles(ctx, s, "condisagg_decision_seconds", `stage="`+stage+`"`))
	}
	t.Logf("condisagg decision slot wait: %s", histQuantiles(ctx, s, "condisagg_extproc_decision_wait_seconds", ""))
	for _, q := range []string{"condisagg_extproc_stream_errors_total", "condisagg_requests_rejected_total",
		"condisagg_extproc_decision_queue_timeouts_total", `condisagg_decisions_total`} {
		v, err := s.RouterMetric(ctx, q)
		t.Logf("condisagg %s = %g %v", q, v, errString(err))
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

// histQuantiles reads the buckets of histogram name (series containing label) and
// interpolates p50 and p99.
func histQuantiles(ctx context.Context, s *Stack, name, label string) string {
	_, body, err := s.Get(ctx, "http://"+s.AdminAddr+"/metrics")
	if err != nil {
		return err.Error()
	}
	type bucket struct{ le, n float64 }
	var bs []bucket
	for line := range strings.SplitSeq(string(body), "\n") {
		series, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, name+"_bucket{") || !strings.Contains(series, label) {
			continue
		}
		_, rest, _ := strings.Cut(series, `le="`)
		leS, _, _ := strings.Cut(rest, `"`)
		le := math.Inf(1)
		if leS != "+Inf" {
			le, _ = strconv.ParseFloat(leS, 64)
		}
		n, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
		bs = append(bs, bucket{le, n})
	}
	if len(bs) == 0 {
		return "no samples"
	}
	total := bs[len(bs)-1].n
	q := func(p float64) string {
		want := p * total
		prevLe, prevN := 0.0, 0.0
		for _, b := range bs {
			if b.n >= want {
				if math.IsInf(b.le, 1) {
					return fmt.Sprintf(">%gs", prevLe)
				}
				frac := (want - prevN) / max(b.n-prevN, 1)
				return time.Duration((prevLe + frac*(b.le-prevLe)) * float64(time.Second)).Round(10 * time.Microsecond).String()
			}
			prevLe, prevN = b.le, b.n
		}
		return "?"
	}
	return fmt.Sprintf("n=%g p50 %s p99 %s", total, q(0.5), q(0.99))
}

// TestStalledUploadThroughEnvoy (about 9 s, in make test): a client that sends request headers
// and part of its body, then nothing, through both Envoy profiles (BUFFERED fail-open, full
// duplex fail-closed) gets condisagg's 408 stream_idle_timeout (stream_idle_timeout: 1s set by
// a configuration reload), with no ext_proc error counted by Envoy.
func TestStalledUploadThroughEnvoy(t *testing.T) {
	s := startStack(t, Config{Workers: []WorkerSpec{
		{Name: "prefill-0", Role: Prefill, NumGPUBlocks: 4000, MaxNumBatchedTokens: 8192},
		{Name: "decode-0", Role: Decode, NumGPUBlocks: 4000},
	}, FullDuplexEnvoy: true})
	ctx := scenarioCtx(t)
	b, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ConfigPath, append(b, "stream_idle_timeout: 1s\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Condisagg.WaitLog(ctx, "configuration reloaded"); err != nil {
		t.Fatal(err)
	}
	for _, env := range []struct {
		name string
		addr string
	}{{"buffered", s.Envoy.ListenerAddr("llm")}, {"full_duplex", s.EnvoyDuplex.ListenerAddr("llm")}} {
		c, err := net.Dial("tcp", env.addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: 1000\r\n\r\n{\"model\":\"qwen3\",\"messages\":[")
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		r := bufio.NewReader(c)
		status, _ := r.ReadString('\n')
		var body string
		for {
			l, err := r.ReadString('\n')
			if err != nil || l == "\r\n" {
				body, _ = r.ReadString('}')
				break
			}
		}
		c.Close()
		t.Logf("%s: %q after %v: %s", env.name, strings.TrimSpace(status), time.Since(start).Round(time.Millisecond), body)
		if !strings.HasPrefix(status, "HTTP/1.1 408") || !strings.Contains(body, "stream_idle_timeout") {
			t.Errorf("%s: got %q %s, want 408 stream_idle_timeout", env.name, status, body)
		}
	}
	for _, name := range []string{"http.llm.ext_proc.spurious_msgs_received", "http.llm.ext_proc.streams_failed",
		"http.llm.ext_proc.message_timeouts", "http.llm.ext_proc.failure_mode_allowed"} {
		for _, env := range []*envoy.Process{s.Envoy, s.EnvoyDuplex} {
			if n, err := env.Counter(ctx, name); err == nil && n != 0 {
				t.Errorf("envoy %s = %d", name, n)
			}
		}
	}
	if v, err := s.RouterMetric(ctx, "condisagg_extproc_stream_idle_timeouts_total"); err != nil || v != 2 {
		t.Errorf("condisagg_extproc_stream_idle_timeouts_total = %v %v, want 2", v, err)
	}
}
