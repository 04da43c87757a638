package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRun starts the binary's run loop on ephemeral ports, proxies one request, reads the
// metrics endpoint, and stops it through its context (what SIGTERM does).
func TestRun(t *testing.T) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer d.Close()
	dAddr := d.Listener.Addr().String()
	cfg := filepath.Join(t.TempDir(), "condisagg.yaml")
	if err := os.WriteFile(cfg, []byte("workers:\n  - {name: decode-0, role: decode, endpoint: "+dAddr+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	logR, logW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--config", cfg}, logW)
		logW.Close()
	}()
	proxyAddr, adminAddr := listenAddrs(t, logR)
	go func() { _, _ = io.Copy(io.Discard, logR) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "http://"+proxyAddr+"/v1/completions", strings.NewReader(`{"prompt":"a"}`))
	req.Header.Set("X-Condisagg-Decode-Host", dAddr)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"prompt":"a"}` {
		t.Fatalf("proxied: %d %s", resp.StatusCode, body)
	}
	resp, err = client.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `condisagg_sidecar_requests_total{code="200",mode="passthrough"} 1`) {
		t.Fatalf("metrics lack the request:\n%s", metrics)
	}
	client.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

// listenAddrs reads the JSON log until both listening lines have appeared.
func listenAddrs(t *testing.T, r io.Reader) (proxy, admin string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for (proxy == "" || admin == "") && sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			Endpoint string `json:"endpoint"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "pd-sidecar listening":
			proxy = line.Endpoint
		case "pd-sidecar admin listening":
			admin = line.Endpoint
		}
	}
	if proxy == "" || admin == "" {
		t.Fatalf("no listening lines in the log (%v)", sc.Err())
	}
	return proxy, admin
}

func TestRun_ConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no_allowlist", []string{"--listen", "127.0.0.1:0"}, "no allowlist"},
		{"bad_allow_entry", []string{"--allow", "10.0.0.1"}, `allow[0]: "10.0.0.1"`},
		{"missing_config", []string{"--config", "/nonexistent/x.yaml"}, "read --config"},
		{"bad_timeout", []string{"--allow", "10.0.0.1:80", "--prefill-timeout", "-1s"}, "prefill_timeout"},
		{"bad_log_level", []string{"--allow", "10.0.0.1:80", "--log-level", "loud"}, "--log-level"},
		{"bad_dial", []string{"--allow", "10.0.0.1:80", "--dial", "10.0.0.1:80"}, "want ADDR=TARGET"},
		{"dial_not_allowed", []string{"--allow", "10.0.0.1:80", "--dial", "10.0.0.2:80=127.0.0.1:81"}, "not in the allowlist"},
		{"extra_args", []string{"--allow", "10.0.0.1:80", "extra"}, "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
