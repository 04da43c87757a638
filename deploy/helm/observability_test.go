package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
	"sigs.k8s.io/yaml"
)

// TestChartObservabilityIsTheFiles: the chart's PrometheusRule holds exactly the groups of
// deploy/observability/prometheus/condisagg-alerts.yaml, and its dashboard ConfigMap exactly
// deploy/observability/grafana/condisagg.json (the files the observability tests check).
func TestChartObservabilityIsTheFiles(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, variant{values: []string{"common.yaml"}})

	raw, err := os.ReadFile(filepath.Join(root, "deploy", "observability", "prometheus", "condisagg-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := json.Unmarshal(js, &rules); err != nil {
		t.Fatal(err)
	}
	rule := find(t, objs, "PrometheusRule", release)
	if !sameJSON(rule.Doc["spec"], rules) {
		t.Error("PrometheusRule spec differs from deploy/observability/prometheus/condisagg-alerts.yaml")
	}
	if got := len(dig(t, rule.Doc, "spec", "groups", 0, "rules").([]any)); got < 9 {
		t.Errorf("PrometheusRule has %d rules; want the 9 alerts", got)
	}

	dash, err := os.ReadFile(filepath.Join(root, "deploy", "observability", "grafana", "condisagg.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := find(t, objs, "ConfigMap", release+"-dashboard")
	if got := dig(t, cm.Doc, "data", "condisagg.json"); got != string(dash) {
		t.Error("dashboard ConfigMap differs from deploy/observability/grafana/condisagg.json")
	}
	if got := dig(t, cm.Doc, "metadata", "labels", "grafana_dashboard"); got != "1" {
		t.Errorf("dashboard ConfigMap label grafana_dashboard = %v; want \"1\" (Grafana's sidecar)", got)
	}
}
