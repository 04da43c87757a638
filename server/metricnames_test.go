package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/server/config"
	"github.com/condisagg/condisagg/tokenizer"
)

// The dashboard and alert rules of deploy/observability, relative to the repository root.
const (
	dashboardJSON = "deploy/observability/grafana/condisagg.json"
	alertRules    = "deploy/observability/prometheus/condisagg-alerts.yaml"
)

// exportedMetrics builds the registry exactly as `condisagg serve` does (service.build, with KV
// event streams on) and returns every metric name registered on it, with the type of each one
// that has a sample at startup.
func exportedMetrics(t *testing.T) (map[string]bool, map[string]dto.MetricType) {
	t.Helper()
	dir := t.TempDir()
	model := requireModel(t)
	// The replicas bus is configured (not connected: build dials nothing), so its metrics are
	// registered as they are in a fleet of replicas.
	token := repo.WriteFile(t, dir, "bus-token", "metric-names-token\n")
	path := repo.WriteFile(t, dir, "condisagg.yaml", `model: {tokenizer: `+model+`}
router: {kv_events: true}
replicas: {nats_url: "nats://127.0.0.1:4222", token_file: `+token+`}
`+workersYAML)
	f := config.NewFlags()
	if err := f.FS.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]*tokenizer.Tokenizer, len(cfg.Models))
	for i, m := range cfg.Models {
		if toks[i], err = tokenizer.Load(m.Tokenizer, tokenizer.Options{CacheSegments: m.CacheSegments, ChatTemplateFile: m.ChatTemplate}); err != nil {
			t.Fatal(err)
		}
	}
	s := &service{flags: f, log: slog.New(slog.DiscardHandler)}
	s.cfg.Store(cfg)
	t.Cleanup(func() {
		for _, m := range s.models {
			if m.group != nil {
				m.group.Close()
			}
		}
	})
	if err := s.build(context.Background(), cfg, toks); err != nil {
		t.Fatal(err)
	}
	names := registeredNames(t, s.reg)
	types := map[string]dto.MetricType{}
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		types[mf.GetName()] = mf.GetType()
	}
	return names, types
}

// registeredNames reads the names of every descriptor registered on reg. A metric vector with no
// child yet has no sample to gather, so the registry's own index of names is read: the unexported
// dimHashesByName of client_golang's Registry (read-only, through reflection).
func registeredNames(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	field := reflect.ValueOf(reg).Elem().FieldByName("dimHashesByName")
	if !field.IsValid() || field.Kind() != reflect.Map {
		t.Fatal("prometheus.Registry has no dimHashesByName map: client_golang changed; update registeredNames")
	}
	names := map[string]bool{}
	for _, k := range field.MapKeys() {
		names[k.String()] = true
	}
	return names
}

// Pieces of PromQL that hold no metric name.
var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`(^|[^a-zA-Z0-9_:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	labelValues  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

var promKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
	"bool", "offset", "inf", "nan", "Inf", "NaN", "start", "end", "atan2"}

// metricNames returns the metric names a PromQL expression selects: every identifier outside
// strings, label matchers, ranges and grouping clauses that is neither a function nor a keyword.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, " ")
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(e, -1) {
		name := e[m[4]:m[5]]
		if strings.HasPrefix(strings.TrimLeft(e[m[5]:], " \t\n"), "(") || slices.Contains(promKeywords, name) {
			continue
		}
		names = append(names, name)
	}
	return names
}

func TestMetricNamesOfPromQL(t *testing.T) {
	expr := `histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{reason!~"x|y",le="1e3"}[5m] offset 1d))) > 1e3
	  and on (job) (time() - max without (worker) (b:rec) > 600) or c unless bool_metric * 2`
	if got, want := metricNames(expr), []string{"a_bucket", "b:rec", "c", "bool_metric"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v; want %v", got, want)
	}
}

// observabilityQueries returns every PromQL expression of the Grafana dashboard (panel targets)
// and of the alert rules, and the metrics its variables read through label_values.
func observabilityQueries(t *testing.T) (exprs []string, variableMetrics []string) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, dashboardJSON))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		for _, m := range labelValues.FindAllStringSubmatch(v.Definition, -1) {
			variableMetrics = append(variableMetrics, m[1])
		}
	}
	raw, err = os.ReadFile(filepath.Join(root, alertRules))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs, variableMetrics
}

// TestObservabilityMetricNames: every metric the Grafana dashboard and the Prometheus alert rules
// of deploy/observability read is one the condisagg binary registers (but `up` and Envoy's
// envoy_* statistics); a _bucket, _sum or _count
// series must belong to a registered histogram (or summary).
func TestObservabilityMetricNames(t *testing.T) {
	names, types := exportedMetrics(t)
	exprs, vars := observabilityQueries(t)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricNames(e) {
			used[n] = true
		}
	}
	for _, n := range vars {
		used[n] = true
	}
	if len(exprs) < 20 || len(used) < 15 {
		t.Fatalf("read %d queries naming %d metrics; the dashboard or rules were not found or not parsed", len(exprs), len(used))
	}
	for n := range used {
		// Not condisagg's: Prometheus' own `up`, and Envoy's statistics (envoy
		// TestEnvoyExtProcStatNames checks those against the real Envoy).
		if names[n] || n == "up" || strings.HasPrefix(n, "envoy_") {
			continue
		}
		base, suffix := n, ""
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, s); ok {
				base, suffix = b, s
			}
		}
		typ, typed := types[base]
		switch {
		case suffix != "" && typed && (typ == dto.MetricType_HISTOGRAM || (typ == dto.MetricType_SUMMARY && suffix != "_bucket")):
		case suffix != "" && names[base]:
			t.Errorf("%s: %s is registered but has no sample at startup, so its type is unknown here", n, base)
		default:
			t.Errorf("%s is used by the dashboard or the alert rules but the condisagg binary does not export it", n)
		}
	}
}
