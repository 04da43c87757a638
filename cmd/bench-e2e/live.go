package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/condisagg/condisagg/e2e"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/workload"
)

// liveResult is what the live run measured.
type liveResult struct {
	summary workload.Summary // wall clock
	report  loadgenReport
	engine  engineStats // simulated time, from the workers' /metrics
	wall    time.Duration
}

// engineStats are latency sums the simulated workers measured themselves (vllm-sim reports
// them in simulated seconds), so the HTTP path can be told apart from the engines' pacing.
type engineStats struct {
	decodeITLSum, decodeITLCount   float64
	decodeTTFTSum, decodeTTFTCount float64
}

func (e engineStats) itlMean() time.Duration {
	return meanSeconds(e.decodeITLSum, e.decodeITLCount)
}

func meanSeconds(sum, count float64) time.Duration {
	if count == 0 {
		return 0
	}
	return time.Duration(sum / count * float64(time.Second))
}

// tools are the built executables.
type tools struct {
	bin     e2e.Binaries
	loadgen string
}

// build compiles the stack's binaries and loadgen into dir.
func build(ctx context.Context, dir string) (tools, error) {
	bin, err := e2e.Build(ctx, dir)
	if err != nil {
		return tools{}, err
	}
	lg, err := buildLoadgen(ctx, dir)
	return tools{bin: bin, loadgen: lg}, err
}

// runLive brings up a fresh stack at time scale scale (configs in dir) and replays the slice
// with loadgen, arrivals compressed by the scale.
func runLive(ctx context.Context, o *options, tl tools, dir string, scale float64, out io.Writer) (*liveResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench-e2e: scratch directory %s: %w", dir, err)
	}
	var specs []e2e.WorkerSpec
	for i := range o.prefill {
		specs = append(specs, e2e.WorkerSpec{Name: fmt.Sprintf("prefill-%d", i), Role: e2e.Prefill, NumGPUBlocks: o.numGPUBlocks, MaxNumBatchedTokens: o.mnbt})
	}
	for i := range o.decode {
		specs = append(specs, e2e.WorkerSpec{Name: fmt.Sprintf("decode-%d", i), Role: e2e.Decode, NumGPUBlocks: o.numGPUBlocks, MaxNumBatchedTokens: o.mnbt})
	}
	st, err := e2e.Start(ctx, e2e.Config{Bin: tl.bin, Dir: dir, TimeScale: scale, Disagg: o.disagg,
		QueueThreshold: o.queueThreshold, Workers: specs, MaxBodyBytes: maxBodyBytes})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	url := "http://" + st.Envoy.ListenerAddr("llm") + "/v1/completions"
	fmt.Fprintf(out, "\nstack up (%d prefill, %d decode, time scale %g); replaying through %s\n", o.prefill, o.decode, scale, url)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tl.loadgen, loadgenArgs(o, url, scale)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("bench-e2e: loadgen %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, stderr.Bytes())
	}
	lr := &liveResult{wall: time.Since(t0)}
	if lr.summary, lr.report, err = parseLoadgen(stdout.Bytes()); err != nil {
		return nil, err
	}
	lr.engine, err = engineMetrics(ctx, st)
	return lr, err
}

// maxBodyBytes is condisagg's body limit for the run: token-id prompts of long traces are
// several hundred kilobytes of JSON.
const maxBodyBytes = 16 << 20

func buildLoadgen(ctx context.Context, dir string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "loadgen")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/loadgen")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench-e2e: go build -o %s ./cmd/loadgen: %w\n%s", path, err, b)
	}
	return path, nil
}

// engineMetrics sums the decode workers' own ITL and TTFT histograms.
func engineMetrics(ctx context.Context, st *e2e.Stack) (engineStats, error) {
	var e engineStats
	for _, w := range st.Workers {
		if w.Spec.Role != e2e.Decode {
			continue
		}
		for _, m := range []struct {
			name string
			dst  *float64
		}{
			{"vllm:inter_token_latency_seconds_sum", &e.decodeITLSum},
			{"vllm:inter_token_latency_seconds_count", &e.decodeITLCount},
			{"vllm:time_to_first_token_seconds_sum", &e.decodeTTFTSum},
			{"vllm:time_to_first_token_seconds_count", &e.decodeTTFTCount},
		} {
			v, err := st.SimMetric(ctx, w, m.name)
			if err != nil {
				return e, fmt.Errorf("bench-e2e: %s metric %s: %w", w.Spec.Name, m.name, err)
			}
			*m.dst += v
		}
	}
	return e, nil
}
