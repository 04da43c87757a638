package workload

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// The package is I/O-free and stands alone: no network, files, logging, metrics, and of the
// project only the internal/splitmix leaf, in non-test files (doc.go).
func TestImports(t *testing.T) {
	files := importcheck.SourceFiles(t, ".")
	importcheck.Deny(t, files, "net", "os", "log", "github.com/prometheus")
	const project = "github.com/condisagg/condisagg/"
	for _, f := range files {
		for _, imp := range importcheck.Imports(t, f) {
			if strings.HasPrefix(imp, project) && imp != project+"internal/splitmix" {
				t.Errorf("%s imports %q: workload may import only internal/splitmix of the project", f, imp)
			}
		}
	}
}

func FuzzReadAzure(f *testing.F) {
	f.Add(readFixture(f, "testdata/azure2023_conv_head100.csv")[:400])
	f.Add([]byte("2023-11-16 18:15:46.68,5,1\n2023-11-16 18:15:46.7,0,1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, _ := ReadAzure(strings.NewReader(string(data)), AzureOptions{Seed: 1, PrefixGroups: 2, PrefixTokens: 3}, Window{})
		if len(reqs) > strings.Count(string(data), "\n")+1 {
			t.Fatalf("%d requests from %d lines", len(reqs), strings.Count(string(data), "\n")+1)
		}
		for i, r := range reqs {
			if r.Index != i || segmentsLen(r.Prompt) != r.InputTokens || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
				t.Fatalf("request %d malformed: %+v", i, r)
			}
		}
	})
}
