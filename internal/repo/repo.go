package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNoRoot means no directory at or above the working directory holds go.mod.
var ErrNoRoot = errors.New("repo: no go.mod at or above the working directory")

// Root returns the nearest directory at or above the working directory that holds go.mod.
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo: root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("%w (from %s)", ErrNoRoot, wd)
		}
		dir = up
	}
}
