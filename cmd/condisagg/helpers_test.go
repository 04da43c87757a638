package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
)

// requireModel is the Qwen3 tokenizer directory of the test models.
func requireModel(t *testing.T) string {
	t.Helper()
	dir, err := repo.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	return dir
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
