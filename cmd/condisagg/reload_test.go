package main

import (
	"bytes"
	"context"
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
	var grpcAddr string
	select {
	case a := <-addrs:
		grpcAddr = a.adminGRPC
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
