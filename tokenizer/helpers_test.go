package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// modelNames are the model directories fetch_models.sh puts under testdata/models/.
var modelNames = []string{"qwen3", "llama3"}

// loadedModels caches one Tokenizer per model and options for the test binary;
// loading takes most of a second.
type modelKey struct {
	name string
	opts Options
}

var (
	modelsMu sync.Mutex
	models   = map[modelKey]*Tokenizer{}
)

// loadModel loads testdata/models/<name>, failing the test with the fetch
// instructions when the files are missing. With a cache option it returns a
// fresh copy of the shared model with its own segment cache.
func loadModel(t testing.TB, name string, opts Options) *Tokenizer {
	t.Helper()
	if opts.CacheSegments > 0 {
		c := *loadModel(t, name, Options{})
		c.cache = newSegmentCache(opts.CacheSegments, opts.CacheBytes)
		return &c
	}
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if tk, ok := models[modelKey{name, opts}]; ok {
		return tk
	}
	dir := filepath.Join("testdata", "models", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("model %s missing (%v): run tokenizer/testdata/fetch_models.sh (make deps does)", name, err)
	}
	tk, err := Load(dir, opts)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	models[modelKey{name, opts}] = tk
	return tk
}

// readJSONL decodes every line of a gzip JSONL fixture into a fresh T.
func readJSONL[T any](t testing.TB, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("open fixture: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("gzip %s: %v", name, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	var out []T
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s line %d: %v", name, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return out
}

func equalIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// firstDiff returns the first index where a and b differ.
func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
