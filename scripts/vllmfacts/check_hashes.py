"""Fact (d) of docs/vllm-facts.md, checked offline against the captured
fixtures: recompute the engine's block hashes from token ids alone.

    .cache/vllm-venv/bin/python scripts/vllmfacts/check_hashes.py [--fixtures kvevents/testdata/vllm032]
        [--lora-path PATH]

The LoRA adapter's path is part of the hash, so it must be the path the engine loaded
it from when the fixtures were captured: each store_lora* fixture records it in its
lora_path field (the default); --lora-path overrides it.

Model of the default (--prefix-caching-hash-algo sha256) that this checks:
    digest(parent, tokens, extra) = SHA-256(pickle.dumps((parent, tuple(tokens), extra), protocol 5))
    parent of block 0 = SHA-256(pickle.dumps("vllm-none-hash"))     (PYTHONHASHSEED unset)
    wire hash = the digest's last 8 bytes as a big-endian uint64
    extra = None for plain blocks; for block 0 with cache_salt S: (("cache_salt", S),);
            for LoRA name N loaded from path P: (("lora", N, P),) on every block, then the salt.
"""

import argparse
import hashlib
import json
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def digest(obj):
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def chain(tokens, block, extras):
    parent = digest("vllm-none-hash")
    out = []
    for i in range(len(tokens) // block):
        d = digest((parent, tuple(tokens[i * block:(i + 1) * block]), extras(i)))
        out.append(int.from_bytes(d, "big") & (2**64 - 1))
        parent = d
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(REPO, "kvevents", "testdata", "vllm032"))
    ap.add_argument("--lora-path", default=None, help="default: the fixture's own lora_path field")
    a = ap.parse_args()
    d = a.fixtures
    cases = {
        "store_plain": lambda i, lora: None,
        "store_after_restart": lambda i, lora: None,
        "store_cache_salt": lambda i, lora: (("cache_salt", "tenant-a"),) if i == 0 else None,
        "store_lora": lambda i, lora: (("lora", "sql-lora", lora),),
        "store_lora_cache_salt": lambda i, lora: (("lora", "sql-lora", lora),) + ((("cache_salt", "tenant-a"),) if i == 0 else ()),
    }
    ok = True
    for name, extras in cases.items():
        with open(os.path.join(d, name + ".json")) as f:
            fixture = json.load(f)
        ev = fixture["batch"][1][0]
        lora = a.lora_path or fixture.get("lora_path")
        got = chain(ev["token_ids"], ev["block_size"], lambda i: extras(i, lora))
        match = got == ev["block_hashes"]
        ok &= match
        print(f"{name}: wire {ev['block_hashes']} recomputed {got} -> {'MATCH' if match else 'DIFFERENT'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
