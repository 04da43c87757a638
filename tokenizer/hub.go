package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// HubPrefix marks a model given as a Hugging Face Hub id: "hf:<org>/<model>",
// optionally "@<revision>".
const HubPrefix = "hf:"

// hubFiles are fetched for a Hub model; only tokenizer.json is required.
var hubFiles = []struct {
	name     string
	required bool
}{{"tokenizer.json", true}, {"tokenizer_config.json", false}, {"chat_template.jinja", false}}

// hubRepoID is what a Hub repository id may contain.
var hubRepoID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// HubOptions says where and how Hub models are fetched. HubOptionsFromEnv fills
// it the way huggingface_hub reads its environment.
type HubOptions struct {
	Endpoint string       // default https://huggingface.co
	CacheDir string       // hub cache root (HF_HUB_CACHE, default $HF_HOME/hub)
	Token    string       // bearer token (HF_TOKEN); empty for public models
	Offline  bool         // HF_HUB_OFFLINE: use the cache only
	Client   *http.Client // default http.DefaultClient
}

// HubOptionsFromEnv reads HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_TOKEN and
// HF_HUB_OFFLINE.
func HubOptionsFromEnv() HubOptions {
	o := HubOptions{Endpoint: os.Getenv("HF_ENDPOINT"), CacheDir: os.Getenv("HF_HUB_CACHE"), Token: os.Getenv("HF_TOKEN")}
	if o.CacheDir == "" {
		home := os.Getenv("HF_HOME")
		if home == "" {
			if h, err := os.UserHomeDir(); err == nil {
				home = filepath.Join(h, ".cache", "huggingface")
			}
		}
		o.CacheDir = filepath.Join(home, "hub")
	}
	switch strings.ToLower(os.Getenv("HF_HUB_OFFLINE")) {
	case "1", "true", "yes", "on":
		o.Offline = true
	}
	return o
}

// LoadModel loads a model directory, or a Hub model given as "hf:<org>/<model>[@rev]",
// which is downloaded once into the hub cache (huggingface_hub's layout:
// models--org--name/snapshots/<commit>/, refs/<rev>) and read from there after.
func LoadModel(ctx context.Context, model string, hub HubOptions, opts Options) (*Tokenizer, error) {
	if !strings.HasPrefix(model, HubPrefix) {
		return Load(model, opts)
	}
	dir, err := fetchHub(ctx, model, hub)
	if err != nil {
		return nil, err
	}
	return Load(dir, opts)
}

// ParseHubModel splits a Hub model given as "hf:<org>/<model>[@revision]" into its repository
// id and revision ("main" when none is given); ok is false when model is not a Hub model,
// and err names what is wrong with one that is.
func ParseHubModel(model string) (repo, rev string, ok bool, err error) {
	id, ok := strings.CutPrefix(model, HubPrefix)
	if !ok {
		return "", "", false, nil
	}
	repo, rev, _ = strings.Cut(id, "@")
	if rev == "" {
		rev = "main"
	}
	if !hubRepoID.MatchString(repo) || strings.Contains(repo, "..") || strings.ContainsAny(rev, `/\`) || strings.Contains(rev, "..") {
		return "", "", true, fmt.Errorf("tokenizer: hub model %q: want hf:<org>/<model>[@revision]", id)
	}
	return repo, rev, true, nil
}

func fetchHub(ctx context.Context, model string, o HubOptions) (string, error) {
	repo, rev, _, err := ParseHubModel(model)
	if err != nil {
		return "", err
	}
	id := strings.TrimPrefix(model, HubPrefix)
	if o.CacheDir == "" {
		return "", fmt.Errorf("tokenizer: hub model %q: no cache directory", id)
	}
	repoDir := filepath.Join(o.CacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	if dir, ok := cachedSnapshot(repoDir, rev); ok {
		return dir, nil
	}
	if o.Offline {
		return "", fmt.Errorf("tokenizer: hub model %q@%s is not in %s and offline mode is on", repo, rev, o.CacheDir)
	}
	return downloadHub(ctx, repo, rev, repoDir, o)
}

// cachedSnapshot returns the snapshot directory for rev when its tokenizer.json is present.
func cachedSnapshot(repoDir, rev string) (string, bool) {
	commit := rev
	if ref, err := os.ReadFile(filepath.Join(repoDir, "refs", rev)); err == nil {
		commit = strings.TrimSpace(string(ref))
	}
	dir := filepath.Join(repoDir, "snapshots", commit)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return "", false
	}
	return dir, true
}

func downloadHub(ctx context.Context, repo, rev, repoDir string, o HubOptions) (string, error) {
	endpoint := strings.TrimRight(o.Endpoint, "/")
	if endpoint == "" {
		endpoint = "https://huggingface.co"
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	tmp, err := os.MkdirTemp(o.CacheDir, ".download-")
	if err != nil {
		if err = os.MkdirAll(o.CacheDir, 0o755); err == nil {
			tmp, err = os.MkdirTemp(o.CacheDir, ".download-")
		}
		if err != nil {
			return "", fmt.Errorf("tokenizer: hub cache %s: %w", o.CacheDir, err)
		}
	}
	defer os.RemoveAll(tmp)
	commit := ""
	for _, f := range hubFiles {
		u := fmt.Sprintf("%s/%s/resolve/%s/%s", endpoint, repo, url.PathEscape(rev), f.name)
		c, err := downloadFile(ctx, client, u, o.Token, filepath.Join(tmp, f.name))
		if errors.Is(err, errNotFound) && !f.required {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("tokenizer: hub download %s: %w", u, err)
		}
		if commit == "" {
			commit = c
		}
	}
	if commit == "" || strings.ContainsAny(commit, `/\`) || strings.Contains(commit, "..") {
		commit = rev
	}
	snap := filepath.Join(repoDir, "snapshots", commit)
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		return "", fmt.Errorf("tokenizer: hub cache %s: %w", snap, err)
	}
	if err := os.Rename(tmp, snap); err != nil {
		// Another process may have stored the same snapshot first.
		if _, ok := cachedSnapshot(repoDir, commit); !ok {
			return "", fmt.Errorf("tokenizer: hub cache %s: %w", snap, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755); err != nil {
		return "", fmt.Errorf("tokenizer: hub cache refs: %w", err)
	}
	if err := os.WriteFile(filepath.Join(repoDir, "refs", rev), []byte(commit), 0o644); err != nil {
		return "", fmt.Errorf("tokenizer: hub cache refs: %w", err)
	}
	return snap, nil
}

var errNotFound = errors.New("not found on the hub")

// downloadFile fetches u into path (bounded by maxTokenizerJSONBytes) and returns
// the X-Repo-Commit header.
func downloadFile(ctx context.Context, client *http.Client, u, token, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", errNotFound
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("status %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, maxTokenizerJSONBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if n > maxTokenizerJSONBytes {
		return "", fmt.Errorf("larger than %d bytes", maxTokenizerJSONBytes)
	}
	return resp.Header.Get("X-Repo-Commit"), nil
}
