package sim

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestCoreImports keeps the engine core pure (STYLE.md §2.1): no network, file system,
// logging, metrics or ZeroMQ, so a discrete-event simulator can drive it in virtual time.
func TestCoreImports(t *testing.T) {
	banned := []string{"net", "os", "log", "github.com/prometheus", "github.com/go-zeromq", "sync"}
	for _, name := range []string{"cost.go", "blocks.go", "engine.go", "step.go", "encode.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			for _, b := range banned {
				if p == b || strings.HasPrefix(p, b+"/") {
					t.Errorf("%s imports %s", name, p)
				}
			}
		}
	}
}
