package image

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/e2e"
)

// The run test needs a container engine and the privileges to run containers (root, or user
// namespaces with subordinate ids): `make image-test` installs Debian's podman and runc and sets
// CONDISAGG_IMAGE_E2E=1. Without the variable TestImagesRun is skipped; with it, a missing
// podman fails the test.
const runEnv = "CONDISAGG_IMAGE_E2E"

// podman runs podman with its own storage under dir, so that the test neither sees nor
// changes the machine's images and containers. vfs and cgroupfs work inside containers and
// VMs without overlayfs mounts or systemd; runc is preferred where installed because crun
// 1.8 refuses hosts with cgroup v1 and v2 controllers mixed ("hybrid"). The ulimits are below
// the usual hard limits: podman's default for root raises RLIMIT_NOFILE and RLIMIT_NPROC, which
// fails without CAP_SYS_RESOURCE.
type podman struct {
	global  []string
	runArgs []string
}

func newPodman(t *testing.T, dir string) *podman {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("%s=1 but podman is not installed (make image-test installs it: scripts/install-podman.sh)", runEnv)
	}
	p := &podman{global: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file"}}
	if _, err := exec.LookPath("runc"); err == nil {
		p.global = append(p.global, "--runtime", "runc")
	}
	p.runArgs = []string{"--net", "host", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
		"--label", "condisagg-image-test=1"}
	if extra := os.Getenv("CONDISAGG_PODMAN_RUN_FLAGS"); extra != "" {
		p.runArgs = append(p.runArgs, strings.Fields(extra)...)
	}
	return p
}

func (p *podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "podman", append(slicesClone(p.global), args...)...)
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func (p *podman) out(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := p.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// wrapper writes an executable that runs image with the arguments it is given, in the
// foreground, so that the e2e stack starts the container where it would start the binary: its
// log lines arrive on the wrapper's stderr and SIGTERM reaches the process in the container
// (podman run proxies signals). mounts are bind-mounted read-only at the same paths.
func (p *podman) wrapper(t *testing.T, dir, image string, mounts ...string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nexec podman")
	for _, a := range p.global {
		fmt.Fprintf(&b, " '%s'", a)
	}
	b.WriteString(" run --rm")
	for _, a := range p.runArgs {
		fmt.Fprintf(&b, " '%s'", a)
	}
	for _, m := range mounts {
		fmt.Fprintf(&b, " -v '%s:%s:ro'", m, m)
	}
	fmt.Fprintf(&b, " '%s' \"$@\"\n", image)
	path := filepath.Join(dir, strings.NewReplacer(":", "-", "/", "-").Replace(image)+".sh")
	if err := os.WriteFile(path, []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImagesRun starts the images with podman: --version of each (the stamped version and
// revision), then the e2e stack with every condisagg, vllm-sim and pd-sidecar process a
// container: the real Envoy -> condisagg (ext_proc) -> vllm-sim workers, the prefill leg
// through pd-sidecar. A long fresh prompt must be disaggregated (prefill worker behind its
// sidecar, then decode), the same prompt again served by the decode worker that now holds it; /healthz of condisagg and
// pd-sidecar and vLLM's /health answer from the containers, whose processes run as 65532.
func TestImagesRun(t *testing.T) {
	if os.Getenv(runEnv) != "1" {
		t.Skipf("set %s=1 (make image-test): needs podman and the privileges to run containers", runEnv)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	o, res := buildOnce(t)
	dir := t.TempDir()
	p := newPodman(t, filepath.Join(sharedDir, "podman"))
	t.Cleanup(func() {
		// Containers a failed test left behind (a wrapper killed before its container stopped).
		_ = p.cmd(context.Background(), "rm", "-f", "-t", "2", "--all").Run()
	})
	refs := map[string]string{}
	for _, r := range res {
		out := p.out(t, ctx, "load", "-i", r.Archive)
		m := regexp.MustCompile(`Loaded image(?:\(s\))?: (\S+)`).FindStringSubmatch(out)
		if m == nil || !strings.HasSuffix(m[1], "/"+r.Ref) {
			t.Fatalf("podman load %s: %q; want an image named */%s", r.Archive, out, r.Ref)
		}
		refs[r.Spec.Name] = m[1]
		got := p.out(t, ctx, append(append([]string{"run", "--rm"}, p.runArgs...), m[1], "--version")...)
		want := fmt.Sprintf("%s %s (revision %s, ", r.Spec.Name, o.Version, o.Revision)
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s --version: %q; want it to start with %q", r.Ref, got, want)
		}
	}

	root := repoRoot(t)
	tok, err := filepath.EvalSymlinks(filepath.Join(root, "tokenizer", "testdata", "models", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	stackDir := filepath.Join(dir, "stack")
	if err := os.Mkdir(stackDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stack writes the router's config into stackDir; the router and the sidecars read it.
	bins := e2e.Binaries{
		Condisagg: p.wrapper(t, dir, refs["condisagg"], stackDir, tok),
		VLLMSim:   p.wrapper(t, dir, refs["vllm-sim"], tok),
		PDSidecar: p.wrapper(t, dir, refs["pd-sidecar"], stackDir),
	}
	s, err := e2e.Start(ctx, e2e.Config{Bin: bins, Dir: stackDir, Tokenizer: tok, ModelName: "qwen3", TimeScale: 20,
		Disagg: `{"policy":"isl_or_load","eff_isl_threshold":1024,"eff_isl_ratio_threshold":0.7,"prefill_busy_threshold":0.5,"decode_busy_threshold":0.8}`,
		Workers: []e2e.WorkerSpec{{Name: "prefill-0", Role: e2e.Prefill, MaxNumBatchedTokens: 2048},
			{Name: "decode-0", Role: e2e.Decode, NumGPUBlocks: 400}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Close()
		if t.Failed() {
			s.LogOutputs(t)
		}
	}()

	// Every process of the stack but Envoy is a container: 1 router, 2 simulators, 1 sidecar,
	// each running as the image's user.
	ps := p.out(t, ctx, "ps", "--filter", "label=condisagg-image-test=1", "--format", "{{.ID}} {{.Image}}")
	count := map[string]int{}
	for _, line := range strings.Split(ps, "\n") {
		id, img, _ := strings.Cut(line, " ")
		count[img]++
		pid := p.out(t, ctx, "inspect", "--format", "{{.State.Pid}}", id)
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^Uid:\s+65532\s`).Match(status) {
			t.Errorf("container %s (%s): process %s does not run as 65532:\n%s", id, img, pid, status)
		}
	}
	if count[refs["condisagg"]] != 1 || count[refs["vllm-sim"]] != 2 || count[refs["pd-sidecar"]] != 1 {
		t.Fatalf("containers running: %v\n%s", count, ps)
	}

	for _, url := range []string{"http://" + s.AdminAddr + "/healthz", "http://" + s.Workers[0].Endpoint + "/healthz",
		"http://" + s.Workers[1].SimAddr + "/health"} {
		if code, body, err := s.Get(ctx, url); err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d %s %v", url, code, body, err)
		}
	}

	chat := func(content string) *e2e.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "qwen3", "max_tokens": 8, "stream": true,
			"stream_options": map[string]any{"include_usage": true},
			"messages":       []map[string]string{{"role": "user", "content": content}}})
		r, err := s.Chat(ctx, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusOK || !r.Done || r.Text == "" {
			t.Fatalf("chat through Envoy: status %d done %v text %q decision %q\n%s", r.Status, r.Done, r.Text, r.Decision.Raw, r.Body)
		}
		return r
	}
	prompt := strings.Repeat("the containers route this long fresh prompt through the prefill worker ", 200)
	long := chat(prompt)
	if long.Decision.Route != "prefill" {
		t.Errorf("long fresh prompt: decision %q; want route=prefill", long.Decision.Raw)
	}
	// The same prompt again: the decode worker now holds its blocks (moved there by the first
	// request, announced by its KV events), so it prefills the rest itself.
	pollCtx, stopPoll := context.WithTimeout(ctx, time.Minute)
	defer stopPoll()
	if err := e2e.Poll(pollCtx, func() error {
		if r := chat(prompt); r.Decision.Route != "decode" {
			return fmt.Errorf("repeated prompt: decision %q; want route=decode", r.Decision.Raw)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// The prefill worker computed the long prompt: the sidecar container ran the prefill leg.
	if v, err := s.SimMetric(ctx, s.Worker("prefill-0"), "vllm:prompt_tokens_total"); err != nil || v < float64(long.Decision.ISL) {
		t.Errorf("prefill worker's prompt tokens %v (%v); want at least the long prompt's %d", v, err, long.Decision.ISL)
	}
}
