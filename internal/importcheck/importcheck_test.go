package importcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMatchRules(t *testing.T) {
	cases := []struct {
		path   string
		denied []string
		want   bool
	}{
		{"net", []string{"net"}, true},
		{"net/http", []string{"net"}, true},
		{"net/netip", []string{"net"}, true},
		{"netip", []string{"net"}, false},
		{"os", []string{"net"}, false},
		{"github.com/prometheus/client_golang/prometheus", []string{"github.com/prometheus/"}, true},
		{"github.com/prometheusx", []string{"github.com/prometheus/"}, false},
		{"github.com/condisagg/condisagg/kvindex", []string{"github.com/condisagg/condisagg/kvindex"}, true},
		{"github.com/condisagg/condisagg/kvindexer", []string{"github.com/condisagg/condisagg/kvindex"}, false},
	}
	for _, c := range cases {
		if _, got := match(c.path, c.denied); got != c.want {
			t.Errorf("match(%q, %q) = %v, want %v", c.path, c.denied, got, c.want)
		}
	}
}

// recorder captures Errorf calls so Deny's verdict can be checked without failing this test.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errors = append(r.errors, format) }
func (r *recorder) Helper()                           {}

func TestDenyReportsEachDeniedImport(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport (\n\t\"fmt\"\n\t\"net/http\"\n\t\"os\"\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "a.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package p\n\nimport \"net\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := SourceFiles(t, dir)
	if len(files) != 1 || !strings.HasSuffix(files[0], "a.go") {
		t.Fatalf("SourceFiles = %q, want only a.go", files)
	}
	r := &recorder{TB: t}
	Deny(r, files, "net", "os")
	if len(r.errors) != 2 {
		t.Fatalf("want 2 denied imports reported, got %d", len(r.errors))
	}
	r = &recorder{TB: t}
	Deny(r, files, "log")
	if len(r.errors) != 0 {
		t.Fatalf("nothing denied, got %d reports", len(r.errors))
	}
}
