package observability

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/condisagg/condisagg/deploy/internal/tools"
)

var update = flag.Bool("update", false, "rewrite grafana/condisagg.json")

const (
	dashboardFile = "grafana/condisagg.json"
	rulesFile     = "prometheus/condisagg-alerts.yaml"
	rulesTestFile = "prometheus/condisagg-alerts.test.yaml"
)

// TestDashboardIsCurrent keeps grafana/condisagg.json equal to the Go definition
// (go test ./observability -update rewrites it).
func TestDashboardIsCurrent(t *testing.T) {
	out, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(dashboardFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatalf("%v (run go test ./observability -update in deploy/)", err)
	}
	if !bytes.Equal(have, out) {
		t.Errorf("%s is stale: run go test ./observability -update in deploy/", dashboardFile)
	}
}

// promtool runs promtool with args in dir and fails the test with its output on error.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := tools.Find("promtool")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// grafanaVars are the dashboard's variables with values that make its queries plain PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")

// TestDashboardQueriesParse: every dashboard query, its Grafana variables filled in, is valid
// PromQL for promtool (each becomes a recording rule of a throwaway rule file).
func TestDashboardQueriesParse(t *testing.T) {
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range Queries() {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafanaVars.Replace(q)})
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "dashboard.rules.yaml")
}

// TestAlertRules checks the rule file and runs its promtool unit tests.
func TestAlertRules(t *testing.T) {
	promtool(t, ".", "check", "rules", rulesFile)
	out := promtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules printed no SUCCESS:\n%s", out)
	}
}

// TestEveryAlertIsUnitTested: each alert of the rule file fires in at least one promtool case and
// is expected silent in at least one.
func TestEveryAlertIsUnitTested(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	for path, v := range map[string]any{rulesFile: &rules, rulesTestFile: &tests} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("alert %s: a firing case %v, a silent case %v; want both in %s", r.Alert, fires[r.Alert], silent[r.Alert], rulesTestFile)
			}
		}
	}
	for name := range fires {
		if !slices.Contains(alerts, name) {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}
