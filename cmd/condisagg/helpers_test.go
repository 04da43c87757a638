package main

import (
	"os"
	"path/filepath"
	"testing"
)

// modelDir is the Qwen3 tokenizer that tokenizer/testdata/fetch_models.sh downloads.
var modelDir = filepath.Join("..", "..", "tokenizer", "testdata", "models", "qwen3")

func requireModel(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "tokenizer.json")); err != nil {
		t.Fatalf("Qwen3 tokenizer missing under %s (%v): run tokenizer/testdata/fetch_models.sh (make deps does)", abs, err)
	}
	return abs
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const workersYAML = `workers:
  - {name: prefill-0, role: prefill, endpoint: 127.0.0.1:8100, max_num_batched_tokens: 8192}
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, num_gpu_blocks: 40000}
`
