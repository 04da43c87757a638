package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/internal/adminclient"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// clientFlags are the flags shared by the Admin clients.
type clientFlags struct {
	fs        *flag.FlagSet
	addr      string
	output    string
	timeout   time.Duration
	tokenFile string
	useTLS    bool
	caFile    string
	certFile  string
	keyFile   string
}

func newClientFlags(name string, stderr io.Writer) *clientFlags {
	c := &clientFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.addr, "addr", "127.0.0.1:9003", "router Admin gRPC address (serve --admin-grpc-listen)")
	c.fs.StringVar(&c.output, "o", "table", "output: table or json")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "call timeout")
	c.fs.StringVar(&c.tokenFile, "token-file", "", "file holding the Admin bearer token (serve --admin-token-file)")
	c.fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS (implied by --ca-file or --cert-file)")
	c.fs.StringVar(&c.caFile, "ca-file", "", "CA bundle that signed the router's admin certificate (default: system roots)")
	c.fs.StringVar(&c.certFile, "cert-file", "", "client certificate for mTLS (with --key-file)")
	c.fs.StringVar(&c.keyFile, "key-file", "", "client key for mTLS")
	return c
}

func (c *clientFlags) dial(stderr io.Writer) (condisaggv1.AdminClient, func(), bool) {
	if c.output != "table" && c.output != "json" {
		fmt.Fprintf(stderr, "-o: %q must be table or json\n", c.output)
		return nil, nil, false
	}
	client, conn, err := adminclient.Dial(c.addr, adminclient.Options{TokenFile: c.tokenFile, TLS: c.useTLS,
		CAFile: c.caFile, CertFile: c.certFile, KeyFile: c.keyFile})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, false
	}
	return client, func() { conn.Close() }, true
}

// call dials the router, makes one Admin call within the timeout and prints its answer as a
// table (printTable) or JSON; it returns the exit code (2 usage, 1 call failed).
func call[R proto.Message](ctx context.Context, c *clientFlags, name string, stdout, stderr io.Writer,
	do func(context.Context, condisaggv1.AdminClient) (R, error), printTable func(io.Writer, R)) int {
	client, closeConn, ok := c.dial(stderr)
	if !ok {
		return 2
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := do(ctx, client)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if c.output == "json" {
		adminclient.PrintJSON(stdout, resp)
		return 0
	}
	printTable(stdout, resp)
	return 0
}

// runExplain is `condisagg explain`.
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("explain", stderr)
	path := c.fs.String("path", "/v1/chat/completions", "OpenAI path")
	bodyArg := c.fs.String("body", "", "request body: JSON text, @file, or @- for stdin")
	session := c.fs.String("session", "", "session id, as a session header would carry it: show what its binding does (nothing is bound)")
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	body, err := readBodyArg(*bodyArg)
	if err != nil {
		fmt.Fprintf(stderr, "explain: --body: %v\n", err)
		return 2
	}
	return call(ctx, c, "explain", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ExplainResponse, error) {
		return a.Explain(ctx, &condisaggv1.ExplainRequest{Path: *path, Body: body, Session: *session})
	}, adminclient.PrintExplain)
}

func readBodyArg(arg string) ([]byte, error) {
	switch {
	case arg == "":
		return nil, fmt.Errorf("required")
	case arg == "@-":
		return io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	case strings.HasPrefix(arg, "@"):
		return os.ReadFile(arg[1:])
	}
	return []byte(arg), nil
}

// runWorkers is `condisagg workers`.
func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("workers", stderr)
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	return call(ctx, c, "workers", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ListWorkersResponse, error) {
		return a.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
	}, adminclient.PrintWorkers)
}

// runRecent is `condisagg recent`: the last routed decisions with their disaggregation truth.
func runRecent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("recent", stderr)
	n := c.fs.Uint("n", admin.DefaultRecentLimit, "decisions to show, newest first (at most "+strconv.Itoa(admin.MaxRecentLimit)+")")
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	return call(ctx, c, "recent", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.RecentResponse, error) {
		return a.Recent(ctx, &condisaggv1.RecentRequest{Limit: uint32(min(*n, 1<<32-1))})
	}, adminclient.PrintRecent)
}

// runShadow is `condisagg shadow`: the candidate config's agreement with the live one, or with
// --promote, the candidate made live (Admin ReloadConfig{promote_shadow}).
func runShadow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("shadow", stderr)
	promote := c.fs.Bool("promote", false, "make the candidate config live (until the next reload from the file)")
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	if *promote {
		return call(ctx, c, "shadow --promote", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ReloadConfigResponse, error) {
			resp, err := a.ReloadConfig(ctx, &condisaggv1.ReloadConfigRequest{PromoteShadow: true})
			if err == nil && !resp.GetApplied() {
				err = errors.New(resp.GetMessage())
			}
			return resp, err
		}, func(w io.Writer, r *condisaggv1.ReloadConfigResponse) { fmt.Fprintln(w, r.GetMessage()) })
	}
	return call(ctx, c, "shadow", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ShadowResponse, error) {
		return a.Shadow(ctx, &condisaggv1.ShadowRequest{})
	}, adminclient.PrintShadow)
}

// runResetPrefixCache is `condisagg reset-prefix-cache WORKER`: the router asks the worker's
// engine to reset its prefix cache and clears the worker's index at once (Admin
// ResetPrefixCache). Exit 1 when the engine refused (it does while requests are running).
func runResetPrefixCache(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("reset-prefix-cache", stderr)
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	if c.fs.NArg() != 1 {
		fmt.Fprintln(stderr, "reset-prefix-cache: name one worker (condisagg workers lists them), flags before it")
		return 2
	}
	return call(ctx, c, "reset-prefix-cache", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ResetPrefixCacheResponse, error) {
		resp, err := a.ResetPrefixCache(ctx, &condisaggv1.ResetPrefixCacheRequest{Worker: c.fs.Arg(0)})
		if err == nil && !resp.GetSuccess() {
			err = errors.New(resp.GetMessage())
		}
		return resp, err
	}, func(w io.Writer, r *condisaggv1.ResetPrefixCacheResponse) {
		fmt.Fprintln(w, r.GetMessage())
		if len(r.GetCleared()) > 0 {
			fmt.Fprintf(w, "cleared: %s\n", strings.Join(r.GetCleared(), ", "))
		}
	})
}
