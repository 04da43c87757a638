package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
)

// From inside the deploy module, the repository root is still the directory of the root go.mod.
func TestRootIsTheRepository(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "go.mod")); err != nil {
		t.Errorf("Root() = %s; want the directory holding deploy/go.mod: %v", root, err)
	}
}

func TestFindHonoursEnvAndReportsMissing(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "helm")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HELM_BIN", fake)
	if got, err := Find("helm"); err != nil || got != fake {
		t.Errorf("Find(helm) with HELM_BIN = %q, %v; want %q", got, err, fake)
	}
	t.Setenv("HELM_BIN", "")
	t.Setenv("TOOLS_BIN", dir)
	if got, err := Find("helm"); err != nil || got != fake {
		t.Errorf("Find(helm) with TOOLS_BIN = %q, %v; want %q", got, err, fake)
	}
	t.Setenv("TOOLS_BIN", filepath.Join(dir, "empty"))
	t.Setenv("NOSUCHTOOL_BIN", "")
	if _, err := Find("nosuchtool"); !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "install-tools.sh") {
		t.Errorf("Find(nosuchtool) err = %v; want ErrNoBinary naming install-tools.sh", err)
	}
}
