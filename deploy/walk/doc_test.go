package walk

import (
	"regexp"
	"strings"
	"testing"
)

// notRun marks a command of docs/deploy.md that the walk does not run, followed by the reason,
// in the command's trailing comment: `kubectl -n llm rollout status ... # not run here: needs a kubelet`.
const notRun = "not run here:"

// command is one shell command of docs/deploy.md's `sh` blocks.
type command struct {
	line    int    // its first line in docs/deploy.md
	section string // the heading above it
	text    string // its continuation lines joined, comments removed
	skip    string // the reason after notRun; "" when the walk runs it
}

// cluster reports whether c talks to the cluster: kubectl, helm install or uninstall, or a
// command substitution of kubectl.
func (c command) cluster() bool {
	return strings.HasPrefix(c.text, "kubectl ") || strings.HasPrefix(c.text, "helm install ") ||
		strings.HasPrefix(c.text, "helm uninstall ") || strings.Contains(c.text, "$(kubectl ")
}

// reachesPods reports whether c talks to a running pod (through a port-forward or a gateway).
func (c command) reachesPods() bool {
	return strings.HasPrefix(c.text, "curl ") || strings.HasPrefix(c.text, "bin/condisagg ")
}

// gatewayFile is the values file a section is about: "### 5a. Plain Envoy (`plain-envoy.yaml`)".
var gatewayFile = regexp.MustCompile("\\(`([a-z-]+)\\.yaml`\\)")

// parseDoc returns the commands of every `sh` block, in order. A line ending in a backslash
// continues on the next; the text after " #" on a line is a comment.
func parseDoc(doc string) []command {
	var out []command
	var cur *command
	section, inFence, inShell := "", false, false
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"): // also a block inside a list item
			inFence = !inFence
			inShell = inFence && strings.HasPrefix(strings.TrimSpace(line), "```sh")
			continue
		case !inFence && strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
			continue
		case !inShell:
			continue
		}
		comment := ""
		if j := strings.Index(line, " #"); j >= 0 {
			line, comment = line[:j], line[j+2:]
		} else if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue // a comment line of the block
		}
		line = strings.TrimSpace(line)
		if cur == nil {
			if line == "" {
				continue
			}
			cur = &command{line: i + 1, section: section}
		}
		if k := strings.Index(comment, notRun); k >= 0 {
			cur.skip = strings.TrimSpace(comment[k+len(notRun):])
		}
		cont := strings.HasSuffix(line, "\\")
		cur.text = strings.TrimSpace(cur.text + " " + strings.TrimSuffix(line, "\\"))
		if !cont {
			cur.text = strings.Join(strings.Fields(cur.text), " ")
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// TestParseDoc: continuation lines join, comments go, a marker is read from any line of a
// command, and each command knows its section.
func TestParseDoc(t *testing.T) {
	doc := "## 5. Install\n\n```yaml\n# not a heading\n```\n```sh\nkubectl -n llm create secret generic x \\\n" +
		"  --from-literal=token=\"$(openssl rand -hex 32)\"    # the token\n" +
		"# a comment line\n" +
		"kubectl -n llm rollout status deployment/condisagg   # not run here: needs a kubelet\n```\n" +
		"### 5a. Plain Envoy (`plain-envoy.yaml`)\n```sh\ncurl -s http://$GW/ \\\n  -d @req.json  # not run here: needs a kubelet (running pods)\n```\n" +
		"- **Config changes.** restart:\n\n  ```sh\n  kubectl -n llm rollout restart deployment/condisagg\n  ```\n"
	got := parseDoc(doc)
	want := []command{
		{line: 7, section: "5. Install", text: `kubectl -n llm create secret generic x --from-literal=token="$(openssl rand -hex 32)"`},
		{line: 10, section: "5. Install", text: "kubectl -n llm rollout status deployment/condisagg", skip: "needs a kubelet"},
		{line: 14, section: "5a. Plain Envoy (`plain-envoy.yaml`)", text: "curl -s http://$GW/ -d @req.json", skip: "needs a kubelet (running pods)"},
		{line: 20, section: "5a. Plain Envoy (`plain-envoy.yaml`)", text: "kubectl -n llm rollout restart deployment/condisagg"},
	}
	if len(got) != len(want) {
		t.Fatalf("parseDoc = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("command %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	if !got[0].cluster() || got[2].cluster() || !got[2].reachesPods() {
		t.Errorf("classification: %v %v %v", got[0].cluster(), got[2].cluster(), got[2].reachesPods())
	}
	if m := gatewayFile.FindStringSubmatch(got[2].section); m == nil || m[1] != "plain-envoy" {
		t.Errorf("gateway file of %q = %v", got[2].section, m)
	}
}
