package repo

import (
	"fmt"
	"os"
	"path/filepath"
)

// Model returns the directory of a test tokenizer model ("qwen3", "llama3") that
// tokenizer/testdata/fetch_models.sh downloads (make deps runs it), or an error that says so.
func Model(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "tokenizer", "testdata", "models", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return "", fmt.Errorf("repo: tokenizer model %s missing under %s (%v): run tokenizer/testdata/fetch_models.sh (make deps does)", name, dir, err)
	}
	return dir, nil
}
