package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestServeTokenizerFromHub: `tokenizer: hf:<org>/<model>` is fetched at start from the Hub
// endpoint (HF_ENDPOINT) into the hub cache, and a later start with HF_HUB_OFFLINE=1 routes
// from the cache without asking the Hub; a model the Hub lacks fails the start and names it.
func TestServeTokenizerFromHub(t *testing.T) {
	model := requireModel(t)
	var asked atomic.Int64
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		name, ok := strings.CutPrefix(r.URL.Path, "/acme/qwen3/resolve/main/")
		b, err := os.ReadFile(filepath.Join(model, name))
		if !ok || strings.Contains(name, "/") || err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", "c0ffee")
		w.Write(b)
	}))
	defer hub.Close()
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "")
	dir := t.TempDir()
	cfg := strings.Replace(serveYAML, "MODEL", "hf:acme/qwen3", 1) + workersYAML
	body := `{"model":"qwen3","messages":[{"role":"user","content":"hello from the hub"}]}`
	explain := func(adminAddr string) string {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"explain", "--addr", adminAddr, "--body", body, "-o", "json"}, &out, &errOut); code != 0 {
			t.Fatalf("explain exit %d: %s", code, errOut.String())
		}
		return out.String()
	}

	first := explain(startServe(t, cfg).adminGRPC)
	if asked.Load() == 0 || !strings.Contains(first, `"route"`) {
		t.Fatalf("hub asked %d times; explain %s", asked.Load(), first)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--acme--qwen3", "snapshots", "c0ffee", "tokenizer.json")); err != nil {
		t.Fatalf("hub cache: %v", err)
	}

	// Offline: the cache serves, the Hub is not asked, and the prompt tokenizes alike.
	t.Setenv("HF_HUB_OFFLINE", "1")
	n := asked.Load()
	if again := explain(startServe(t, cfg).adminGRPC); again != first {
		t.Fatalf("offline explain differs:\n%s\nfirst:\n%s", again, first)
	}
	if asked.Load() != n {
		t.Fatalf("offline start asked the hub %d times", asked.Load()-n)
	}

	// A model that is neither cached nor on the Hub fails the start and says which.
	t.Setenv("HF_HUB_OFFLINE", "")
	var logs syncBuffer
	code := runServe(context.Background(), []string{"--config", writeFile(t, dir, "missing.yaml",
		strings.Replace(serveYAML, "MODEL", "hf:acme/absent", 1)+workersYAML)}, &logs, serveHooks{})
	if code == 0 || !strings.Contains(logs.String(), "acme/absent") {
		t.Fatalf("missing hub model: exit %d:\n%s", code, logs.String())
	}
}
