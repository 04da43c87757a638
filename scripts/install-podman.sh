#!/usr/bin/env bash
# Installs the container engine `make image-test` runs the images with: Debian 12's podman, and
# runc beside crun (crun 1.8 refuses hosts whose cgroup v1 and v2 controllers are mixed).
# Idempotent. Running containers needs root or user namespaces; building the images does not
# (make image needs none of this).
set -euo pipefail
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-podman: installing ${need[*]} (Debian packages)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
podman --version
