package tools

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// rootModule is the module path of the repository root's go.mod.
const rootModule = "github.com/condisagg/condisagg"

// ErrNoBinary means a tool is not installed; the message says how to install it.
var ErrNoBinary = errors.New("tools: not installed: run scripts/install-tools.sh (make deps)")

// ErrNoRoot means no directory at or above the working directory holds the root go.mod.
var ErrNoRoot = errors.New("tools: no go.mod of " + rootModule + " at or above the working directory")

// Root returns the condisagg repository root: the nearest directory at or above the working
// directory whose go.mod declares module github.com/condisagg/condisagg.
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("tools: root: %w", err)
	}
	for dir := wd; ; {
		if modulePath(filepath.Join(dir, "go.mod")) == rootModule {
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
		if executable(c) == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: %s (tried %s)", ErrNoBinary, name, strings.Join(candidates, ", "))
}

// Envoy returns the Envoy binary as envoy.FindBinary would from the repository root: $ENVOY_BIN,
// else $ENVOY_VENV/envoy (relative to the root), else <root>/.venv-envoy/envoy.
func Envoy() (string, error) {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return bin, executable(bin)
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	venv := os.Getenv("ENVOY_VENV")
	if venv == "" {
		venv = ".venv-envoy"
	}
	if !filepath.IsAbs(venv) {
		venv = filepath.Join(root, venv)
	}
	bin := filepath.Join(venv, "envoy")
	if err := executable(bin); err != nil {
		return "", fmt.Errorf("tools: no Envoy binary at %s: run scripts/install-envoy.sh (make deps): %w", bin, err)
	}
	return bin, nil
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
