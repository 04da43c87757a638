// Command demo brings the whole condisagg system up on loopback (Envoy, condisagg, two
// prefill and two decode simulated vLLM workers, a pd-sidecar per prefill worker), drives a
// multi-turn conversation and fresh prompts through Envoy, prints one row per request with
// the router's decision, and shuts everything down. `make demo` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/e2e"
)

// The demo's router settings: conditional disaggregation with Dynamo's default ISL thresholds,
// the prefill-load signal, and the decode-busy guard.
const (
	disagg = `{"policy":"isl_or_load","eff_isl_threshold":2048,"eff_isl_ratio_threshold":0.7,` +
		`"prefill_busy_threshold":2.0,"decode_busy_threshold":0.8}`
	decodeKVBlocks = 8192
	prefillMNBT    = 8192
	maxTokens      = 48
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	timeScale float64
	keep      bool
	timeout   time.Duration
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Float64Var(&o.timeScale, "time-scale", 5, "simulated workers run this many times faster than real time")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound of the whole demo")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "condisagg-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	fmt.Fprintln(out, "building condisagg, vllm-sim, pd-sidecar ...")
	bin, err := e2e.Build(ctx, dir)
	if err != nil {
		return err
	}
	s, err := e2e.Start(ctx, e2e.Config{Bin: bin, Dir: dir, TimeScale: o.timeScale, Disagg: disagg, QueueThreshold: 2,
		Workers: []e2e.WorkerSpec{
			{Name: "prefill-0", Role: e2e.Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "prefill-1", Role: e2e.Prefill, MaxNumBatchedTokens: prefillMNBT},
			{Name: "decode-0", Role: e2e.Decode, NumGPUBlocks: decodeKVBlocks},
			{Name: "decode-1", Role: e2e.Decode, NumGPUBlocks: decodeKVBlocks},
		}})
	if err != nil {
		return err
	}
	defer s.Close()
	printStack(out, s, o, time.Since(start))
	d := &driver{s: s, out: out}
	if err := d.script(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "\ncondisagg workers:")
	workers := exec.CommandContext(ctx, bin.Condisagg, "workers", "--addr", s.AdminGRPC)
	workers.Stdout, workers.Stderr = out, out
	if err := workers.Run(); err != nil {
		return fmt.Errorf("condisagg workers: %w", err)
	}
	s.Close()
	fmt.Fprintf(out, "\nstack stopped; demo took %.1fs\n", time.Since(start).Seconds())
	return nil
}

func printStack(out io.Writer, s *e2e.Stack, o options, took time.Duration) {
	fmt.Fprintf(out, "stack up in %.1fs (simulated workers run %gx faster than real time):\n", took.Seconds(), o.timeScale)
	fmt.Fprintf(out, "  envoy      http://%s  (admin %s)\n", s.Envoy.ListenerAddr("llm"), s.Envoy.AdminAddr())
	fmt.Fprintf(out, "  condisagg  ext_proc gRPC %s, Admin gRPC %s, admin HTTP %s\n", s.GRPCAddr, s.AdminGRPC, s.AdminAddr)
	for _, w := range s.Workers {
		if w.Sidecar != nil {
			fmt.Fprintf(out, "  %-10s vllm-sim %s behind pd-sidecar %s\n", w.Spec.Name, w.SimAddr, w.Endpoint)
		} else {
			fmt.Fprintf(out, "  %-10s vllm-sim %s\n", w.Spec.Name, w.SimAddr)
		}
	}
	fmt.Fprintf(out, "  policy     %s\n\n", disagg)
}

// driver sends the scripted requests and prints the table, one row as each answer ends.
type driver struct {
	s   *e2e.Stack
	out io.Writer
}

// rowFormat is one table row: request, prompt tokens, cached blocks, effective ISL, route,
// workers that served, reason, TTFT.
const rowFormat = "%-20s %10v %10v %8v %-7s %-22s %-22s %8v\n"

func (d *driver) script(ctx context.Context) error {
	fmt.Fprintf(d.out, rowFormat, "REQUEST", "PROMPT_TOK", "CACHED_BLK", "EFF_ISL", "ROUTE", "WORKER", "REASON", "TTFT_ms")
	msgs := []e2e.Message{
		{Role: "system", Content: "You are a concise assistant for an operations team."},
		{Role: "user", Content: e2e.Words(1, 2600)},
	}
	for turn := 1; turn <= 4; turn++ {
		r, err := d.send(ctx, fmt.Sprintf("conversation turn %d", turn), msgs)
		if err != nil {
			return err
		}
		msgs = append(msgs, e2e.Message{Role: "assistant", Content: r.Text},
			e2e.Message{Role: "user", Content: e2e.Words(uint64(10+turn), 150)})
		// Wait (bounded) until the router has indexed this turn on the decode worker.
		d.waitIndexed(ctx, msgs, r.Decision.ISL/16)
	}
	if _, err := d.send(ctx, "long fresh prompt", []e2e.Message{{Role: "user", Content: e2e.Words(2, 6000)}}); err != nil {
		return err
	}
	if _, err := d.send(ctx, "short fresh prompt", []e2e.Message{{Role: "user", Content: e2e.Words(3, 200)}}); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "\nPROMPT_TOK, CACHED_BLK (16-token blocks on the chosen decode worker), EFF_ISL and REASON come from the")
	fmt.Fprintln(d.out, "x-condisagg-decision header; WORKER from the simulators' request counters; TTFT is wall-clock through Envoy.")
	return nil
}

func (d *driver) send(ctx context.Context, label string, msgs []e2e.Message) (*e2e.Response, error) {
	before, err := d.s.Served(ctx)
	if err != nil {
		return nil, err
	}
	r, err := d.s.Chat(ctx, e2e.ChatBody(msgs, maxTokens), nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 || !r.Done {
		return nil, fmt.Errorf("%s: status %d: %s", label, r.Status, r.Body)
	}
	want := 1
	if r.Decision.Route == "prefill" {
		want = 2
	}
	delta, err := d.s.WaitServed(ctx, before, want)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(d.out, rowFormat, label, r.Decision.ISL, r.Decision.OverlapBlocks,
		r.Decision.EffISL, r.Decision.Route, servedBy(d.s, delta), r.Decision.Reason, fmt.Sprintf("%.1f", float64(r.TTFT.Microseconds())/1000))
	return r, nil
}

// servedBy names the workers that finished the request, prefill first ("prefill-1 -> decode-0").
func servedBy(s *e2e.Stack, delta map[string]int) string {
	var p, dec []string
	for name := range delta {
		if w := s.Worker(name); w != nil && w.Spec.Role == e2e.Prefill {
			p = append(p, name)
		} else {
			dec = append(dec, name)
		}
	}
	slices.Sort(p)
	slices.Sort(dec)
	return strings.Join(append(p, dec...), " -> ")
}

// waitIndexed polls `condisagg explain` for the next turn until some decode worker holds
// blocks of the previous prompt, for at most two seconds.
func (d *driver) waitIndexed(ctx context.Context, msgs []e2e.Message, blocks int) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = e2e.Poll(ctx, func() error {
		ex, err := d.s.Explain(ctx, e2e.ChatBody(msgs, maxTokens))
		if err != nil {
			return err
		}
		if ex.GetInputs().GetOverlapBlocks() < int64(blocks) {
			return errors.New("not indexed yet")
		}
		return nil
	})
}
