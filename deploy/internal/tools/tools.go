package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/condisagg/condisagg/internal/repo"
)

// ErrNoBinary means a tool is not installed; the message says how to install it.
var ErrNoBinary = errors.New("tools: not installed: run scripts/install-tools.sh (make deps)")

// Find returns the path of tool name ("helm", "promtool"): $<NAME>_BIN if set (HELM_BIN,
// PROMTOOL_BIN), else $TOOLS_BIN/<name> if TOOLS_BIN is set (a relative path is taken from the
// repository root, as scripts/install-tools.sh reads it), else <root>/.tools/bin/<name>. The error
// wraps ErrNoBinary and names the paths tried.
func Find(name string) (string, error) {
	env := strings.ToUpper(name) + "_BIN"
	if bin := os.Getenv(env); bin != "" {
		if err := executable(bin); err != nil {
			return "", fmt.Errorf("%w (%s=%s: %v)", ErrNoBinary, env, bin, err)
		}
		return bin, nil
	}
	root, rootErr := repo.Root()
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
		if executable(c) == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: %s (tried %s)", ErrNoBinary, name, strings.Join(candidates, ", "))
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
