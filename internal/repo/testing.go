package repo

import (
	"os"
	"path/filepath"
	"testing"
)

// TestModel is Model for tests: the directory of the named test tokenizer model, or a fatal
// error that says how to fetch it.
func TestModel(t testing.TB, name string) string {
	t.Helper()
	dir, err := Model(name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteFile writes text to dir/name for a test and returns the path.
func WriteFile(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
