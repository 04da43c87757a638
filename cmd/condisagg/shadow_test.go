package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServeShadow: `condisagg serve` with a candidate config beside the live one. Requests
// routed over ext_proc keep the live decision (remote: a fresh prompt's ratio is 1.0) while
// the slo candidate would have prefilled locally on the idle decode worker; `condisagg shadow`
// counts both, the metric carries the pair, and `shadow --promote` makes the candidate live.
func TestServeShadow(t *testing.T) {
	model := requireModel(t)
	a := startServe(t, routingYAML(model, "  conditional_disagg_config: {policy: isl_bounding}\n"+
		"  shadow_disagg_config: {policy: slo, cost_model: llama3.1-8b-h100}\n")+workersYAML)
	ctx := context.Background()
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`
	for range 3 {
		extProcDecision(t, conn, body) // asserts the live route: prefill
	}

	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"shadow", "--addr", a.adminGRPC, "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("shadow exit %d: %s", code, errOut.String())
	}
	var st struct {
		CandidateConfig  string            `json:"candidateConfig"`
		Decisions        string            `json:"decisions"`
		SameRoute        string            `json:"sameRoute"`
		CandidateReasons map[string]string `json:"candidateReasons"`
		Pairs            []struct{ LiveRoute, CandidateRoute, Count string }
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if !strings.Contains(st.CandidateConfig, `"policy":"slo"`) || st.Decisions != "3" || st.SameRoute != "0" ||
		st.CandidateReasons["slo_bypass"] != "3" || len(st.Pairs) != 1 || st.Pairs[0].LiveRoute != "prefill" || st.Pairs[0].CandidateRoute != "decode" {
		t.Fatalf("shadow answer:\n%s", out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"shadow", "--addr", a.adminGRPC}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "same route 0 (0.0%)") || !strings.Contains(out.String(), "slo_bypass") {
		t.Fatalf("shadow table exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	if _, text := httpGet(t, "http://"+a.http+"/metrics"); !strings.Contains(text,
		`condisagg_shadow_decisions_total{live_route="prefill",same_workers="false",shadow_reason="slo_bypass",shadow_route="decode"} 3`) {
		t.Fatalf("metrics lack the shadow pair:\n%s", grepLines(text, "shadow"))
	}
	// The status page shows the same counts.
	_, page := httpGet(t, "http://"+a.http+"/ui/api/state")
	var ui struct {
		Shadow *struct {
			Candidate string            `json:"candidate"`
			Decisions uint64            `json:"decisions"`
			Pairs     map[string]uint64 `json:"pairs"`
		} `json:"shadow"`
	}
	if err := json.Unmarshal([]byte(page), &ui); err != nil || ui.Shadow == nil || ui.Shadow.Decisions != 3 || ui.Shadow.Pairs["prefill→decode"] != 3 {
		t.Fatalf("/ui/api/state shadow %+v (%v)", ui.Shadow, err)
	}
	out.Reset()
	if code := run(ctx, []string{"shadow", "--addr", a.adminGRPC, "--promote"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "promoted") {
		t.Fatalf("promote exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	var ex struct{ Reason, Policy string }
	if code := run(ctx, []string{"explain", "--addr", a.adminGRPC, "--body", body, "-o", "json"}, &out, &errOut); code != 0 ||
		json.Unmarshal(out.Bytes(), &ex) != nil || ex.Reason != "slo_bypass" || ex.Policy != "slo" {
		t.Fatalf("explain after promotion exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"shadow", "--addr", a.adminGRPC, "--promote"}, &out, &errOut); code != 1 {
		t.Fatalf("a second promotion (no candidate left) exit %d, want 1:\n%s", code, out.String())
	}
}

func grepLines(text, sub string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, sub) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeRejectsBadShadowConfig: a candidate with a bad field fails startup with the
// field's name under router.shadow_disagg_config.
func TestServeRejectsBadShadowConfig(t *testing.T) {
	model := requireModel(t)
	yaml := strings.Replace(serveYAML, "MODEL", model, 1)
	yaml = strings.Replace(yaml, "  conditional_disagg: false\n", "  conditional_disagg: false\n  shadow_disagg_config: {policy: slo}\n", 1)
	cfgPath := writeFile(t, t.TempDir(), "condisagg.yaml", yaml+workersYAML)
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", cfgPath}, io.Discard, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), `router.shadow_disagg_config: `) ||
		!strings.Contains(errOut.String(), `cost_model: "" is required with policy "slo"`) {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
}

// TestServeRejectsReportedGuardWithoutScrape: the reported KV-usage guard needs the scrape.
func TestServeRejectsReportedGuardWithoutScrape(t *testing.T) {
	model := requireModel(t)
	yaml := routingYAML(model, "  conditional_disagg_config: {decode_busy_threshold: 0.8, decode_busy_source: reported}\n")
	cfgPath := writeFile(t, t.TempDir(), "condisagg.yaml", yaml+workersYAML)
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", cfgPath}, io.Discard, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), `decode_busy_source: "reported" needs pool.scrape_interval > 0`) {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
}
