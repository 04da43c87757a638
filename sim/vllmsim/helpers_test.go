package vllmsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
	"github.com/condisagg/condisagg/sim"

	"github.com/condisagg/condisagg/tokenizer"
)

// TestMain ends the tests with a goroutine-leak check.
func TestMain(m *testing.M) { leakcheck.Main(m, "condisagg/sim/vllmsim.") }

// modelDirs are where tokenizer/testdata/fetch_models.sh puts the real tokenizers (the files are
// over 1 MiB, so they are not copied here).
var modelDirs = map[string]string{
	"qwen3":  filepath.Join("..", "..", "tokenizer", "testdata", "models", "qwen3"),
	"llama3": filepath.Join("..", "..", "tokenizer", "testdata", "models", "llama3"),
}

var loaded sync.Map // model name -> func() (*tokenizer.Tokenizer, error)

func loadTokenizer(t testing.TB, name string) *tokenizer.Tokenizer {
	t.Helper()
	f, _ := loaded.LoadOrStore(name, sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
		return tokenizer.Load(modelDirs[name], tokenizer.Options{CacheSegments: 1024})
	}))
	tk, err := f.(func() (*tokenizer.Tokenizer, error))()
	if err != nil {
		t.Fatalf("%s tokenizer missing under %s (%v): run tokenizer/testdata/fetch_models.sh (make deps does)", name, modelDirs[name], err)
	}
	return tk
}

type instOpts struct {
	events       bool
	format       EventFormat
	hashes       HashEncoding
	oldReplay    bool
	kvTransfer   bool
	xferFailRate float64 // KVTransfer.FailureRate
	xferPolicy   string  // KVTransfer.FailurePolicy ("" = fail)
	numBlocks    int
	timeScale    float64
	details      bool
	lora         []LoRAModule
	// dp is --data-parallel-size; pub and replay override the ephemeral event endpoints
	// (ports must be concrete to be offset per rank).
	dp          int
	pub, replay string
}

type testInstance struct {
	*Instance
	url         string
	pub, replay string
	tok         *tokenizer.Tokenizer
}

// startInstance runs a vllm-sim instance (Qwen3 tokenizer) on 127.0.0.1 ephemeral ports; the
// test's cleanup stops it and waits for it.
func startInstance(t *testing.T, o instOpts) *testInstance {
	t.Helper()
	tok := loadTokenizer(t, "qwen3")
	vocab, err := NewVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	cfg := InstanceConfig{
		Engine:    sim.Config{NumGPUBlocks: o.numBlocks, Seed: 11},
		TimeScale: o.timeScale,
		Format:    o.format, Hashes: o.hashes, OldReplayLayout: o.oldReplay, DataParallelSize: o.dp,
		Server: ServerConfig{ModelNames: []string{"qwen3"}, Tokenizer: tok, Vocab: vocab, PromptTokens: o.details, MaxModelLen: 40960,
			LoRAModules: o.lora},
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 50
	}
	if o.events {
		pub, replay := "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
		if o.pub != "" {
			pub, replay = o.pub, o.replay
		}
		cfg.KVEvents = KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: pub,
			ReplayEndpoint: &replay, Topic: "kv", BufferSteps: 1000, HWM: 100000, MaxQueueSize: 1000}
	}
	if o.kvTransfer {
		cfg.Server.KVTransfer = &KVTransfer{Connector: "NixlConnector", Role: "kv_consumer", EngineID: "engine-1", Host: "10.0.0.5", Port: 5600,
			FailureRate: o.xferFailRate, FailurePolicy: o.xferPolicy}
	}
	in, err := NewInstance(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := in.Start(ln)
	ti := &testInstance{Instance: in, url: "http://" + ln.Addr().String(), tok: tok}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("instance Run: %v", err)
		}
	})
	if in.Publisher != nil {
		if ti.pub, ti.replay, err = in.Publisher.Ready(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return ti
}

// post sends body to path and returns the status and the response body.
func (ti *testInstance) post(t *testing.T, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ti.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
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
	return resp.StatusCode, b
}

func (ti *testInstance) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(ti.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// metric returns the value of the first /metrics sample whose line starts with prefix.
func (ti *testInstance) metric(t *testing.T, prefix string) string {
	t.Helper()
	_, b := ti.get(t, "/metrics")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	t.Fatalf("metric %s not in /metrics:\n%s", prefix, b)
	return ""
}

// seqTokens returns the n token ids base, base+1, ...
func seqTokens(n int, base uint32) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = base + uint32(i)
	}
	return p
}

func testModel(t testing.TB) sim.CostModel {
	t.Helper()
	m, err := sim.PerfModel("llama3.1-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
