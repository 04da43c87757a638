package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/server/statuspage"
)

const uiToken = "0123456789abcdef-ui-token"

// uiGet fetches path from the admin HTTP port, with a bearer token unless token is "".
func uiGet(t *testing.T, addr, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// routeRequest plays Envoy for one BUFFERED chat request with an x-request-id and returns the
// headers the decision set.
func routeRequest(t *testing.T, conn *grpc.ClientConn, requestID, body string) map[string]string {
	t.Helper()
	set := decideHeaders(t, conn, body, "x-request-id", requestID)
	if set["x-condisagg-route"] == "" {
		t.Fatalf("no decision for %s: %v", requestID, set)
	}
	return set
}

// TestStatusPageAPI: the static shell is served to anyone and holds no data; with a token
// configured every /ui/api/ call needs it (401 without or with a wrong one); the state shows
// the fleet and a request just routed through ext_proc with its reason and inputs, the mix
// counts it, and the configuration is the one in force without the token.
func TestStatusPageAPI(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "admin.token", uiToken+"\n")
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "conditional_disagg: false", "conditional_disagg: true", 1)
	cfg = strings.Replace(cfg, "kv_events: false", "kv_events: true", 1)
	a := startServe(t, cfg+workersYAML+"admin_token_file: "+tokenFile+"\n")

	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, b := uiGet(t, a.http, path, "")
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Fatalf("%s without a token: %d", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
			resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s headers: %v", path, resp.Header)
		}
		if strings.Contains(string(b), "decode-0") || strings.Contains(string(b), "127.0.0.1:8200") {
			t.Fatalf("%s reveals the fleet:\n%s", path, b)
		}
	}
	if resp, _ := uiGet(t, a.http, "/ui", ""); resp.Request.URL.Path != "/ui/" {
		t.Fatalf("/ui was not redirected to /ui/: %s", resp.Request.URL)
	}
	for _, c := range []struct {
		spec, path, token string
		want              int
	}{
		{"state_without_token_is_401", "/ui/api/state", "", 401},
		{"state_with_wrong_token_is_401", "/ui/api/state", "nope-nope-nope-nope", 401},
		{"config_without_token_is_401", "/ui/api/config", "", 401},
		{"unknown_api_without_token_is_401", "/ui/api/workers", "", 401},
		{"unknown_api_with_token_is_404", "/ui/api/workers", uiToken, 404},
		{"bad_decisions_limit_is_400", "/ui/api/state?decisions=x", uiToken, 400},
		{"state_with_token_is_200", "/ui/api/state", uiToken, 200},
		{"config_with_token_is_200", "/ui/api/config", uiToken, 200},
	} {
		t.Run(c.spec, func(t *testing.T) {
			resp, b := uiGet(t, a.http, c.path, c.token)
			if resp.StatusCode != c.want {
				t.Fatalf("%s: %d, want %d: %s", c.path, resp.StatusCode, c.want, b)
			}
			if c.want == 401 && (resp.Header.Get("WWW-Authenticate") != "Bearer" || strings.Contains(string(b), "decode-0")) {
				t.Fatalf("401 answer: %v %s", resp.Header, b)
			}
		})
	}

	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"qwen3","messages":[{"role":"user","content":"what does the status page show?"}]}`
	h := routeRequest(t, conn, "api-test-1", body)

	_, b := uiGet(t, a.http, "/ui/api/state", uiToken)
	var st statuspage.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if st.Transfers == nil || len(st.Transfers) != 0 {
		t.Fatalf("transfers %v; want an empty list before any remote answer", st.Transfers)
	}
	if !st.Ready || st.Policy != "isl_bounding" || len(st.Models) != 1 || len(st.Models[0].Workers) != 2 {
		t.Fatalf("state %+v", st)
	}
	workers := map[string]statuspage.Worker{}
	for _, w := range st.Models[0].Workers {
		workers[w.ID] = w
	}
	d0, p0 := workers["decode-0"], workers["prefill-0"]
	if d0.Role != "decode" || d0.Endpoint != "127.0.0.1:8200" || !d0.Healthy || d0.HealthReason != "discovered" ||
		d0.KVCapacityBlocks != 40000 || d0.Scraped != nil || d0.Events != nil || p0.Role != "prefill" || p0.MaxBatchedTokens != 8192 {
		t.Fatalf("workers %+v", workers)
	}
	if st.Decisions.Total != 1 || st.Decisions.Kept != 256 || len(st.Decisions.Latest) != 1 {
		t.Fatalf("decisions %+v", st.Decisions)
	}
	d := st.Decisions.Latest[0]
	if d.RequestID != "api-test-1" || d.Route != h["x-condisagg-route"] || d.Reason == "" || d.Decode != "decode-0" ||
		d.ISL == 0 || d.Inputs == nil || d.Inputs.Policy != "isl_bounding" || d.Inputs.EffISLThreshold != 2048 || d.Placement != d.Route {
		t.Fatalf("decision %+v (headers %v)", d, h)
	}
	last := st.Mix.Buckets[len(st.Mix.Buckets)-1]
	if st.Mix.BucketSeconds != 10 || len(st.Mix.Buckets) != 60 || last.Counts[d.Placement] != 1 ||
		strings.Join(st.Mix.Placements, ",") != "prefill,decode,prefill_local,fallback,handoff" {
		t.Fatalf("mix %+v, last bucket %+v", st.Mix, last)
	}
	if _, b := uiGet(t, a.http, "/ui/api/state?decisions=0", uiToken); !strings.Contains(string(b), `"latest":[]`) {
		t.Fatalf("decisions=0:\n%s", b)
	}

	_, b = uiGet(t, a.http, "/ui/api/config", uiToken)
	var c statuspage.Configuration
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if strings.Contains(string(b), uiToken) || !c.Admin.Token || c.Admin.TLS || c.File["admin_token_file"] != tokenFile ||
		!strings.HasSuffix(c.ConfigFile, "condisagg.yaml") {
		t.Fatalf("config:\n%s", b)
	}
	router, _ := c.File["router"].(map[string]any)
	if router["conditional_disagg"] != true || router["mode"] != "kv" {
		t.Fatalf("config router section %v", router)
	}
}
