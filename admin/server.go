package admin

import (
	"context"
	"crypto/subtle"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// ServerOptions configure the Admin gRPC server (ReloadConfig, Explain, ListWorkers): Explain
// reveals what each worker caches and ReloadConfig changes routing, so off loopback it must be
// authenticated by Token, by mutual TLS (TLS with ClientAuth), or both.
type ServerOptions struct {
	TLS   *tls.Config // nil: plaintext
	Token string      // "" : no bearer token required
}

// NewServer builds the Admin gRPC server, apart from the ext_proc server Envoy talks to. With a
// Token, every call must carry "authorization: Bearer <token>" or it fails with
// Unauthenticated.
func NewServer(svc *Service, opts ServerOptions) *grpc.Server {
	var gopts []grpc.ServerOption
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	if opts.Token != "" {
		check := tokenCheck(opts.Token)
		gopts = append(gopts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}), grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			// Streaming calls (IndexSnapshot) need the token as much as unary ones.
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	}
	g := grpc.NewServer(gopts...)
	condisaggv1.RegisterAdminServer(g, svc)
	return g
}

// tokenCheck returns the bearer-token test of the Admin server (constant time).
func tokenCheck(token string) func(context.Context) error {
	want := []byte("Bearer " + token)
	return func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if subtle.ConstantTimeCompare([]byte(v), want) == 1 {
				return nil
			}
		}
		return status.Error(codes.Unauthenticated, "admin: missing or wrong bearer token (authorization: Bearer <token>)")
	}
}

// TokenValid reports whether an HTTP Authorization header value carries token; RequireToken
// uses it.
func TokenValid(header, token string) bool {
	return subtle.ConstantTimeCompare([]byte(header), []byte("Bearer "+token)) == 1
}
