package workload

import (
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/importcheck"
)

// The package is I/O-free and stands alone: no network, files, logging, metrics or project
// imports in non-test files (doc.go).
func TestImports(t *testing.T) {
	importcheck.Deny(t, importcheck.SourceFiles(t, "."), "net", "os", "log", "github.com/prometheus", "github.com/condisagg/")
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
