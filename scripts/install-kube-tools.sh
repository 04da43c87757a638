#!/usr/bin/env bash
# Builds a real Kubernetes API server and its etcd from the Go module proxy, for the
# EndpointSlice discovery test against a real API server (pool/kube TestAPIServer,
# `make test-kube`), into the project-local tools directory, and prints that directory.
#
#   scripts/install-kube-tools.sh            # -> /path/to/repo/.tools/bin
#   TOOLS_BIN=/tmp/tools scripts/install-kube-tools.sh
#
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver v1.37.2   (~11 min on 2 loaded cores, once)
#   etcd            go.etcd.io/etcd/server/v3/etcdmain v3.7.0      (~30 s)
#
# Both come from the module scripts/kubeapiserver, whose replace directives point Kubernetes'
# k8s.io/* staging modules at their published versions (go install pkg@version refuses a
# module with replace directives). Idempotent: a binary that records the pinned version
# (go version -m) is not rebuilt. This is not part of `make deps`: the build takes longer than
# `make test` allows, so the test skips when the binaries are absent (make test-kube builds
# them and requires the test to run).
set -euo pipefail

# shellcheck source=scripts/tools-lib.sh
source "$(dirname "$0")/tools-lib.sh"

log() { echo "install-kube-tools: $*" >&2; }

# build NAME PACKAGE MODULE VERSION
build() {
  local name="$1" pkg="$2" module="$3" version="$4"
  if pinned "$name" "$module" "$version"; then
    return 0
  fi
  log "building $name ($module $version) from the Go module proxy into $bin"
  local start=$SECONDS
  (cd "$root/scripts/kubeapiserver" && go build -trimpath -o "$bin/$name" "$pkg")
  log "$name built in $((SECONDS - start))s"
}

build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes v1.37.2
build etcd ./etcd go.etcd.io/etcd/server/v3 v3.7.0
echo "$bin"
