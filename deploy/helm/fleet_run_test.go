package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/internal/testport"
)

// TestFleetRunsRenderedCommands runs the vllm-sim variant's containers as the pods would, on
// 127.0.0.1: the real vllm-sim and pd-sidecar binaries with exactly the rendered arguments and
// environment, with two substitutions a cluster makes and this machine cannot: $(POD_IP) is
// 127.0.0.1, and the decode pods' cluster DNS name in pd-sidecar's allowlist is localhost on the
// decode engine's port. Prefill (engine and sidecar) and decode are rendered with different
// ports so both fit on one host. A remote prefill through the sidecar then reaches the prefill
// engine (kv_producer) and the decode engine (kv_consumer) and answers with the prompt-token
// details; the prefill engine's KV transfer parameters name its side channel from the rendered
// environment; the KV event and replay ports are bound.
func TestFleetRunsRenderedCommands(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/vllm-sim", "./cmd/pd-sidecar")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tok := filepath.Join(root, "tokenizer/testdata/models/qwen3")
	renderAt := func(base int) map[string]*appsv1.Deployment {
		v := fleetVariant{name: "run", values: []string{"vllm-sim.yaml"}, set: []string{"model.tokenizer=" + tok,
			fmt.Sprintf("ports.http=%d", base), fmt.Sprintf("ports.kvEvents=%d", base+1), fmt.Sprintf("ports.kvReplay=%d", base+2),
			fmt.Sprintf("ports.nixlSideChannel=%d", base+3), fmt.Sprintf("sidecar.port=%d", base+4), fmt.Sprintf("sidecar.metricsPort=%d", base+5)}}
		return fleetRoles(t, renderFleet(t, v))
	}
	pBase, dBase := testport.Block(t, 6), testport.Block(t, 6)
	prefill, decode := renderAt(pBase)["prefill"], renderAt(dBase)["decode"]
	home := t.TempDir()
	start := func(name string, c *corev1.Container, args []string) {
		t.Helper()
		env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "HF_HUB_OFFLINE=1"}
		for _, e := range c.Env {
			if e.ValueFrom != nil { // POD_IP, from the downward API
				env = append(env, e.Name+"=127.0.0.1")
				continue
			}
			val := strings.ReplaceAll(e.Value, "$(POD_IP)", "127.0.0.1")
			if e.Name == "HF_HOME" {
				val = filepath.Join(home, "hf")
			}
			env = append(env, e.Name+"="+val)
		}
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "$(POD_IP)", "127.0.0.1")
		}
		var log bytes.Buffer
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s %q:\n%s", name, args, log.String())
			}
		})
	}
	pe, de, sc := container(t, prefill, "engine"), container(t, decode, "engine"), container(t, prefill, "pd-sidecar")
	start("vllm-sim", pe, append([]string(nil), pe.Args...))
	start("vllm-sim", de, append([]string(nil), de.Args...))
	scArgs := append([]string(nil), sc.Args...)
	dns := fmt.Sprintf("vllm-decode-pods.%s.svc.cluster.local:%d", namespace, pBase)
	for i, a := range scArgs {
		if strings.Contains(a, dns) {
			scArgs[i] = strings.ReplaceAll(a, dns, fmt.Sprintf("localhost:%d", dBase))
		}
	}
	start("pd-sidecar", sc, scArgs)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, u := range []string{fmt.Sprintf("http://127.0.0.1:%d/health", pBase), fmt.Sprintf("http://127.0.0.1:%d/health", dBase),
		fmt.Sprintf("http://127.0.0.1:%d/healthz", pBase+4), fmt.Sprintf("http://127.0.0.1:%d/healthz", pBase+5)} {
		waitOK(ctx, t, u)
	}
	for _, p := range []int{pBase + 1, pBase + 2, dBase + 1, dBase + 2} {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 2*time.Second)
		if err != nil {
			t.Errorf("KV event port %d not bound: %v", p, err)
			continue
		}
		conn.Close()
	}

	// The prefill engine's answer to a prefill leg names its NIXL side channel.
	body := `{"model":"` + fleetModel + `","prompt":"The fleet chart renders what condisagg needs.","max_tokens":1,` +
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`
	var pr struct {
		KVTransferParams map[string]any `json:"kv_transfer_params"`
	}
	post(t, fmt.Sprintf("http://127.0.0.1:%d/v1/completions", pBase), nil, body, &pr)
	if pr.KVTransferParams["remote_host"] != "127.0.0.1" || pr.KVTransferParams["remote_port"] != float64(pBase+3) {
		t.Errorf("prefill kv_transfer_params %v; want remote_host 127.0.0.1 (VLLM_NIXL_SIDE_CHANNEL_HOST) and remote_port %d", pr.KVTransferParams, pBase+3)
	}

	// A remote prefill as Envoy sends it on condisagg's prefill route: to the prefill worker's
	// endpoint (the sidecar), naming itself as prefill host and a decode engine.
	hdr := map[string]string{"x-condisagg-prefill-host": fmt.Sprintf("127.0.0.1:%d", pBase+4),
		"x-condisagg-decode-host": fmt.Sprintf("127.0.0.1:%d", dBase)}
	var dr struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int             `json:"prompt_tokens"`
			PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	body = `{"model":"` + fleetModel + `","prompt":"A remote prefill through the rendered pd-sidecar, then decode.","max_tokens":4}`
	post(t, fmt.Sprintf("http://127.0.0.1:%d/v1/completions", pBase+4), hdr, body, &dr)
	if len(dr.Choices) != 1 || dr.Usage.PromptTokens == 0 || len(dr.Usage.PromptTokensDetails) == 0 || string(dr.Usage.PromptTokensDetails) == "null" {
		t.Errorf("remote prefill answer %+v; want one choice and usage with prompt_tokens_details (--enable-prompt-tokens-details)", dr)
	}
	// A decode host outside the allowlist is refused: the sidecar is not an open proxy.
	hdr["x-condisagg-decode-host"] = fmt.Sprintf("127.0.0.1:%d", pBase)
	if code := postCode(t, fmt.Sprintf("http://127.0.0.1:%d/v1/completions", pBase+4), hdr, body); code != http.StatusForbidden {
		t.Errorf("decode host 127.0.0.1:%d (not a decode pod) answered %d; want 403", pBase, code)
	}
}

func waitOK(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not ready: %v", url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func postCode(t *testing.T, url string, hdr map[string]string, body string) int {
	t.Helper()
	code, _ := postRaw(t, url, hdr, body)
	return code
}

func postRaw(t *testing.T, url string, hdr map[string]string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func post(t *testing.T, url string, hdr map[string]string, body string, out any) {
	t.Helper()
	code, b := postRaw(t, url, hdr, body)
	if code != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
}

// TestFleetVLLMParsesArgs parses the real-vLLM variants' engine command lines with vLLM 0.32's
// own `vllm serve` parser and config classes (scripts/fleet-vllm-args.py in the venv of
// scripts/vllm-venv.sh): every flag exists, the JSON configs hold only keys vLLM knows, and vLLM
// resolves them to the block size of the router chart's config, the pod's KV event, replay and
// HTTP ports, the data-parallel size, NixlConnector with the role's kv_role, and the prompt-token
// details. The venv is opt-in (several GB): without it the test skips, and `make
// fleet-vllm-args` (FLEET_VLLM_REQUIRED=1) builds the venv and fails instead.
func TestFleetVLLMParsesArgs(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	venv := os.Getenv("VLLM_VENV")
	if venv == "" {
		venv = filepath.Join(root, ".cache/vllm-venv")
	}
	python := filepath.Join(venv, "bin/python")
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("FLEET_VLLM_REQUIRED") != "" {
			t.Fatalf("no vLLM venv at %s (scripts/vllm-venv.sh): %v", venv, err)
		}
		t.Skipf("no vLLM venv at %s: make fleet-vllm-args builds it and runs this test", venv)
	}
	blockSize := routerBlockSize(t)
	type engine struct {
		name string
		pod  *corev1.PodSpec
		c    *corev1.Container
	}
	var engines []engine
	var lines [][]string
	for _, v := range fleetVariants() {
		if strings.Contains(v.name, "sim") {
			continue
		}
		for role, d := range fleetRoles(t, renderFleet(t, v)) {
			c := container(t, d, "engine")
			engines = append(engines, engine{v.name + "/" + role, &d.Spec.Template.Spec, c})
			lines = append(lines, append(append([]string(nil), c.Command...), c.Args...))
		}
	}
	in, err := json.Marshal(lines)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(python, filepath.Join(root, "scripts/fleet-vllm-args.py"))
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), &stderr
	cmd.Env = append(os.Environ(), "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vLLM's parser refused a rendered command line: %v\n%s", err, stderr.String())
	}
	type kvEvents struct {
		Enable         bool   `json:"enable_kv_cache_events"`
		Publisher      string `json:"publisher"`
		Endpoint       string `json:"endpoint"`
		ReplayEndpoint string `json:"replay_endpoint"`
		Topic          string `json:"topic"`
	}
	var got []struct {
		Model                     string    `json:"model"`
		ServedModelName           []string  `json:"served_model_name"`
		Port                      int32     `json:"port"`
		BlockSize                 int       `json:"block_size"`
		MaxModelLen               int       `json:"max_model_len"`
		MaxNumBatchedTokens       int       `json:"max_num_batched_tokens"`
		DataParallelSize          int       `json:"data_parallel_size"`
		EnablePromptTokensDetails bool      `json:"enable_prompt_tokens_details"`
		KVEvents                  *kvEvents `json:"kv_events_config"`
		KVTransfer                *struct {
			Connector         string `json:"kv_connector"`
			Role              string `json:"kv_role"`
			LoadFailurePolicy string `json:"kv_load_failure_policy"`
		} `json:"kv_transfer_config"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(engines) {
		t.Fatalf("fleet-vllm-args output (%v): %s", err, out)
	}
	for i, e := range engines {
		g := got[i]
		role := e.name[strings.LastIndex(e.name, "/")+1:]
		httpName := map[string]string{"prefill": "engine-http", "decode": "http"}[role]
		httpPort, _ := containerPort(e.pod, httpName)
		events, _ := containerPort(e.pod, "kv-events")
		replay, _ := containerPort(e.pod, "kv-replay")
		dp := atoi(t, "--data-parallel-size", flagValues(t, e.c.Args)["--data-parallel-size"])
		if g.Model != fleetModel || len(g.ServedModelName) != 1 || g.ServedModelName[0] != fleetModel || g.Port != httpPort ||
			g.BlockSize != blockSize || g.MaxModelLen != 8192 || g.MaxNumBatchedTokens != 8192 || g.DataParallelSize != dp ||
			!g.EnablePromptTokensDetails {
			t.Errorf("%s: vLLM resolved %+v; want model and served name %s, port %d, block size %d, max_model_len and max_num_batched_tokens 8192, data_parallel_size %d, prompt-token details",
				e.name, g, fleetModel, httpPort, blockSize, dp)
		}
		wantEvents := kvEvents{true, "zmq", fmt.Sprintf("tcp://*:%d", events), fmt.Sprintf("tcp://*:%d", replay), "kv-events"}
		if g.KVEvents == nil || *g.KVEvents != wantEvents {
			t.Errorf("%s: vLLM's KVEventsConfig %+v; want %+v", e.name, g.KVEvents, wantEvents)
		}
		wantRole := map[string]string{"prefill": "kv_producer", "decode": "kv_consumer"}[role]
		if g.KVTransfer == nil || g.KVTransfer.Connector != "NixlConnector" || g.KVTransfer.Role != wantRole {
			t.Errorf("%s: vLLM's KVTransferConfig %+v; want NixlConnector, %s", e.name, g.KVTransfer, wantRole)
		}
		if e.name == "vllm_data_parallel/decode" && (g.KVTransfer == nil || g.KVTransfer.LoadFailurePolicy != "recompute") {
			t.Errorf("%s: kv_load_failure_policy %+v; want recompute from decode.kvTransferConfig", e.name, g.KVTransfer)
		}
	}
}
