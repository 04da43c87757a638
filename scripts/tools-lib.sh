# Sourced by scripts/install-tools.sh and scripts/install-kube-tools.sh: the project-local tools
# directory ($TOOLS_BIN, else <repo>/.tools/bin; printed by the caller) and the check that a
# binary is already built at its pinned version.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${TOOLS_BIN:-$root/.tools/bin}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
mkdir -p "$bin"

# pinned NAME MODULE VERSION: $bin/NAME exists and records MODULE at VERSION (go version -m),
# as its main module or as a dependency.
pinned() {
  [ -x "$bin/$1" ] && go version -m "$bin/$1" 2>/dev/null |
    grep -qE "^[[:space:]]+(mod|dep)[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)"
}
