package tools

import (
	"errors"
	"fmt"
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
	p, err := repo.Tool(name, strings.ToUpper(name)+"_BIN")
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoBinary, err)
	}
	return p, nil
}
