#!/usr/bin/env bash
# Runs BenchmarkEncodeCorpus and bench_hf.py back to back (single thread each) and
# prints Go's speed relative to Hugging Face tokenizers per corpus and model.
#   bash tokenizer/testdata/bench_compare.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
go_out="$(GOMAXPROCS=1 go test ./tokenizer/ -run '^$' -bench 'EncodeCorpus' -benchtime "${rounds}x" -count 1)"
hf_out="$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 tokenizer/testdata/bench_hf.py "$rounds")"
echo "$go_out" | grep '^Benchmark'
echo "$hf_out"
echo
printf '%-28s %10s %10s %10s %8s\n' "set" "go MB/s" "hf MB/s" "hf batch" "go/hf"
for set in all short; do
  for m in qwen3 llama3; do
    g="$(echo "$go_out" | awk -v k="corpus=$set/model=$m" '$1 ~ k {for (i=1;i<=NF;i++) if ($(i+1)=="MB/s") print $i}')"
    h="$(echo "$hf_out" | awk -v k="hf/corpus=$set/model=$m/encode:" '$1 == k {for (i=1;i<=NF;i++) if ($(i+1)=="MB/s") print $i}')"
    hb="$(echo "$hf_out" | awk -v k="hf/corpus=$set/model=$m/encode_batch:" '$1 == k {for (i=1;i<=NF;i++) if ($(i+1)=="MB/s") print $i}')"
    best="$(awk -v a="$h" -v b="$hb" 'BEGIN {print (a > b ? a : b)}')"
    printf '%-28s %10s %10s %10s %7.1fx\n' "$set/$m" "$g" "$h" "$hb" "$(awk -v g="$g" -v h="$best" 'BEGIN {print g / h}')"
  done
done
