package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTool: $<env> wins (and must be executable), then $TOOLS_BIN, then <root>/.tools/bin; a
// tool in none of them is ErrNoTool naming every path tried.
func TestTool(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "mytool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MYTOOL_BIN", exe)
	if p, err := Tool("mytool", "MYTOOL_BIN"); err != nil || p != exe {
		t.Fatalf("from the env: %q, %v", p, err)
	}
	t.Setenv("MYTOOL_BIN", plain)
	if _, err := Tool("mytool", "MYTOOL_BIN"); err == nil || errors.Is(err, ErrNoTool) || !strings.Contains(err.Error(), "MYTOOL_BIN=") {
		t.Fatalf("a non-executable $MYTOOL_BIN: %v", err)
	}
	t.Setenv("MYTOOL_BIN", "")
	t.Setenv("TOOLS_BIN", dir)
	if p, err := Tool("mytool", "MYTOOL_BIN"); err != nil || p != exe {
		t.Fatalf("from TOOLS_BIN: %q, %v", p, err)
	}
	_, err := Tool("nosuchtool-xyz", "MYTOOL_BIN")
	if !errors.Is(err, ErrNoTool) || !strings.Contains(err.Error(), filepath.Join(dir, "nosuchtool-xyz")) ||
		!strings.Contains(err.Error(), filepath.Join(".tools", "bin", "nosuchtool-xyz")) {
		t.Fatalf("a missing tool: %v", err)
	}
	if err := Executable(dir); err == nil {
		t.Fatal("a directory is executable")
	}
}
