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

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// Health service names (envoy-extproc.md §2 "Health").
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// GRPCOptions configure the gRPC server that carries ext_proc, Admin and health.
type GRPCOptions struct {
	MaxBodyBytes int         // request bodies up to this size must fit a message (+1 MiB)
	TLS          *tls.Config // nil: plaintext
}

// NewGRPCServer builds the server: ext_proc, Admin and the health service, with message
// limits above the body limit and keepalive settings that accept Envoy's HTTP/2 pings.
// The health server starts with liveness SERVING and readiness NOT_SERVING.
func NewGRPCServer(srv *Server, admin *Admin, opts GRPCOptions) (*grpc.Server, *health.Server) {
	limit := max(opts.MaxBodyBytes, DefaultMaxBodyBytes) + 1<<20
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxSendMsgSize(limit),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	g := grpc.NewServer(gopts...)
	extprocv3.RegisterExternalProcessorServer(g, srv)
	if admin != nil {
		condisaggv1.RegisterAdminServer(g, admin)
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	SetReady(hs, false)
	return g, hs
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
