package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/condisagg/condisagg/internal/testport"
)

// chromiumPath is the headless browser of the status page test: $CHROMIUM_BIN, else Debian's
// chromium on the PATH. Missing, the test fails with the fix (it is part of `make test`).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_BIN"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the status page test needs a headless Chromium (%v): run `make deps` "+
			"(it installs Debian's chromium package) or set CHROMIUM_BIN", err)
	}
	return p
}

// browser starts a headless Chromium for the test and returns its tab's context; console
// errors and uncaught exceptions of the page fail the test. The browser stops with the test.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run its sandbox as root
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	var console sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancel()
		console.Wait()
	})
	messages := chromedp.Console(bctx) // starts the browser; subscribes before the first page
	console.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// A 401 of the first, tokenless API call is the browser's "network" log entry: expected.
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source != "network") {
				t.Errorf("page console: %s (%s:%d)", m, m.URL, m.Line)
			}
		}
	})
	return bctx
}

// waitFor polls a JavaScript predicate in the page until it is true (the page polls its API),
// for up to a minute: `make test` runs this beside other packages' tests on few cores.
func waitFor(t *testing.T, ctx context.Context, what, predicate string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(time.Minute))); err != nil {
		var page string
		page, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
	}
}

// pageText is the text content of the element selector matches.
func pageText(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(selector)))
	if err != nil {
		t.Fatalf("text of %s: %v", selector, err)
	}
	return s
}

// TestStatusPageInChromium loads /ui in a real headless Chromium against a real serve with two
// vllm-sim workers (the decode one publishing KV events): the page asks for the admin token,
// renders the fleet with health and event-stream state, then shows a request routed through
// ext_proc a moment later with its reason, counts it in the placement mix, and shows the decode
// worker's cached blocks once the worker has served the prompt.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium, two vllm-sim workers and serve")
	}
	model := requireModel(t)
	ctx := browser(t, 3*time.Minute)
	pub := testport.Block(t, 2) // the KV event PUB and replay ports of the decode worker
	rep := pub + 1
	decodeAddr := startSim(t, model, 1, pub, rep)
	ppub := testport.Block(t, 2)
	prefillAddr := startSim(t, model, 1, ppub, ppub+1)
	tokenFile := writeFile(t, t.TempDir(), "admin.token", uiToken+"\n")
	a := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin_grpc_listen: 127.0.0.1:0
admin_token_file: %s
drain_timeout: 5s
pool: {health_interval: 200ms, scrape_interval: 200ms}
model: {tokenizer: %s, block_size: 16}
router: {mode: kv, kv_events: true, conditional_disagg: true}
workers:
  - {name: prefill-0, role: prefill, endpoint: %s, max_num_batched_tokens: 8192}
  - {name: decode-0, role: decode, endpoint: %s, num_gpu_blocks: 1000,
     kv_events: "tcp://127.0.0.1:%d", kv_replay: "tcp://127.0.0.1:%d"}
`, tokenFile, model, prefillAddr, decodeAddr, pub, rep))

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+a.http+"/ui")); err != nil {
		t.Fatal(err)
	}
	// Without a token the shell shows only the token form.
	waitFor(t, ctx, "the token form", `!document.getElementById("auth").hidden && document.getElementById("main").hidden`)
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), uiToken), chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the fleet", `document.querySelector('tr[data-worker="decode-0"]') !== null && `+
		`document.querySelector('tr[data-worker="prefill-0"]') !== null`)
	fleet := pageText(t, ctx, "#fleet")
	for _, want := range []string{"decode-0", "prefill-0", decodeAddr, prefillAddr, "healthy"} {
		if !strings.Contains(fleet, want) {
			t.Fatalf("fleet lacks %q:\n%s", want, fleet)
		}
	}
	waitFor(t, ctx, "decode-0's event stream connected",
		`document.querySelector('tr[data-worker="decode-0"] td.events').textContent.startsWith("connected")`)
	if ev := pageText(t, ctx, `tr[data-worker="prefill-0"] td.events`); ev != "no stream" {
		t.Fatalf("prefill-0 events: %q", ev)
	}
	waitFor(t, ctx, "scraped /metrics", `document.querySelector('tr[data-worker="decode-0"] td.scraped').textContent !== "never"`)
	cfg := pageText(t, ctx, "#config")
	if !strings.Contains(cfg, `"conditional_disagg": true`) || strings.Contains(cfg, uiToken) {
		t.Fatalf("configuration:\n%s", cfg)
	}

	// A request routed through ext_proc appears with its decision.
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"` +
		strings.Repeat("The status page shows each decision as it is made. ", 8) + `"}]}`
	h := routeRequest(t, conn, "chromium-req-1", body)
	row := `tr[data-request-id="chromium-req-1"]`
	waitFor(t, ctx, "the decision row", `document.querySelector('`+row+`') !== null`)
	placement, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row), "data-placement"))
	if err != nil {
		t.Fatal(err)
	}
	reason := pageText(t, ctx, row+" td.reason")
	if placement.Value != h["x-condisagg-route"] || reason == "" || !strings.Contains(pageText(t, ctx, row), "decode-0") {
		t.Fatalf("decision row %q placement %q reason %q, headers %v", pageText(t, ctx, row), placement.Value, reason, h)
	}
	waitFor(t, ctx, "the mix counts it", `document.querySelector('#mix-legend span[data-placement="`+placement.Value+
		`"]').textContent === "`+placement.Value+` 1" && document.querySelectorAll("#mix svg rect").length === 1`)

	// The decode worker serves the prompt (as Envoy would send it there); its KV events reach
	// the index and the page shows the cached blocks.
	resp, err := http.Post("http://"+decodeAddr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("vllm-sim answered %d", resp.StatusCode)
	}
	waitFor(t, ctx, "decode-0's indexed blocks",
		`parseInt(document.querySelector('tr[data-worker="decode-0"] td.indexed').textContent.replace(/,/g, "")) > 0`)
}
