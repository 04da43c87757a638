package kvzmq

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// TestImports keeps the shell a leaf above the core (ARCHITECTURE §3): of the project it may
// import kvevents, and kvindex for the index handle it passes to each Applier, nothing else.
func TestImports(t *testing.T) {
	const project = "github.com/condisagg/condisagg/"
	allowed := map[string]bool{project + "kvevents": true, project + "kvindex": true}
	for _, file := range importcheck.SourceFiles(t, ".") {
		for _, imp := range importcheck.Imports(t, file) {
			if strings.HasPrefix(imp, project) && !allowed[imp] {
				t.Errorf("%s imports %q: kvzmq may import only kvevents and kvindex of the project", file, imp)
			}
		}
	}
}
