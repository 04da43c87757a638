// Package version says which build a binary is: the release version stamped at link time
// (`make image` passes -ldflags "-X .../internal/version.Version=0.1.0") and the VCS revision,
// stamped the same way or, failing that, read from what the Go toolchain records itself.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Revision are set with -ldflags -X. A plain `go build` leaves Version at "dev";
// Revision then comes from the build info (vcs.revision), which `go build` records in a git
// checkout but not in a source tree without .git (an image build context, a tarball).
var (
	Version  = "dev"
	Revision = ""
)

// Requested reports whether args (without the program name) ask for the version only.
func Requested(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version")
}

// String is the one-line answer to --version: "prog 0.1.0 (revision abc123, go1.26.8)".
func String(prog string) string {
	rev := Revision
	if rev == "" {
		rev = buildRevision()
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("%s %s (revision %s, %s)", prog, Version, rev, runtime.Version())
}

// buildRevision is this binary's BuildRevision.
func buildRevision() string {
	info, _ := debug.ReadBuildInfo()
	return BuildRevision(info)
}

// BuildRevision is the vcs.revision the Go toolchain recorded in info, with "-dirty" when the
// tree had changes; "" without one (or with a nil info).
func BuildRevision(info *debug.BuildInfo) string {
	if info == nil {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
