#!/usr/bin/env bash
# Creates (or checks) the two Python environments of make conformance-engines, every package
# pinned and installed with --no-deps (the lists below are complete):
#   .cache/engines/sglang-venv   sglang 0.5.23 (no engine: its cache and event code only) on top
#                                of the vLLM venv's site-packages (torch 2.13, numpy, pyzmq,
#                                msgspec, pydantic, ...; scripts/vllm-venv.sh builds it when
#                                missing), through a .pth file
#   .cache/engines/dynamo-venv   ai-dynamo 1.6.1 + ai-dynamo-runtime 1.6.1 (CPU-importable)
# SGLang's wheel declares ~100 requirements, most of them CUDA kernels PyPI serves for GPUs
# only; what its RadixCache, KV event recorder and ZMQ publisher import is listed here.
# A stamp per venv records its inputs; a changed list rebuilds it. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# The physical path of .cache: a git worktree may link it to the main checkout's, and the .pth
# file below must name a path that outlives the worktree (else every worktree rebuilds the venv).
mkdir -p "$root/.cache"
cache="$(cd "$root/.cache" && pwd -P)"
dir="$cache/engines"
vllm="$cache/vllm-venv"
log() { echo "engines-venvs: $*" >&2; }

SGLANG_PKGS="sglang==0.5.23 torchvision==0.28.0 triton==3.7.1 dill==0.4.1 gguf==0.19.0 orjson==3.13.0
sentencepiece==0.2.3 xxhash==4.1.0 ipython==9.19.1 asttokens==3.0.2 executing==2.3.0
ipython_pygments_lexers==1.1.1 jedi==0.20.1 matplotlib_inline==0.2.2 parso==0.8.7 pexpect==4.9.0
prompt_toolkit==3.0.53 ptyprocess==0.7.0 pure_eval==0.2.4 stack_data==0.6.3 traitlets==5.16.1 wcwidth==0.9.5"
DYNAMO_PKGS="ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1 msgspec==0.23.0 pyzmq==27.3.0 prometheus_client==0.26.0
pydantic==2.13.5 pydantic_core==2.46.5 annotated_types==0.8.0 typing_extensions==4.16.0 typing_inspection==0.4.5"

# make_venv NAME PYTHON PACKAGES SMOKE [PTH]
make_venv() {
	local venv="$dir/$1" python="$2" pkgs="$3" smoke="$4" pth="${5:-}"
	local want
	want="$(printf '%s\n%s\n' "$pkgs" "$pth" | sha256sum | cut -d' ' -f1)"
	if [ -f "$venv/.condisagg-stamp" ] && [ "$(cat "$venv/.condisagg-stamp")" = "$want" ] &&
		"$venv/bin/python" -c "$smoke" >/dev/null 2>&1; then
		return 0
	fi
	local start
	start=$(date +%s)
	rm -rf "$venv"
	mkdir -p "$dir"
	log "creating $venv"
	"$python" -m venv "$venv"
	if [ -n "$pth" ]; then
		"$venv/bin/python" -c 'import site, sys; open(site.getsitepackages()[0] + "/condisagg-base.pth", "w").write(sys.argv[1] + "\n")' "$pth"
	fi
	# shellcheck disable=SC2086
	"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps $pkgs
	"$venv/bin/python" -c "$smoke"
	echo "$want" >"$venv/.condisagg-stamp"
	log "$1 ready in $(($(date +%s) - start)) s, $(du -sh "$venv" | cut -f1)"
}

VLLM_VENV="$vllm" bash "$root/scripts/vllm-venv.sh"
vllm_site="$("$vllm/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
make_venv sglang-venv "$vllm/bin/python" "$SGLANG_PKGS" \
	'from sglang.srt.mem_cache.radix_cache import RadixCache; from sglang.srt.disaggregation.kv_events import ZmqEventPublisher' "$vllm_site"
make_venv dynamo-venv "$(command -v python3)" "$DYNAMO_PKGS" \
	'from dynamo.trtllm.publisher import Publisher; from dynamo._core import compute_block_hash_for_seq'
