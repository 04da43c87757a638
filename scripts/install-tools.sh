#!/usr/bin/env bash
# Builds the command-line tools the deploy tests run, from the Go module proxy, into a
# project-local directory, and prints that directory (the only line on stdout).
#
#   scripts/install-tools.sh            # -> /path/to/repo/.tools/bin
#   TOOLS_BIN=/tmp/tools scripts/install-tools.sh
#
#   helm      helm.sh/helm/v4/cmd/helm@v4.3.2                          (~1.5-8 min to build once)
#   promtool  github.com/prometheus/prometheus/cmd/promtool@v0.316.0    (~3-8 min to build once)
#
# Idempotent: a tool whose binary already records the pinned module version (go version -m) is
# not rebuilt, so a second run takes well under a second. deploy/internal/tools finds the
# binaries the same way ($HELM_BIN / $PROMTOOL_BIN, else $TOOLS_BIN, else <repo>/.tools/bin).
set -euo pipefail

# shellcheck source=scripts/tools-lib.sh
source "$(dirname "$0")/tools-lib.sh"

log() { echo "install-tools: $*" >&2; }

# install NAME MODULE PACKAGE VERSION
install() {
  local name="$1" module="$2" pkg="$3" version="$4"
  if pinned "$name" "$module" "$version"; then
    return 0
  fi
  log "building $name $version from the Go module proxy into $bin"
  local start=$SECONDS
  GOBIN="$bin" go install "$pkg@$version"
  log "$name $version built in $((SECONDS - start))s"
}

install helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm v4.3.2
install promtool github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool v0.316.0
echo "$bin"
