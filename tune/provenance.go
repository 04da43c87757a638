package tune

import (
	"context"
	"os/exec"
	"runtime/debug"
	"strings"

	"github.com/condisagg/condisagg/internal/version"
)

// Where Commit found the commit, as reports record it.
const (
	CommitFromBuild = "build info vcs.revision"   // stamped into the binary by the Go toolchain
	CommitFromGit   = "git rev-parse HEAD in cwd" // the working directory's repository, not necessarily the binary's source
	CommitUnknown   = "unknown"
)

// Commit names the source of this run, best effort: the VCS revision the Go toolchain stamped
// into the binary, else `git rev-parse HEAD` in the working directory, else "unknown". A tree
// with uncommitted changes to tracked files adds "-dirty": that commit alone does not reproduce
// the run. source says which of the three answered.
func Commit(ctx context.Context) (commit, source string) {
	info, _ := debug.ReadBuildInfo()
	return commitFrom(info, func() (string, error) { return gitHead(ctx) })
}

// commitFrom is Commit with the build info and the git lookup passed in, for tests.
func commitFrom(info *debug.BuildInfo, git func() (string, error)) (commit, source string) {
	if rev := version.BuildRevision(info); rev != "" {
		return rev, CommitFromBuild
	}
	if rev, err := git(); err == nil && rev != "" {
		return rev, CommitFromGit
	}
	return CommitUnknown, CommitUnknown
}

// gitHead asks git for the working directory's HEAD and whether tracked files differ from it.
func gitHead(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--verify", "HEAD").Output()
	if err != nil {
		return "", err
	}
	rev := strings.TrimSpace(string(out))
	if !isHex(rev) {
		return "", nil
	}
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return "", err
	}
	if len(strings.TrimSpace(string(status))) > 0 {
		rev += "-dirty"
	}
	return rev, nil
}

func isHex(s string) bool {
	if len(s) < 7 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
