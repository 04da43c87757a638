#!/usr/bin/env bash
# Builds a real Kubernetes API server, its etcd and kubectl from the Go module proxy, for the
# tests against a real API server (pool/kube TestAPIServer: EndpointSlice discovery; deploy/walk
# TestDeployWalk: docs/deploy.md's helm and kubectl commands; `make test-kube`), into the
# project-local tools directory, and prints that directory.
#
#   scripts/install-kube-tools.sh            # -> /path/to/repo/.tools/bin
#   TOOLS_BIN=/tmp/tools scripts/install-kube-tools.sh
#
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver v1.37.2   (11-17 min on 2 loaded cores, once;
#                                                                   49 min at a load average of 20-28)
#   etcd            go.etcd.io/etcd/server/v3/etcdmain v3.7.0      (~30 s)
#   kubectl         k8s.io/kubernetes/cmd/kubectl v1.37.2          (~7 min, beside kube-apiserver's build)
#
# All three come from the module scripts/kubeapiserver, whose replace directives point Kubernetes'
# k8s.io/* staging modules at their published versions (go install pkg@version refuses a
# module with replace directives). Idempotent: a binary that records the pinned version
# (go version -m), and for the Kubernetes binaries reports it, is not rebuilt. This is not part
# of `make deps`: the build takes longer than `make test` allows, so the tests skip when the
# binaries are absent (make test-kube builds them and requires the tests to run).
set -euo pipefail

# shellcheck source=scripts/tools-lib.sh
source "$(dirname "$0")/tools-lib.sh"

log() { echo "install-kube-tools: $*" >&2; }

# k8s_ldflags VERSION: the version Kubernetes' own build stamps into its binaries
# (hack/lib/version.sh). Without it they report v0.0.0-master, and helm refuses to install a
# chart whose kubeVersion (>=1.27) that does not satisfy.
k8s_ldflags() {
  local v="$1" major minor flags="" pkg
  major="${v#v}" && major="${major%%.*}"
  minor="${v#v*.}" && minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "${flags# }"
}

# stamped NAME VERSION: the Kubernetes binary NAME reports VERSION (-trimpath builds do not
# record their ldflags, so the binary is asked).
stamped() {
  case "$1" in
    kubectl) "$bin/kubectl" version --client 2>/dev/null | grep -qx "Client Version: $2" ;;
    *) "$bin/$1" --version 2>/dev/null | grep -qx "Kubernetes $2" ;;
  esac
}

# build NAME PACKAGE MODULE VERSION [LDFLAGS]: with LDFLAGS (a Kubernetes binary) the binary is
# kept only if it reports VERSION; an unstamped one is relinked (its packages are in the build
# cache).
build() {
  local name="$1" pkg="$2" module="$3" version="$4" ldflags="${5:-}"
  if pinned "$name" "$module" "$version" && { [ -z "$ldflags" ] || stamped "$name" "$version"; }; then
    return 0
  fi
  log "building $name ($module $version) from the Go module proxy into $bin"
  local start=$SECONDS
  (cd "$root/scripts/kubeapiserver" && go build -trimpath -ldflags="$ldflags" -o "$bin/$name" "$pkg")
  log "$name built in $((SECONDS - start))s"
}

k8s=v1.37.2
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes "$k8s" "$(k8s_ldflags "$k8s")"
build etcd ./etcd go.etcd.io/etcd/server/v3 v3.7.0
build kubectl k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes "$k8s" "$(k8s_ldflags "$k8s")"
echo "$bin"
