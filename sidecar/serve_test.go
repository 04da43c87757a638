package sidecar

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServe_GracefulShutdown: cancelling Serve's context lets an open stream finish, refuses
// new connections, and Serve returns nil once the stream has ended.
func TestServe_GracefulShutdown(t *testing.T) {
	gate := make(chan struct{})
	p := newWorker(t, prefillOK(pKV, 0))
	d := newWorker(t, decodeSSE(gate))
	al, _ := NewAllowlist([]string{p.addr, d.addr})
	px, err := New(testConfig(), al, Options{Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, px, 10*time.Second) }()

	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(chatBody))
	for k, v := range routeHeaders(p, d) {
		req.Header.Set(k, v)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel() // shutdown starts while the stream is open
	for range len(sseEvents) - 2 {
		gate <- struct{}{}
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream after shutdown began: %q, %v", rest, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the stream ended")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("listener still accepts after shutdown")
	}
}

// TestRunResolver re-resolves DNS names into the allowlist and stops with its context.
func TestRunResolver(t *testing.T) {
	al, _ := NewAllowlist([]string{"decode.svc:8000"})
	m := NewMetrics(prometheus.NewRegistry())
	px, err := New(testConfig(), al, Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	res := &notifyResolver{fakeResolver: fakeResolver{"decode.svc": {"10.0.0.21"}}, called: make(chan struct{}, 1)}
	go func() { px.RunResolver(ctx, res, time.Hour); close(done) }()
	<-res.called
	cancel()
	<-done
	if _, ok := al.Allowed("10.0.0.21:8000"); !ok {
		t.Fatal("resolved address not allowed")
	}
	if got := counter(m.AllowlistHosts); got != 2 {
		t.Errorf("allowlist_hosts = %v, want 2", got)
	}
}

type notifyResolver struct {
	fakeResolver
	called chan struct{}
}

func (n *notifyResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	a, err := n.fakeResolver.LookupHost(ctx, host)
	select {
	case n.called <- struct{}{}:
	default:
	}
	return a, err
}
