package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/internal/repo"
)

// helmLine is a helm install or template command of a shell block, with its continuation lines
// joined.
var helmLine = regexp.MustCompile(`(?m)^helm (install|template) .*$`)

// TestDeployDocCommands: every `helm install` and `helm template` command docs/deploy.md tells an
// operator to run renders, as written, with the repository's charts and values files (install
// is rendered with `helm template`, the same chart code without a cluster). A `<gateway>`
// placeholder is tried with every gateway values file. A command that names a file the
// repository lacks, a misspelt value or a chart failure fails the test.
func TestDeployDocCommands(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	inShell := false
	var joined []string
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inShell = true
			continue
		case strings.HasPrefix(line, "```"):
			inShell = false
			continue
		case !inShell:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i] // a comment after the command
		}
		line = strings.TrimSpace(line)
		if len(joined) > 0 || strings.HasPrefix(line, "helm ") {
			joined = append(joined, strings.TrimSuffix(line, "\\"))
			if !strings.HasSuffix(line, "\\") {
				cmds = append(cmds, strings.Join(strings.Fields(strings.Join(joined, " ")), " "))
				joined = nil
			}
		}
	}
	var helm []string
	for _, c := range cmds {
		if helmLine.MatchString(c) {
			helm = append(helm, c)
		}
	}
	if len(helm) < 4 {
		t.Fatalf("found %d helm install/template commands in docs/deploy.md: %q", len(helm), helm)
	}
	gateways, err := filepath.Glob(filepath.Join(root, "deploy", "helm", "examples", "*.yaml"))
	if err != nil || len(gateways) == 0 {
		t.Fatalf("gateway values files: %v", err)
	}
	ran := 0
	defer func() { t.Logf("%d renders of %d commands", ran, len(helm)) }()
	for _, c := range helm {
		variants := []string{c}
		if strings.Contains(c, "<gateway>") {
			variants = nil
			for _, g := range gateways {
				if name := strings.TrimSuffix(filepath.Base(g), ".yaml"); name != "common" {
					variants = append(variants, strings.ReplaceAll(c, "<gateway>", name))
				}
			}
		}
		for _, v := range variants {
			args := strings.Fields(v)[1:] // without "helm"
			args[0] = "template"
			for i, a := range args {
				if strings.HasPrefix(a, "deploy/") { // paths are the repository root's
					args[i] = filepath.Join(root, a)
				}
			}
			want := "kind: Deployment" // an install renders the workload
			if strings.Contains(v, "--show-only") {
				want = "kind: " // one chosen object
			}
			if out, err := helmRun(t, args...); err != nil {
				t.Errorf("docs/deploy.md: %s\n%v", v, err)
			} else if !strings.Contains(string(out), want) {
				t.Errorf("docs/deploy.md: %s renders no %q", v, want)
			}
			ran++
		}
	}
}
