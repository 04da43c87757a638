package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

type reloadEvent struct {
	trigger string
	err     error
}

// serveReloading runs serve with the config at cfgPath in the background until ctx ends: its
// listening addresses, each reload, its exit code and its log.
func serveReloading(ctx context.Context, cfgPath string) (<-chan listenAddrs, <-chan reloadEvent, <-chan int, *syncBuffer) {
	addrs := make(chan listenAddrs, 1)
	reloads := make(chan reloadEvent, 8)
	exit := make(chan int, 1)
	logs := &syncBuffer{}
	go func() {
		exit <- runServe(ctx, []string{"--config", cfgPath}, logs, serveHooks{
			listening: func(a listenAddrs) { addrs <- a },
			reloaded:  func(trigger string, err error) { reloads <- reloadEvent{trigger, err} },
		})
	}()
	return addrs, reloads, exit, logs
}

// TestReloadOnSignalAndFileChange: SIGHUP and a changed file both re-read the configuration;
// a bad file is rejected (old configuration kept), a good one applied.
func TestReloadOnSignalAndFileChange(t *testing.T) {
	model := requireModel(t)
	// Keep SIGHUP from ending the test binary whatever the timing.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	good := strings.Replace(serveYAML, "MODEL", model, 1) + workersYAML
	cfgPath := writeFile(t, t.TempDir(), "condisagg.yaml", good)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, reloads, exit, logs := serveReloading(ctx, cfgPath)
	var grpcAddr, httpAddr string
	select {
	case a := <-addrs:
		grpcAddr, httpAddr = a.adminGRPC, a.http
	case code := <-exit:
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}
	wait := func(trigger string) reloadEvent {
		t.Helper()
		select {
		case ev := <-reloads:
			if ev.trigger != trigger {
				t.Fatalf("reload by %q, want %q", ev.trigger, trigger)
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s reload:\n%s", trigger, logs.String())
		}
		return reloadEvent{}
	}

	// serve listens for SIGHUP before it reports its addresses.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if ev := wait("sighup"); ev.err != nil {
		t.Fatalf("sighup reload: %v", ev.err)
	}

	bad := strings.Replace(good, "drain_timeout: 5s", "drain_timeout: -1s", 1)
	replaceFile(t, cfgPath, bad)
	if ev := wait("file_changed"); ev.err == nil || !strings.Contains(ev.err.Error(), "drain_timeout: -1s must be > 0") {
		t.Fatalf("bad file accepted: %+v", ev)
	}
	enabled := strings.Replace(good, "conditional_disagg: false", "conditional_disagg: true", 1)
	enabled = strings.Replace(enabled, "kv_events: false", "kv_events: true", 1)
	replaceFile(t, cfgPath, enabled+"# changed\n")
	if ev := wait("file_changed"); ev.err != nil {
		t.Fatalf("good file rejected: %v", ev.err)
	}
	var out, errOut bytes.Buffer
	body := `{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`
	if code := run(ctx, []string{"explain", "--addr", grpcAddr, "--body", body}, &out, &errOut); code != 0 ||
		strings.Contains(out.String(), "remote_disabled") {
		t.Fatalf("after reload the feature is still off (exit %d):\n%s%s", code, out.String(), errOut.String())
	}

	// max_body_bytes above what the gRPC message limit fixed at startup carries (the 10 MiB
	// default) is refused, naming the field and the fix; one below it applies at once (a 2 MiB
	// body then gets 413 from /debug/explain, which reads the live limit).
	explain2MiB := func() int {
		t.Helper()
		big := `{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
		resp, err := http.Post("http://"+httpAddr+"/debug/explain", "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := explain2MiB(); code != http.StatusOK {
		t.Fatalf("a 2 MiB explain under the 10 MiB limit: %d", code)
	}
	replaceFile(t, cfgPath, enabled+"max_body_bytes: 67108864\n")
	if ev := wait("file_changed"); ev.err == nil || !strings.Contains(ev.err.Error(),
		"max_body_bytes: 67108864 is above 10485760, the most the ext_proc gRPC message limit set at startup carries; restart to raise it") {
		t.Fatalf("max_body_bytes over the startup ceiling: %+v", ev)
	}
	replaceFile(t, cfgPath, enabled+"max_body_bytes: 1048576\n")
	if ev := wait("file_changed"); ev.err != nil {
		t.Fatalf("max_body_bytes below the ceiling rejected: %v", ev.err)
	}
	if code := explain2MiB(); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 MiB explain after max_body_bytes went to 1 MiB: %d, want 413", code)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// replaceFile swaps path's content in one step (write aside, rename), as editors and
// Kubernetes ConfigMap updates do: os.WriteFile truncates first, and a watcher tick between the
// truncation and the write reads a half-written file (rejected, then re-read on the next tick).
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
