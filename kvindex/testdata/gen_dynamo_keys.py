#!/usr/bin/env python3
"""Per-block hashes of random token sequences from Dynamo's own key function.

Runs ai-dynamo 1.6.1's compiled compute_block_hash_for_seq (dynamo._core, the function Dynamo's
KV router keys requests with) on random sequences, block sizes 1 to 64, with and without a LoRA
adapter name, and writes dynamo_block_hashes.json: per case the tokens, block size, adapter and
Dynamo's hash of every full block. kvindex's TestDynamoBlockHashes checks that condisagg's local
block hash (the value its chained keys are built from) equals Dynamo's for every block.

    "$DYNAMO_VENV"/bin/python gen_dynamo_keys.py [--cases 300] [--seed 25] [--out FILE]

The output is deterministic for a seed, so a second run must leave the committed file unchanged.
"""

import argparse
import json
import random
import re
from importlib.metadata import version

from dynamo._core import compute_block_hash_for_seq

LORAS = ["sql-lora", "a", "tenant/adapter-v2", "ünïcode-lora"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--out", default="dynamo_block_hashes.json")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    cases = []
    for i in range(args.cases):
        bs = rnd.randint(1, 64)
        n = rnd.randint(0, 8) * bs + rnd.randint(0, bs - 1)  # whole blocks and a partial tail
        # Token ids across the whole uint32 range, small ids and repeats as well.
        hi = rnd.choice([100, 50_000, 2**31 - 1, 2**32 - 1])
        toks = [rnd.randint(0, hi) for _ in range(n)]
        lora = rnd.choice(LORAS) if i % 2 else None
        hashes = compute_block_hash_for_seq(toks, bs, lora_name=lora)
        if len(hashes) != n // bs:
            raise SystemExit(f"case {i}: {len(hashes)} hashes for {n} tokens at block size {bs}")
        # Hashes as decimal strings: JSON numbers past 2^53 are not exact in every reader.
        cases.append({"block_size": bs, "lora": lora, "tokens": toks, "hashes": [str(h) for h in hashes]})
    doc = {
        "producer": "dynamo._core.compute_block_hash_for_seq",
        "versions": {"ai-dynamo": version("ai-dynamo"), "ai-dynamo-runtime": version("ai-dynamo-runtime")},
        "seed": args.seed,
        "cases": cases,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*([-\d\",\s]+?)\s*\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", text)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(f"{args.out}: {len(cases)} cases, {sum(len(c['hashes']) for c in cases)} blocks")


if __name__ == "__main__":
    main()
