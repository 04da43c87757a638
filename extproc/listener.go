package extproc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Health service names (envoy-extproc.md §2 "Health").
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// GRPCOptions configure the gRPC server that carries ext_proc and health: the port Envoy
// talks to. The Admin service has its own server (package admin).
type GRPCOptions struct {
	MaxBodyBytes int         // request bodies up to this size must fit a message (+1 MiB)
	TLS          *tls.Config // nil: plaintext
	// MaxConcurrentStreams bounds the ext_proc streams (in-flight HTTP requests) per Envoy
	// connection; each may hold up to MaxBodyBytes. Default DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
}

// DefaultMaxConcurrentStreams is the default stream bound per connection.
const DefaultMaxConcurrentStreams = 1024

// HTTP/2 flow-control windows of the ext_proc server (README "Resource bounds"). gRPC-Go's
// default starts both at 64 KiB and grows them by measuring the bandwidth-delay product, which
// on a loopback or same-node link stays small: hundreds of streams then share a 64 KiB
// connection window, and each BUFFERED body waits in Envoy's HTTP/2 codec for window updates
// while its message_timeout runs (the cause of the timeouts at 500 concurrent streams).
// The connection window only paces the sender (gRPC-Go returns it on receipt, before the
// handler reads), so it is large; the stream window bounds what one stream can have in flight
// beyond the message being read.
const (
	ConnWindowBytes   = 64 << 20
	StreamWindowBytes = 1 << 20
)

// NewGRPCServer builds the ext_proc server: ext_proc and the health service, with message
// limits above the body limit and keepalive settings that accept Envoy's HTTP/2 pings.
// The health server starts with liveness SERVING and readiness NOT_SERVING.
func NewGRPCServer(srv *Server, opts GRPCOptions) (*grpc.Server, *health.Server) {
	g := grpc.NewServer(serverOptions(opts)...)
	extprocv3.RegisterExternalProcessorServer(g, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	SetReady(hs, false)
	return g, hs
}

// serverOptions are the ext_proc server's gRPC options (the tests' in-memory server uses them
// too, so that what they measure is what serves).
func serverOptions(opts GRPCOptions) []grpc.ServerOption {
	limit := BodyCeiling(opts.MaxBodyBytes) + 1<<20
	streams := opts.MaxConcurrentStreams
	if streams == 0 {
		streams = DefaultMaxConcurrentStreams
	}
	gopts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		grpc.StaticConnWindowSize(ConnWindowBytes),
		grpc.StaticStreamWindowSize(StreamWindowBytes),
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxSendMsgSize(limit),
		grpc.ForceServerCodecV2(messageCodec{}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	return gopts
}

// BodyCeiling is the largest max_body_bytes a server built with GRPCOptions.MaxBodyBytes =
// maxBody can take on reload: its gRPC message limit (the ceiling plus 1 MiB of framing) is
// fixed when it starts. maxBody is clamped to [DefaultMaxBodyBytes, MaxMaxBodyBytes].
func BodyCeiling(maxBody int) int {
	return min(max(maxBody, DefaultMaxBodyBytes), MaxMaxBodyBytes)
}

// SetReady sets readiness, the ext_proc service name and "" together.
func SetReady(hs *health.Server, ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{HealthReadiness, HealthExtProc, ""} {
		hs.SetServingStatus(name, st)
	}
}

// Serve runs g on lis until ctx ends, then drains: readiness NOT_SERVING, wait
// unreadyDelay (Envoy's health checks notice), GracefulStop bounded by drainTimeout, then
// Stop. It returns after the server has stopped.
func Serve(ctx context.Context, g *grpc.Server, hs *health.Server, lis net.Listener, unreadyDelay, drainTimeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if hs != nil {
		SetReady(hs, false)
	}
	if unreadyDelay > 0 {
		t := time.NewTimer(unreadyDelay)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			return err
		}
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
