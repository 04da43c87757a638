package adminclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"sort"
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

// Options say how to reach a router's Admin service.
type Options struct {
	TokenFile string // file holding the bearer token ("" : none)
	TLS       bool   // TLS even without CAFile or CertFile
	CAFile    string // CA bundle of the router's admin certificate ("" : system roots)
	CertFile  string // client certificate for mTLS (with KeyFile)
	KeyFile   string
}

// Dial returns a client of the Admin service at addr and its connection (close it).
func Dial(addr string, o Options) (condisaggv1.AdminClient, *grpc.ClientConn, error) {
	opts, err := o.dialOptions()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return condisaggv1.NewAdminClient(conn), conn, nil
}

// bearer is the Admin token as per-RPC credentials. It allows plaintext on purpose: serve
// accepts a token alone, and a token over plaintext is only as safe as the network between
// operator and router (use --tls with serve's admin_tls_cert off a trusted network).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// dialOptions builds the gRPC dial options from the TLS and token settings.
func (c Options) dialOptions() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if c.TLS || c.CAFile != "" || c.CertFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			roots := x509.NewCertPool()
			if err != nil || !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca-file %s: not a readable PEM bundle", c.CAFile)
			}
			cfg.RootCAs = roots
		}
		if (c.CertFile == "") != (c.KeyFile == "") {
			return nil, fmt.Errorf("--cert-file and --key-file go together")
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("--cert-file %s: %w", c.CertFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(b)))))
	}
	return opts, nil
}

// PrintJSON writes m as indented JSON with every field.
func PrintJSON(w io.Writer, m proto.Message) {
	b, _ := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	fmt.Fprintln(w, string(b))
}

// PrintExplain writes an Explain answer as a table.
func PrintExplain(w io.Writer, r *condisaggv1.ExplainResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	in := r.GetInputs()
	rows := [][2]string{
		{"route", r.Route}, {"reason", r.Reason}, {"gate", r.Gate}, {"policy", r.Policy},
		{"model", modelText(r)},
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
	if s := r.GetSession(); s != nil {
		rows = append(rows, [2]string{"session", sessionText(s)})
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
	if est := in.GetEstimates(); len(est) > 0 {
		fmt.Fprintf(w, "\nslo forecast (objective ttft %s ms, tpot %s ms):\n", ftoa(in.GetSloTtftMs()), ftoa(in.GetSloTpotMs()))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PLACEMENT\tPREFILL\tDECODE\tTTFT ms\tTPOT ms\tOTHERS' TPOT ms\tHEADROOM\tCACHED\tTRANSFER\tFEEDBACK ttft/tpot")
		for _, e := range est {
			if !e.Valid {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tno room\t-\t-\t-\n", e.Placement)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.3f\t%d\t%d\t%.2f/%.2f\n", e.Placement, orDash(e.PrefillWorker), orDash(e.DecodeWorker),
				e.TtftMs, e.TpotMs, e.ExistingTpotMs, e.Headroom, e.CachedTokens, e.TransferTokens, e.TtftFactor, e.TpotFactor)
		}
		tw.Flush()
	}
	if f := in.GetFleet(); f != nil {
		fmt.Fprintf(w, "\nfleet steady state (last %.1f s, per second):\n", f.GetWindowMs()/1000)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POOL\tPLACEMENTS\tPROMPT TOKENS\tOUTPUT TOKENS\tQUEUE GROWTH\tPREFILL UTIL")
		for _, p := range []struct {
			name string
			r    *condisaggv1.PoolRates
		}{{"decode", f.GetDecodePool()}, {"prefill", f.GetPrefillPool()}} {
			fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.0f\t%+.0f\t%.3f\n", p.name, p.r.GetRequests(), p.r.GetPrefillTokens(),
				p.r.GetOutputTokens(), p.r.GetQueueGrowth(), p.r.GetPrefillUtil())
		}
		tw.Flush()
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REGIME\tWORKERS\tPREFILL UTIL\tWAIT ms\tTTFT ms\tTPOT ms\tHEADROOM")
		for _, r := range []struct {
			name string
			g    *condisaggv1.FleetRegime
		}{{"aggregated", f.GetAggregated()}, {"split", f.GetSplit()}} {
			if !r.g.GetValid() {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\n", r.name)
				continue
			}
			sat := ""
			if r.g.GetSaturated() {
				sat = " (saturated)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%.3f%s\t%.1f\t%.1f\t%.1f\t%.3f\n", r.name, r.g.GetWorkers(), r.g.GetPrefillUtil(), sat,
				r.g.GetWaitMs(), r.g.GetTtftMs(), r.g.GetTpotMs(), r.g.GetHeadroom())
		}
		tw.Flush()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// modelText is the Explain answer's model: the served model, the adapter, and whether the
// request's model was unknown ("-" for the one unnamed model).
func modelText(r *condisaggv1.ExplainResponse) string {
	s := r.Model
	if s == "" {
		s = "-"
	}
	if r.LoraAdapter != "" {
		s += " (adapter " + r.LoraAdapter + ")"
	}
	if r.UnknownModel {
		s += " (request's model unknown: passthrough)"
	}
	return s
}

// PrintWorkers writes a ListWorkers answer as a table; a MODEL column when the router serves
// named models.
func PrintWorkers(w io.Writer, r *condisaggv1.ListWorkersResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	models := false
	for _, x := range r.Workers {
		models = models || x.Model != ""
	}
	if models {
		fmt.Fprint(tw, "MODEL\t")
	}
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
		if models {
			fmt.Fprintf(tw, "%s\t", x.Model)
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

// PrintShadow writes a Shadow answer: both configs, the agreement, the route pairs, the
// candidate's reasons and, when an slo forecast priced both choices, its means.
func PrintShadow(w io.Writer, r *condisaggv1.ShadowResponse) {
	if r.GetCandidateConfig() == "" {
		fmt.Fprintf(w, "live       %s\ncandidate  none (set router.shadow_disagg_config and reload)\n", r.GetLiveConfig())
		return
	}
	pct := func(n uint64) string {
		if r.GetDecisions() == 0 {
			return "-"
		}
		return strconv.FormatFloat(100*float64(n)/float64(r.GetDecisions()), 'f', 1, 64) + "%"
	}
	fmt.Fprintf(w, "live       %s\ncandidate  %s\ndecisions  %d\nsame route %d (%s)\nsame workers %d (%s)\n",
		r.GetLiveConfig(), r.GetCandidateConfig(), r.GetDecisions(), r.GetSameRoute(), pct(r.GetSameRoute()),
		r.GetSameWorkers(), pct(r.GetSameWorkers()))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nLIVE ROUTE\tCANDIDATE ROUTE\tREQUESTS")
	for _, p := range r.GetPairs() {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", p.GetLiveRoute(), p.GetCandidateRoute(), p.GetCount())
	}
	tw.Flush()
	reasons := make([]string, 0, len(r.GetCandidateReasons()))
	for k := range r.GetCandidateReasons() {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCANDIDATE REASON\tREQUESTS")
	for _, k := range reasons {
		fmt.Fprintf(tw, "%s\t%d\n", k, r.GetCandidateReasons()[k])
	}
	tw.Flush()
	if r.GetForecasts() > 0 {
		fmt.Fprintf(w, "\nslo forecast over %d decisions: TTFT mean live %.1f ms, candidate %.1f ms; headroom mean live %.3f, candidate %.3f\n",
			r.GetForecasts(), r.GetLiveTtftMsMean(), r.GetCandidateTtftMsMean(), r.GetLiveHeadroomMean(), r.GetCandidateHeadroomMean())
	}
}

// PrintRecent writes a Recent answer as a table, newest first: each decision with its
// disaggregation truth (TRANSFER) and, once classified, the decode answer's cached tokens C
// of its prompt tokens L.
func PrintRecent(w io.Writer, r *condisaggv1.RecentResponse) {
	fmt.Fprintf(w, "%d decisions routed (the router keeps the last %d), newest first\n", r.GetTotal(), r.GetKept())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT (UTC)\tREQUEST\tPLACEMENT\tREASON\tPREFILL\tDECODE\tISL\tCACHED\tTRANSFER\tC/L\tSESSION\tSTEADY STATE")
	for _, d := range r.GetDecisions() {
		at := d.GetAt()
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			at = t.Format("15:04:05.000")
		}
		cl := "-"
		if d.GetTransferAt() != "" {
			c := "?"
			if d.GetTransferCachedTokens() >= 0 {
				c = itoa(d.GetTransferCachedTokens())
			}
			cl = c + "/" + itoa(d.GetTransferPromptTokens())
		}
		sess := "-"
		if s := d.GetSession(); s != nil {
			sess = sessionText(s)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.GetSeq(), at, orDash(d.GetRequestId()),
			d.GetPlacement(), orDash(d.GetReason()), orDash(d.GetPrefillWorker()), orDash(d.GetDecodeWorker()),
			d.GetTokens(), d.GetCachedTokens(), d.GetTransfer(), cl, sess, steadyText(d.GetFleet()))
	}
	tw.Flush()
}

// steadyText is the fleet steady state a decision was made in (slo_fleet): the regime with
// the more headroom, then each regime's prefill utilisation ("!" : saturated). "-" without one.
func steadyText(f *condisaggv1.FleetForecast) string {
	if f == nil {
		return "-"
	}
	agg, split := f.GetAggregated(), f.GetSplit()
	util := func(g *condisaggv1.FleetRegime) string {
		if !g.GetValid() {
			return "-"
		}
		u := strconv.FormatFloat(g.GetPrefillUtil(), 'f', 2, 64)
		if g.GetSaturated() {
			u += "!"
		}
		return u
	}
	prefer := "aggregated"
	if split.GetValid() && (!agg.GetValid() || split.GetHeadroom() > agg.GetHeadroom()) {
		prefer = "split"
	}
	return prefer + " (prefill util agg " + util(agg) + ", split " + util(split) + ")"
}

// sessionText is a session's affinity outcome and the worker it was bound to.
func sessionText(s *condisaggv1.SessionAffinity) string {
	if s.GetBoundWorker() == "" {
		return s.GetOutcome()
	}
	return s.GetOutcome() + " (bound " + s.GetBoundWorker() + ")"
}
