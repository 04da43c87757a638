package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lineWriter hands each log line to a channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

func TestRunServes(t *testing.T) {
	lines := make(lineWriter, 16)
	log := slog.New(slog.NewTextHandler(lines, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	model := filepath.Join("..", "..", "tokenizer", "testdata", "models", "qwen3")
	go func() {
		done <- run(ctx, []string{"--port", "0", "--tokenizer", model, "--time-scale", "100", "--num-gpu-blocks", "500",
			"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*"}`,
			"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`,
			"--enable-lora", "--lora-modules", "sql-lora=/adapters/sql other=/adapters/other"}, log)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %#v", err)
		}
	}()
	var line string
	select {
	case line = <-lines:
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("no startup line")
	}
	m := regexp.MustCompile(`endpoint=(\S+) num_gpu_blocks=500 kv_events=tcp://127\.0\.0\.1:\d+ kv_replay=tcp://127\.0\.0\.1:\d+`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("startup line %q", line)
	}
	resp, err := http.Post("http://"+m[1]+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"completion_tokens":2`) {
		t.Fatalf("completion: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + m[1] + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"sql-lora"`) || !strings.Contains(string(b), `"id":"other"`) {
		t.Fatalf("--lora-modules: /v1/models %s", b)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, // no --tokenizer
		{"--tokenizer", "x", "--perf-model", "gpt"},
		{"--tokenizer", "x", "--kv-events-format", "json"},
		{"--tokenizer", "x", "--kv-events-hashes", "str"},
		{"--tokenizer", "x", "--kv-events-config", `{"publisher":"kafka"}`},
		{"--tokenizer", "x", "--kv-transfer-config", `{`},
		{"--tokenizer", "x", "--data-parallel-size", "0"},
		{"--tokenizer", "x", "--data-parallel-size", "1025"},
		{"--tokenizer", "x", "--lora-modules", "no-path"},
		{"--tokenizer", filepath.Join("..", "..", "tokenizer", "testdata", "models", "qwen3"), "--time-scale", "-1"},
	} {
		if err := run(context.Background(), args, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// TestKVTransferFailureRateFlag: the rate is a share in [0, 1] and needs a connector.
func TestKVTransferFailureRateFlag(t *testing.T) {
	nixl := `{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--kv-transfer-config", nixl, "--kv-transfer-failure-rate", "1"}, true},
		{[]string{"--kv-transfer-config", nixl, "--kv-transfer-failure-rate", "0.25"}, true},
		{[]string{"--kv-transfer-config", nixl, "--kv-transfer-failure-rate", "1.5"}, false},
		{[]string{"--kv-transfer-config", nixl, "--kv-transfer-failure-rate", "NaN"}, false},
		{[]string{"--kv-transfer-failure-rate", "0.5"}, false}, // no connector
	} {
		o, err := parseFlags(append([]string{"--tokenizer", "x"}, tc.args...))
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--kv-transfer-failure-rate")) {
			t.Errorf("%q: %v", tc.args, err)
		}
		if err == nil && o.xferFailRate <= 0 {
			t.Errorf("%q: rate %v", tc.args, o.xferFailRate)
		}
	}
}

// TestPerfModelFile: --perf-model takes a model file of condisagg calibrate in place of a
// name, and a bad one is refused naming the flag and the key.
func TestPerfModelFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "engine.yaml")
	text := "name: mine\nt0: 3\na1: 0.01\na2: 1.0e-6\nd1: 0.02\nd2: 3.0e-5\nbytes_per_token: 65536\nxfer_alpha_ms: 0.5\nxfer_gbps: 40\nnum_gpu_blocks: 1234\n"
	if err := os.WriteFile(good, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--tokenizer", "x", "--perf-model", good})
	if err != nil {
		t.Fatal(err)
	}
	if m := o.cfg.Model; m.Name != "mine" || m.T0 != 3 || m.D2 != 3e-5 || m.NumGPUBlocks != 1234 {
		t.Fatalf("model %+v", m)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(text, "d1: 0.02\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags([]string{"--tokenizer", "x", "--perf-model", bad}); err == nil ||
		!strings.Contains(err.Error(), "--perf-model") || !strings.Contains(err.Error(), "d1: missing") {
		t.Fatalf("bad file: %v", err)
	}
}
