package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
	c.fs.StringVar(&c.addr, "addr", "127.0.0.1:9091", "router Admin gRPC address (serve --admin-grpc-listen)")
	c.fs.StringVar(&c.output, "o", "table", "output: table or json")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "call timeout")
	c.fs.StringVar(&c.tokenFile, "token-file", "", "file holding the Admin bearer token (serve --admin-token-file)")
	c.fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS (implied by --ca-file or --cert-file)")
	c.fs.StringVar(&c.caFile, "ca-file", "", "CA bundle that signed the router's admin certificate (default: system roots)")
	c.fs.StringVar(&c.certFile, "cert-file", "", "client certificate for mTLS (with --key-file)")
	c.fs.StringVar(&c.keyFile, "key-file", "", "client key for mTLS")
	return c
}

// bearer is the Admin token as per-RPC credentials. It allows plaintext on purpose: a token
// over loopback is the default deployment; off loopback serve also demands TLS or mTLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// credentials builds the dial options from the TLS and token flags.
func (c *clientFlags) credentials() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if c.useTLS || c.caFile != "" || c.certFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.caFile != "" {
			pem, err := os.ReadFile(c.caFile)
			roots := x509.NewCertPool()
			if err != nil || !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca-file %s: not a readable PEM bundle", c.caFile)
			}
			cfg.RootCAs = roots
		}
		if (c.certFile == "") != (c.keyFile == "") {
			return nil, fmt.Errorf("--cert-file and --key-file go together")
		}
		if c.certFile != "" {
			cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
			if err != nil {
				return nil, fmt.Errorf("--cert-file %s: %w", c.certFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(b)))))
	}
	return opts, nil
}

func (c *clientFlags) dial(stderr io.Writer) (condisaggv1.AdminClient, func(), bool) {
	if c.output != "table" && c.output != "json" {
		fmt.Fprintf(stderr, "-o: %q must be table or json\n", c.output)
		return nil, nil, false
	}
	opts, err := c.credentials()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, false
	}
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "dial %s: %v\n", c.addr, err)
		return nil, nil, false
	}
	return condisaggv1.NewAdminClient(conn), func() { conn.Close() }, true
}

func printJSON(w io.Writer, m proto.Message) {
	b, _ := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	fmt.Fprintln(w, string(b))
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
		printJSON(stdout, resp)
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
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	body, err := readBodyArg(*bodyArg)
	if err != nil {
		fmt.Fprintf(stderr, "explain: --body: %v\n", err)
		return 2
	}
	return call(ctx, c, "explain", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ExplainResponse, error) {
		return a.Explain(ctx, &condisaggv1.ExplainRequest{Path: *path, Body: body})
	}, printExplain)
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

func printExplain(w io.Writer, r *condisaggv1.ExplainResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	in := r.GetInputs()
	rows := [][2]string{
		{"route", r.Route}, {"reason", r.Reason}, {"gate", r.Gate}, {"policy", r.Policy},
		{"destination", r.Destination},
		{"decode", r.DecodeWorker + " " + r.DecodeEndpoint}, {"prefill", r.PrefillWorker + " " + r.PrefillEndpoint},
		{"tokens (ISL)", itoa(r.Tokens)}, {"block keys", itoa(r.BlockKeys)},
		{"previewed decode", in.GetPreviewDecode()},
		{"overlap blocks (gpu/cpu/disk)", itoa(in.GetOverlapBlocks()) + "/" + itoa(in.GetHostBlocks()) + "/" + itoa(in.GetDiskBlocks())},
		{"cached tokens", itoa(in.GetCachedTokens())},
		{"effective ISL / threshold", itoa(in.GetEffectiveIsl()) + " / " + itoa(in.GetEffIslThreshold())},
		{"ratio / threshold", ftoa(in.GetRatio()) + " / " + ftoa(in.GetRatioThreshold())},
		{"prefill busy", in.GetPrefillBusy()},
		{"prefill active / budget", itoa(in.GetPrefillActiveTokens()) + " / " + ftoa(in.GetPrefillBudget())},
		{"projected decode blocks / kvcap", itoa(in.GetProjectedDecodeBlocks()) + " / " + itoa(in.GetKvCapacityBlocks())},
		{"decode guard", strconv.FormatBool(in.GetGuardEnabled()) + " θd=" + ftoa(in.GetDecodeBusyThreshold())},
		{"silent", strconv.FormatBool(in.GetSilent())},
		{"error", in.GetError()},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	tw.Flush()
	if len(r.Overlaps) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tGPU\tCPU\tDISK")
		for _, o := range r.Overlaps {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", o.Worker, o.GpuBlocks, o.CpuBlocks, o.DiskBlocks)
		}
		tw.Flush()
	}
}

// runWorkers is `condisagg workers`.
func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newClientFlags("workers", stderr)
	if err := c.fs.Parse(args); err != nil {
		return 2
	}
	return call(ctx, c, "workers", stdout, stderr, func(ctx context.Context, a condisaggv1.AdminClient) (*condisaggv1.ListWorkersResponse, error) {
		return a.ListWorkers(ctx, &condisaggv1.ListWorkersRequest{})
	}, printWorkers)
}

func printWorkers(w io.Writer, r *condisaggv1.ListWorkersResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tENDPOINT\tHEALTHY\tKVCAP\tMNBT\tREQS\tPREFILL_TOK\tDECODE_BLK\tINDEXED(G/C/D)\tEVENTS\tLAST_SEQ\tGAPS\tREPLAYS\tLAST_EVENT_AGE")
	for _, x := range r.Workers {
		events, seq, gaps, replays, age := "-", "-", "-", "-", "-"
		if e := x.Events; e != nil {
			events = "down"
			if e.Connected {
				events = "up"
			}
			if e.HasLastSeq {
				seq = strconv.FormatUint(e.LastSeq, 10)
			}
			gaps, replays = strconv.FormatUint(e.Gaps, 10), strconv.FormatUint(e.Replays, 10)
			if e.LastEventAgeSeconds >= 0 {
				age = strconv.FormatFloat(e.LastEventAgeSeconds, 'f', 1, 64) + "s"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%d\t%d\t%d\t%d\t%d/%d/%d\t%s\t%s\t%s\t%s\t%s\n",
			x.Id, x.Role, x.Endpoint, x.Healthy, x.KvCapacityBlocks, x.MaxBatchedTokens, x.ActiveRequests,
			x.ActivePrefillTokens, x.ActiveDecodeBlocks, x.IndexedGpuBlocks, x.IndexedCpuBlocks, x.IndexedDiskBlocks,
			events, seq, gaps, replays, age)
	}
	tw.Flush()
}

func itoa(v int64) string   { return strconv.FormatInt(v, 10) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
