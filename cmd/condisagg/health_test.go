package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthFollowsDecodePool (issue 12 item 3): the gRPC health Envoy checks stays SERVING
// while at least one decode worker is healthy (one unhealthy worker does not flip the service;
// /readyz names it), turns NOT_SERVING when none is, and SERVING again when one returns. The
// workers are HTTP servers whose /health the pool probes with its default settings.
func TestHealthFollowsDecodePool(t *testing.T) {
	model := requireModel(t)
	var up [2]atomic.Bool
	var addrs [2]string
	for i := range up {
		up[i].Store(true)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" && !up[i].Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		t.Cleanup(srv.Close)
		addrs[i] = strings.TrimPrefix(srv.URL, "http://")
	}
	cfg := strings.Replace(strings.Replace(serveYAML, "MODEL", model, 1), "pool: {health_interval: -1s} # the workers below are addresses nobody serves\n", "", 1) +
		"workers:\n" +
		"  - {name: decode-0, role: decode, endpoint: " + addrs[0] + ", num_gpu_blocks: 100}\n" +
		"  - {name: decode-1, role: decode, endpoint: " + addrs[1] + ", num_gpu_blocks: 100}\n"
	a := startServe(t, cfg)
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	state := func() (ext, all healthpb.HealthCheckResponse_ServingStatus, readyz string) {
		for i, name := range []string{"envoy.service.ext_proc.v3.ExternalProcessor", ""} {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil {
				t.Fatalf("health %q: %v", name, err)
			}
			if i == 0 {
				ext = r.Status
			} else {
				all = r.Status
			}
		}
		resp, err := http.Get("http://" + a.http + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return ext, all, resp.Status + "\n" + string(b)
	}
	// waitFor polls until the health status and /readyz say what the step expects (the pool
	// excludes a worker after two failed probes 500 ms apart; readiness follows within 250 ms).
	waitFor := func(what string, want healthpb.HealthCheckResponse_ServingStatus, readyz string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			ext, all, text := state()
			if ext == want && all == want && strings.Contains(text, readyz) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: health %v/%v, /readyz:\n%s\nwant %v and /readyz containing %q", what, ext, all, text, want, readyz)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	waitFor("both healthy", serving, "200 OK\nok\ndecode-0 decode healthy\ndecode-1 decode healthy")
	up[0].Store(false)
	waitFor("decode-0 unhealthy", serving, "decode-0 decode unhealthy (")
	if _, _, text := state(); !strings.HasPrefix(text, "200 OK\nok\n") {
		t.Fatalf("one unhealthy decode worker made the router unready:\n%s", text)
	}
	up[1].Store(false)
	waitFor("no healthy decode worker", notServing, "no healthy decode worker")
	if _, _, text := state(); !strings.HasPrefix(text, "503 Service Unavailable\nnot ready\n") {
		t.Fatalf("/readyz without a healthy decode worker:\n%s", text)
	}
	up[0].Store(true)
	waitFor("decode-0 back", serving, "decode-0 decode healthy")
}
