package server

import (
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
)

// requireModel is the Qwen3 tokenizer directory of the test models.
func requireModel(t *testing.T) string { return repo.TestModel(t, "qwen3") }

const workersYAML = `workers:
  - {name: prefill-0, role: prefill, endpoint: 127.0.0.1:8100, max_num_batched_tokens: 8192}
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, num_gpu_blocks: 40000}
`
