#!/usr/bin/env python3
"""Times Hugging Face tokenizers (Rust) on the conformance text corpus, single
threaded, for comparison with BenchmarkEncodeCorpus.

    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 tokenizer/testdata/bench_hf.py
"""
import gzip
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with gzip.open(os.path.join(HERE, "conformance_texts.jsonl.gz"), "rt") as f:
        texts = [json.loads(line) for line in f]
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sets = {"all": texts, "short": [t for t in texts if len(t.encode()) < 1024]}
    for (m, (set_name, texts)) in [(m, s) for s in sets.items() for m in ["qwen3", "llama3"]]:
        total = sum(len(t.encode()) for t in texts)
        tok = Tokenizer.from_file(os.path.join(HERE, "models", m, "tokenizer.json"))
        tok.encode_batch(texts)  # warm the word cache, as the Go benchmark's b.Loop does
        for name, fn in [("encode", lambda: [tok.encode(t) for t in texts]),
                         ("encode_batch", lambda: tok.encode_batch(texts))]:
            best = None
            tokens = 0
            for _ in range(rounds):
                t0 = time.perf_counter()
                out = fn()
                dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
                tokens = sum(len(e.ids) for e in out)
            print(f"hf/corpus={set_name}/model={m}/{name}: {best * 1e3:.1f} ms/op  {total / best / 1e6:.2f} MB/s  "
                  f"{best * 1e9 / tokens:.1f} ns/token  ({tokens} tokens, {total} bytes, best of {rounds})")


if __name__ == "__main__":
    main()
