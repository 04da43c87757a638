package vllmsim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/sim"
)

// FuzzGenerateBody posts arbitrary bodies to both generation endpoints of a running worker:
// the server never panics and answers 200 or an OpenAI error status.
func FuzzGenerateBody(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "bodies", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	tok := loadTokenizer(f, "qwen3")
	vocab, err := NewVocab(tok)
	if err != nil {
		f.Fatal(err)
	}
	in, err := NewInstance(InstanceConfig{Engine: sim.Config{NumGPUBlocks: 4096}, TimeScale: 1e6,
		Server: ServerConfig{ModelNames: []string{"qwen3"}, Tokenizer: tok, Vocab: vocab, MaxModelLen: 8192, MaxBodyBytes: 1 << 16,
			KVTransfer: &KVTransfer{EngineID: "e", Host: "h", Port: 1}}})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Worker.Run(ctx) }()
	f.Cleanup(func() { cancel(); <-done })
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			rec := httptest.NewRecorder()
			in.Server.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			switch rec.Code {
			case 200, 400, 404, 413:
			default:
				t.Fatalf("%s %q: status %d %s", path, body, rec.Code, rec.Body)
			}
		}
	})
}
