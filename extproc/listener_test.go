package extproc

import (
	"context"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// startServer runs NewGRPCServer + Serve on 127.0.0.1:0 and returns a client connection and
// a stop function that cancels Serve and waits for it.
func startServer(t *testing.T, e *env, drain time.Duration) (*grpc.ClientConn, func() error) {
	t.Helper()
	return startServerWith(t, e, drain, GRPCOptions{MaxBodyBytes: DefaultMaxBodyBytes})
}

// startServerWith is startServer with the ext_proc server's options.
func startServerWith(t *testing.T, e *env, drain time.Duration, opts GRPCOptions) (*grpc.ClientConn, func() error) {
	t.Helper()
	g, hs := NewGRPCServer(e.server, opts)
	SetReady(hs, true)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, g, hs, lis, 0, drain) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { conn.Close(); _ = stop() })
	return conn, stop
}

// TestMaxConcurrentStreamsPerConnection: the ext_proc server admits at most
// MaxConcurrentStreams streams per connection (each may buffer a whole body); one more waits
// for a slot, here until its deadline, and gets one as soon as a stream ends.
func TestMaxConcurrentStreamsPerConnection(t *testing.T) {
	e := newEnv(t, envOptions{})
	conn, _ := startServerWith(t, e, time.Minute, GRPCOptions{MaxBodyBytes: DefaultMaxBodyBytes, MaxConcurrentStreams: 2})
	client := extprocv3.NewExternalProcessorClient(conn)
	open := func(ctx context.Context, name string) (*envoy, error) {
		stream, err := client.Process(ctx)
		if err != nil {
			return nil, err
		}
		v := &envoy{t: t, stream: stream, reqMode: buffered, respMode: streamed, first: true}
		if h := decideBuffered(t, v, chatBody(name, true)); h[HeaderRoute] == "" {
			t.Fatalf("%s: no decision", name)
		}
		return v, nil
	}
	first, err := open(context.Background(), "first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(context.Background(), "second"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stream, err := client.Process(ctx)
	if err == nil {
		// gRPC may hand out the stream and block its first message instead.
		err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":method", "GET", ":path", "/health"), EndOfStream: true}}})
		if err == nil {
			_, err = stream.Recv()
		}
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third stream on a 2-stream connection: %v, want it to wait for a slot until its deadline", err)
	}
	first.closeAndDrain()
	if _, err := open(context.Background(), "after"); err != nil {
		t.Fatalf("a stream after one ended: %v", err)
	}
}

// TestHealthNames: envoy-extproc.md §2 — liveness, readiness, the ext_proc service and "".
func TestHealthNames(t *testing.T) {
	e := newEnv(t, envOptions{})
	conn, _ := startServer(t, e, time.Second)
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{HealthLiveness, HealthReadiness, HealthExtProc, ""} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", name, r, err)
		}
	}
}

// TestGracefulStopDrainsStreams: on shutdown readiness drops, the open stream can finish,
// and Serve returns once it has; a stuck stream is cut at the drain deadline.
func TestGracefulStopDrainsStreams(t *testing.T) {
	e := newEnv(t, envOptions{})
	conn, stop := startServer(t, e, time.Minute)
	client := extprocv3.NewExternalProcessorClient(conn)
	stream, err := client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v := &envoy{t: t, stream: stream, reqMode: buffered, respMode: streamed, first: true}
	h := decideBuffered(t, v, chatBody("draining", true))
	if h[HeaderRoute] == "" {
		t.Fatal("no decision")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The open stream still works during the drain.
	v.responseHeaders(false, ":status", "200", "content-type", "text/event-stream")
	v.recv()
	v.responseBody([]byte(sseToken+"data: [DONE]\n\n"), true)
	v.recv()
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned (%v) while a stream was open", err)
	default:
	}
	v.closeAndDrain()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	e2 := newEnv(t, envOptions{})
	conn2, stop2 := startServer(t, e2, 50*time.Millisecond)
	s2, err := extprocv3.NewExternalProcessorClient(conn2).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v2 := &envoy{t: t, stream: s2, reqMode: buffered, respMode: streamed, first: true}
	decideBuffered(t, v2, chatBody("stuck", true))
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); err == nil {
		t.Fatal("stuck stream survived Stop")
	}
}

// TestAdminNotOnExtProcPort: the port Envoy talks to serves ext_proc and health only; the
// Admin service (cache contents, config reload) is not reachable there.
func TestAdminNotOnExtProcPort(t *testing.T) {
	e := newEnv(t, envOptions{})
	conn, _ := startServer(t, e, time.Second)
	_, err := condisaggv1.NewAdminClient(conn).ListWorkers(context.Background(), &condisaggv1.ListWorkersRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Admin on the ext_proc port: %v, want Unimplemented", err)
	}
}

// TestReloadKeepsOldSettings: a settings swap validates first; a bad one leaves the old.
func TestReloadKeepsOldSettings(t *testing.T) {
	e := newEnv(t, envOptions{})
	old := e.server.Settings()
	bad := *old
	bad.FailureMode = "sometimes"
	if err := e.server.Reload(&bad); err == nil || !strings.Contains(err.Error(), `failure_mode: "sometimes" must be one of open, closed`) {
		t.Fatalf("reload error %v", err)
	}
	if e.server.Settings() != old {
		t.Fatal("rejected settings were applied")
	}
	good := *old
	good.DebugHeaders = false
	if err := e.server.Reload(&good); err != nil || e.server.Settings() != &good {
		t.Fatalf("good reload: %v", err)
	}
}
