package workload

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package is I/O-free and stands alone: no network, files, logging, metrics or project
// imports in non-test files (doc.go).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"net", "os", "log", "log/slog", "github.com/prometheus", "github.com/condisagg"}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s", name, path)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d files", checked)
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
