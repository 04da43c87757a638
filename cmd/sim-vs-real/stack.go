package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/internal/engineproc"
	"golang.org/x/sys/unix"
)

// stack is the running engines and pd-sidecar (for the whole run), and per replay condisagg
// serve and Envoy.
type stack struct {
	c        *config
	children []*engineproc.Child
}

// engine i's role in the P/D layouts: engine 0 prefills (behind pd-sidecar), engine 1 decodes.
func (s *stack) engineAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", s.c.ports.engine[i]) }
func (s *stack) sidecarAddr() string     { return fmt.Sprintf("127.0.0.1:%d", s.c.ports.sidecar) }

// startEngines starts both engines at once, engine i pinned to core i, both with NixlConnector
// as kv_both (so one pair of engines serves every layout: a request without kv_transfer_params
// runs locally), and pd-sidecar in front of engine 0.
func (s *stack) startEngines(ctx context.Context) error {
	c := s.c
	if c.attach {
		for i := range 2 {
			if err := healthy("http://" + s.engineAddr(i) + "/health"); err != nil {
				return fmt.Errorf("--attach: engine %d: %w", i, err)
			}
		}
		return healthy("http://" + s.sidecarAddr() + "/healthz")
	}
	errs := make(chan error, 2)
	kids := make([]*engineproc.Child, 2)
	for i := range 2 {
		go func() {
			var err error
			kids[i], err = engineproc.StartEngine(ctx, engineproc.Engine{Root: c.root, Name: fmt.Sprintf("engine%d", i), LogDir: c.workdir,
				Model: c.model, ServedName: modelName, Port: c.ports.engine[i], KVPort: c.ports.kv[i], ReplayPort: c.ports.replay[i],
				Blocks: c.blocks, MaxModelLen: c.maxLen, StartTimeout: c.startTimeout, CPUs: strconv.Itoa(i),
				Env: []string{"VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1", fmt.Sprintf("VLLM_NIXL_SIDE_CHANNEL_PORT=%d", c.ports.side[i]),
					"UCX_TLS=tcp,self,sm", "UCX_NET_DEVICES=lo"},
				Extra: []string{"--max-num-batched-tokens", strconv.Itoa(c.mnbt), "--max-num-seqs", strconv.Itoa(c.maxSeqs),
					"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cpu"}`}})
			errs <- err
		}()
	}
	var err error
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	for _, k := range kids {
		if k != nil {
			s.children = append(s.children, k)
			s.boost(k)
		}
	}
	if err != nil {
		return err
	}
	ep := s.sidecarAddr()
	sc, err := engineproc.Start("pd-sidecar", filepath.Join(c.workdir, "pd-sidecar.log"), nil, c.sidecar,
		"--listen", ep, "--admin-listen", "", "--allow", s.engineAddr(1)+","+ep, "--dial", ep+"="+s.engineAddr(0),
		"--default-decode-host", s.engineAddr(0), "--prefill-timeout", "120s", "--drain-timeout", "2s")
	if err != nil {
		return err
	}
	s.children = append(s.children, sc)
	s.boost(sc)
	return engineproc.WaitHealthy(ctx, sc, "http://"+ep+"/healthz", 30*time.Second)
}

func healthy(url string) error {
	r, err := http.Get(url)
	if err != nil {
		return err
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answers %d", url, r.StatusCode)
	}
	return nil
}

// calibrate runs condisagg calibrate on the decode engine with the prefill engine behind
// pd-sidecar, and returns its output.
func (s *stack) calibrate(ctx context.Context, out string) (string, error) {
	c := s.c
	cmd := exec.CommandContext(ctx, "nice", "-n", strconv.Itoa(c.nice), c.condisagg, "calibrate", "--endpoint", "http://"+s.engineAddr(1),
		"--prefill-endpoint", "http://"+s.sidecarAddr(), "--model", modelName, "--block-size", strconv.Itoa(blockSize),
		"--max-num-batched-tokens", strconv.Itoa(c.mnbt), "--max-minutes", strconv.FormatFloat(c.calMinutes, 'g', -1, 64),
		"--repeats", strconv.Itoa(c.calRepeats), "--max-isl", strconv.Itoa(c.calMaxISL), "--max-batch", strconv.Itoa(c.calMaxBatch),
		"--min-r2", ftoa(c.calMinR2),
		"--quiet", "-o", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("condisagg calibrate: %w", err)
	}
	return string(b), nil
}

// nixlMetrics lists the vllm:nixl_* series names the decode engine publishes.
func (s *stack) nixlMetrics(ctx context.Context) []string {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.engineAddr(1)+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{"(metrics: " + err.Error() + ")"}
	}
	defer resp.Body.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "vllm:nixl") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		seen[name] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// routerConfig is condisagg serve's configuration for a layout: both engines as decode
// workers (aggregated), or engine 0 behind pd-sidecar as the prefill worker and engine 1 as
// the decode worker, with the feature off (always remote) or conditional.
func (s *stack) routerConfig(layout string) string {
	c := s.c
	var router, workers string
	worker := func(name, role, ep string, i int) string {
		return fmt.Sprintf("  - {name: %s, role: %s, endpoint: %s, kv_events: tcp://127.0.0.1:%d, kv_replay: tcp://127.0.0.1:%d, num_gpu_blocks: %d, max_num_batched_tokens: %d}\n",
			name, role, ep, c.ports.kv[i], c.ports.replay[i], c.blocks, c.mnbt)
	}
	switch layout {
	case "aggregated":
		router = "  conditional_disagg: false\n"
		workers = worker("engine-0", "decode", s.engineAddr(0), 0) + worker("engine-1", "decode", s.engineAddr(1), 1)
	default:
		switch layout {
		case "disaggregated":
			router = "  conditional_disagg: false\n"
		case "isl_or_load":
			// Defaults: eff_isl_threshold and ratio, θp = queue_threshold · mnbt (2, as the
			// simulator's default).
			router = "  conditional_disagg: true\n  conditional_disagg_config: {policy: isl_or_load}\n  queue_threshold: 2.0\n"
		case "slo":
			router = fmt.Sprintf("  conditional_disagg: true\n  conditional_disagg_config: {policy: slo, slo_ttft_ms: %d, slo_tpot_ms: %d}\n  cost_model_file: %s\n",
				c.slo.TTFT.Milliseconds(), c.slo.TPOT.Milliseconds(), c.modelFile)
		}
		workers = worker("prefill-0", "prefill", s.sidecarAddr(), 0) + worker("decode-0", "decode", s.engineAddr(1), 1)
	}
	return fmt.Sprintf(`listen: 127.0.0.1:%d
admin_listen: 127.0.0.1:%d
admin_grpc_listen: 127.0.0.1:%d
log_level: info
debug_headers: true # x-condisagg-decision: loadgen counts the routes
failure_mode: closed
unready_delay: 0s
drain_timeout: 1s
model: {tokenizer: %s, block_size: %d}
router:
  mode: kv
  kv_events: true
%spool: {scrape_interval: 0s}
workers:
%s`, c.ports.listen, c.ports.adminWeb, c.ports.adminGRPC, filepath.Join(c.root, "tokenizer/testdata/models/qwen3"), blockSize, router, workers)
}

// replay runs one layout: empty prefix caches, condisagg serve and Envoy started afresh, the
// workload sent by loadgen through Envoy.
func (s *stack) replay(ctx context.Context, layout string, rep int) (row, error) {
	c := s.c
	for i := range 2 {
		if err := post(ctx, "http://"+s.engineAddr(i)+"/reset_prefix_cache"); err != nil {
			return row{}, fmt.Errorf("reset engine %d: %w", i, err)
		}
	}
	dir := filepath.Join(c.workdir, fmt.Sprintf("%s-%d", layout, rep+1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row{}, err
	}
	cfgPath := filepath.Join(dir, "condisagg.yaml")
	if err := os.WriteFile(cfgPath, []byte(s.routerConfig(layout)), 0o644); err != nil {
		return row{}, err
	}
	p, err := engineproc.Start("condisagg", filepath.Join(dir, "condisagg.log"), nil, c.condisagg, "serve", "--config", cfgPath)
	if err != nil {
		return row{}, err
	}
	defer p.Shutdown()
	s.boost(p)
	if err := engineproc.WaitHealthy(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports.adminWeb), 60*time.Second); err != nil {
		return row{}, err
	}
	e, out, err := startEnvoy(ctx, dir, c.ports.listen)
	if err != nil {
		return row{}, err
	}
	defer func() { _ = e.Stop(); out.Close() }()
	args := []string{"--url", "http://" + e.ListenerAddr("llm") + "/v1/completions", "--model", modelName,
		"--trace", c.trace, "--max-requests", strconv.Itoa(c.requests), "--time-scale", ftoa(c.timeScale),
		"--input-scale", ftoa(c.inScale), "--output-scale", ftoa(c.outScale), "--concurrency", strconv.Itoa(c.concurrency),
		"--slo", c.sloText, "--request-timeout", "5m", "-o", "json", "--name", layout}
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", strconv.Itoa(c.nice), c.loadgen}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return row{}, fmt.Errorf("loadgen: %w: %s", err, engineproc.LastLines(stderr.String(), 10))
	}
	if err := os.WriteFile(filepath.Join(dir, "loadgen.json"), stdout.Bytes(), 0o644); err != nil {
		return row{}, err
	}
	var lg struct {
		Summary json.RawMessage
		Errors  []string
	}
	if err := json.Unmarshal(stdout.Bytes(), &lg); err != nil {
		return row{}, fmt.Errorf("loadgen output: %w", err)
	}
	r, err := rowFromJSON(lg.Summary)
	r.Errors = lg.Errors
	return r, err
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func post(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answers %d", url, resp.StatusCode)
	}
	return nil
}

// startEnvoy starts the real Envoy (BUFFERED, fail-closed) in front of condisagg's ext_proc
// port and waits until it sees condisagg healthy.
func startEnvoy(ctx context.Context, dir string, extProcPort int) (*envoy.Process, *os.File, error) {
	bin, err := envoy.FindBinary()
	if err != nil {
		return nil, nil, err
	}
	path, err := envoy.WriteBootstrap(dir, envoy.Params{Mode: envoy.Buffered, FailOpen: envoy.FailClosed,
		ExtProc: envoy.Endpoint{Host: "127.0.0.1", Port: extProcPort}, Proxy: envoy.Proxy{HealthCheckInterval: time.Second}})
	if err != nil {
		return nil, nil, err
	}
	out, err := os.Create(filepath.Join(dir, "envoy.log"))
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := envoy.Start(sctx, bin, path, envoy.StartOptions{Output: out})
	if err != nil {
		out.Close()
		return nil, nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n, err := e.Counter(ctx, "cluster.condisagg.membership_healthy"); err == nil && n == 1 {
			return e, out, nil
		}
		if time.Now().After(deadline) {
			_ = e.Stop()
			out.Close()
			return nil, nil, fmt.Errorf("envoy does not see condisagg healthy after 30s (log %s)", out.Name())
		}
	}
}

// boostSession sets the nice value of the run's autogroup. With the kernel's autogroup
// scheduling (/proc/sys/kernel/sched_autogroup_enabled = 1) CPU time is shared fairly between
// sessions first and nice only orders the threads of one session: the engines at nice 0 got a
// third of their core beside other sessions' builds at nice 15. The children stay in the
// driver's session, so this weighs them all.
func boostSession(nice int) error {
	const path = "/proc/self/autogroup"
	if _, err := os.Stat(path); err != nil {
		return nil // no autogroup scheduling: the process nice values below decide
	}
	return os.WriteFile(path, []byte(strconv.Itoa(nice)), 0)
}

// boost sets the nice value of every thread of a child's process group (each child leads its
// own): the engines, their EngineCore and workers, and the stack in front of them.
func (s *stack) boost(k *engineproc.Child) {
	if err := unix.Setpriority(unix.PRIO_PGRP, k.Pid(), s.c.nice); err != nil {
		fmt.Fprintf(os.Stderr, "sim-vs-real: nice %d for %s: %v (timings then share the host with other work)\n", s.c.nice, k.Name(), err)
	}
}

func (s *stack) teardown() {
	for i := len(s.children) - 1; i >= 0; i-- {
		s.children[i].Shutdown()
	}
}
