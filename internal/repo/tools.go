package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoTool means a tool is in none of the places Tool looks.
var ErrNoTool = errors.New("repo: tool not found")

// Tool returns the path of a binary the install scripts put in the tools directory
// (scripts/tools-lib.sh): $<env> if set, else $TOOLS_BIN/<name> if TOOLS_BIN is set (a relative
// path is taken from the repository root, as the scripts read it), else <root>/.tools/bin/<name>.
// A set $<env> that is not executable is an error naming it; a tool in none of the other places
// is an error wrapping ErrNoTool that names the paths tried.
func Tool(name, env string) (string, error) {
	if bin := os.Getenv(env); bin != "" {
		if err := Executable(bin); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, bin, err)
		}
		return bin, nil
	}
	root, rootErr := Root()
	var candidates []string
	if dir := os.Getenv("TOOLS_BIN"); dir != "" {
		if !filepath.IsAbs(dir) && rootErr == nil {
			dir = filepath.Join(root, dir)
		}
		candidates = append(candidates, filepath.Join(dir, name))
	}
	if rootErr == nil {
		candidates = append(candidates, filepath.Join(root, ".tools", "bin", name))
	}
	for _, c := range candidates {
		if Executable(c) == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: %s (tried %s)", ErrNoTool, name, strings.Join(candidates, ", "))
}

// Executable returns nil if path is a file someone may execute, else why not.
func Executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
