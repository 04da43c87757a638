package repo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is the module path of the repository root's go.mod.
const Module = "github.com/condisagg/condisagg"

// ErrNoRoot means no directory at or above the working directory holds the root go.mod.
var ErrNoRoot = errors.New("repo: no go.mod of " + Module + " at or above the working directory")

// Root returns the repository root: the nearest directory at or above the working directory
// whose go.mod declares Module (so nested modules such as deploy/ find it too).
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo: root: %w", err)
	}
	for dir := wd; ; {
		if modulePath(filepath.Join(dir, "go.mod")) == Module {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("%w (from %s)", ErrNoRoot, wd)
		}
		dir = up
	}
}

// modulePath returns the module path declared by the go.mod at path, or "".
func modulePath(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
