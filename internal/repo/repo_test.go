package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoot(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Dir(filepath.Dir(here)) // this package is internal/repo
	for _, c := range []struct {
		name, dir string
	}{
		{"from_a_package_directory", here},
		{"from_the_root_itself", want},
		{"from_a_directory_without_go_files", filepath.Join(want, "docs")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(c.dir)
			got, err := Root()
			if err != nil || got != want {
				t.Fatalf("Root() = %q, %v; want %q", got, err, want)
			}
			if b, err := os.ReadFile(filepath.Join(got, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/condisagg/condisagg") {
				t.Errorf("go.mod at %s is not condisagg's: %v", got, err)
			}
		})
	}
}

func TestRootOutsideTheTree(t *testing.T) {
	dir := t.TempDir()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			t.Skipf("%s holds a go.mod above the temp dir", d)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Chdir(dir)
	if _, err := Root(); !errors.Is(err, ErrNoRoot) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Root() error = %v; want ErrNoRoot naming %s", err, dir)
	}
}
