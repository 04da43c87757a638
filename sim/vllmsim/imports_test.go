package vllmsim

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestShellImports keeps the shell on the worker's side of the wire: of the project it may
// import the engine (sim), tokenizer (prompts, chat templates, output words) and kvevents
// (ARCHITECTURE §3 allows it; only the tests use it, to decode what the encoder writes), and
// nothing of the router, so vllm-sim behaves like vLLM and not like condisagg's idea of it.
func TestShellImports(t *testing.T) {
	allowed := map[string]bool{"sim": true, "kvevents": true, "tokenizer": true, "internal/splitmix": true}
	const project = "github.com/condisagg/condisagg/"
	for _, f := range importcheck.SourceFiles(t, ".") {
		for _, imp := range importcheck.Imports(t, f) {
			if rest, ok := strings.CutPrefix(imp, project); ok && !allowed[rest] {
				t.Errorf("%s imports %q: the vllm-sim shell may import only sim, kvevents, tokenizer and internal/splitmix of the project", f, imp)
			}
		}
	}
}
