package envoy

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/condisagg/condisagg/internal/repo"
)

// envoyStat matches an Envoy statistic's Prometheus name in a rule or dashboard query.
var envoyStat = regexp.MustCompile(`\benvoy_[a-z0-9_]+`)

// TestEnvoyExtProcStatNames: every envoy_* statistic the alert rules and the Grafana dashboard of
// deploy/observability read is one the real Envoy exports on /stats/prometheus for the ext_proc
// filter of our bootstrap, with the label the rules group by; and a fail-open request through a
// dead condisagg moves the counters the gateway alerts fire on.
func TestEnvoyExtProcStatNames(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, f := range []string{"deploy/observability/prometheus/condisagg-alerts.yaml", "deploy/observability/grafana/condisagg.json"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range envoyStat.FindAllString(string(b), -1) {
			if n != "envoy_http_conn_manager_prefix" && !slices.Contains(used, n) {
				used = append(used, n)
			}
		}
	}
	if len(used) < 4 {
		t.Fatalf("found %d Envoy statistics in the rules and dashboard (%v): not parsed?", len(used), used)
	}

	fallback := newUpstream(t, "fallback")
	p := testParams(Buffered, FailOpen)
	p.ExtProc = deadEndpoint(t)
	p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
	env := startEnvoy(t, p)
	if res := send(t, env, http.MethodPost, "/v1/chat/completions", chatBody(1<<10), nil); res.status != http.StatusOK {
		t.Fatalf("fail-open request: status %d %q", res.status, res.body)
	}
	text, err := env.PrometheusStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /stats/prometheus: %v", err)
	}
	value := func(name string) float64 {
		mf := families[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER {
			t.Fatalf("Envoy exports no counter %s", name)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "envoy_http_conn_manager_prefix" && l.GetValue() == "llm" {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("%s has no series with envoy_http_conn_manager_prefix=\"llm\"", name)
		return 0
	}
	for _, n := range used {
		value(n)
	}
	if v := value("envoy_http_ext_proc_failure_mode_allowed"); v != 1 {
		t.Errorf("failure_mode_allowed = %v after one fail-open request; want 1", v)
	}
	if v := value("envoy_http_ext_proc_streams_failed"); v != 1 {
		t.Errorf("streams_failed = %v after one request to a dead router; want 1", v)
	}
}
