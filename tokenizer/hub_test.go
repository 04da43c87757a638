package tokenizer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// hubServer serves one repository the way the Hub's /resolve/ endpoint does
// and counts requests.
type hubServer struct {
	mu       sync.Mutex // guards requests, auth
	requests int
	auth     []string
}

func startHub(t *testing.T, files map[string]string, token string) (*httptest.Server, *hubServer) {
	t.Helper()
	h := &hubServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.requests++
		h.auth = append(h.auth, r.Header.Get("Authorization"))
		h.mu.Unlock()
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/acme/tiny/resolve/main/")
		body, found := files[name]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", "0123abcd")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, h
}

func (h *hubServer) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests
}

func TestLoadModelFromHub(t *testing.T) {
	tj, err := os.ReadFile(filepath.Join("testdata", "synthetic_bytelevel_tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"tokenizer.json": string(tj), "tokenizer_config.json": `{"chat_template":"{{ messages[0].content }}"}`}
	srv, hub := startHub(t, files, "secret")
	cache := t.TempDir()
	opts := HubOptions{Endpoint: srv.URL, CacheDir: cache, Token: "secret", Client: srv.Client()}
	ctx := context.Background()

	tk, err := LoadModel(ctx, "hf:acme/tiny", opts, Options{})
	if err != nil {
		t.Fatalf("first load: %v", err)
	}
	if got, err := tk.RenderChat([]byte(`{"messages":[{"role":"user","content":"hi"}]}`), ChatOptions{}); err != nil || got != "hi" {
		t.Errorf("chat template from the hub config rendered %q, %v", got, err)
	}
	first := hub.count()
	if first != 3 { // tokenizer.json, tokenizer_config.json, chat_template.jinja (404)
		t.Errorf("first load made %d requests, want 3", first)
	}
	for _, a := range hub.auth {
		if a != "Bearer secret" {
			t.Errorf("request carried Authorization %q, want the HF_TOKEN bearer", a)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "models--acme--tiny", "snapshots", "0123abcd", "tokenizer.json")); err != nil {
		t.Errorf("snapshot not stored in the huggingface_hub layout: %v", err)
	}

	if _, err := LoadModel(ctx, "hf:acme/tiny", opts, Options{}); err != nil {
		t.Fatalf("second load: %v", err)
	}
	if n := hub.count(); n != first {
		t.Errorf("second load made %d more requests, want 0 (cached)", n-first)
	}
	offline := opts
	offline.Offline, offline.Endpoint = true, "http://127.0.0.1:1"
	if _, err := LoadModel(ctx, "hf:acme/tiny", offline, Options{}); err != nil {
		t.Errorf("offline load from cache: %v", err)
	}
}

func TestLoadModelFromHubErrors(t *testing.T) {
	srv, _ := startHub(t, map[string]string{}, "secret")
	ctx := context.Background()
	cases := []struct {
		name, model string
		opts        HubOptions
		want        string
	}{
		{"bad_id", "hf:../etc", HubOptions{CacheDir: t.TempDir()}, "want hf:<org>/<model>"},
		{"offline_miss", "hf:acme/tiny", HubOptions{CacheDir: t.TempDir(), Offline: true}, "offline mode"},
		{"unauthorized", "hf:acme/tiny", HubOptions{Endpoint: srv.URL, CacheDir: t.TempDir(), Client: srv.Client()}, "401"},
		{"missing_tokenizer", "hf:acme/tiny", HubOptions{Endpoint: srv.URL, CacheDir: t.TempDir(), Token: "secret", Client: srv.Client()}, "not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadModel(ctx, c.model, c.opts, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestHubOptionsFromEnv(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", "/models/hf")
	t.Setenv("HF_TOKEN", "tok")
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_ENDPOINT", "http://mirror")
	o := HubOptionsFromEnv()
	if o.CacheDir != "/models/hf/hub" || o.Token != "tok" || !o.Offline || o.Endpoint != "http://mirror" {
		t.Errorf("HubOptionsFromEnv() = %+v", o)
	}
}
