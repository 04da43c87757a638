#!/usr/bin/env python3
"""Drive llm-d's inference simulator and `condisagg serve` (bound KV event socket) with a corpus
of prompts sharing prefixes, and compare per probe the simulator's own cached_tokens with
condisagg's overlap for the same token ids.

Before each request the prompt is tokenized by the simulator (/tokenize), condisagg explains a
completions body of those token ids (so both sides key the same tokens whatever the
simulator's tokenizer), then the simulator serves the prompt and reports cached_tokens, which
counts every cached full block (a prompt entirely cached reports all its tokens, unlike vLLM),
so the expected value is overlap_blocks * block_size. The simulator publishes its events at
most every second (its batching delay), so each probe waits --settle after its request.

Standard library only. Usage: probe.py --sim http://127.0.0.1:18000 --condisagg BIN
--admin 127.0.0.1:19003 --worker sim-0 [--probes 120] [--seed 1] [--require-all]
"""
import argparse
import json
import random
import subprocess
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def overlap_blocks(args, ids):
    body = json.dumps({"model": args.model, "prompt": ids})
    out = subprocess.run([args.condisagg, "explain", "--addr", args.admin, "--path", "/v1/completions",
                          "--body", "@-", "-o", "json"], input=body, capture_output=True, text=True, check=True)
    for o in json.loads(out.stdout).get("overlaps", []):
        if o.get("worker") == args.worker:
            return int(o.get("gpuBlocks", 0))
    return 0


def corpus(n, seed):
    """Prompts that share prefixes: conversations grow turn by turn, some restart, some are fresh."""
    rnd = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
             "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
    convs = []
    for _ in range(n):
        r = rnd.random()
        if convs and r < 0.6:
            i = rnd.randrange(len(convs))
            convs[i] += " " + " ".join(rnd.choice(words) + str(rnd.randrange(100)) for _ in range(rnd.randrange(8, 60)))
            yield convs[i]
        elif convs and r < 0.75:
            yield rnd.choice(convs)  # a repeat: everything cached but the last block
        else:
            convs.append(" ".join(rnd.choice(words) + str(rnd.randrange(100)) for _ in range(rnd.randrange(20, 200))))
            yield convs[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim", required=True)
    ap.add_argument("--condisagg", required=True)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--worker", default="sim-0")
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--probes", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--require-all", action="store_true",
                    help="fail unless every probe agrees (else fail only on an over-credit: condisagg above the simulator)")
    ap.add_argument("--settle", type=float, default=1.3, help="seconds for the events of a request to reach condisagg (the simulator's batching delay is 1 s)")
    args = ap.parse_args()
    bs = args.block_size
    agree = over = 0
    rows = []
    for k, prompt in enumerate(corpus(args.probes, args.seed)):
        ids = post(args.sim + "/tokenize", {"model": args.model, "prompt": prompt})["tokens"]
        blocks = overlap_blocks(args, ids)
        usage = post(args.sim + "/v1/completions", {"model": args.model, "prompt": prompt, "max_tokens": 1})["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        want = blocks * bs
        ok = want == cached
        agree += ok
        over += want > cached
        rows.append({"probe": k, "tokens": len(ids), "overlap_blocks": blocks, "condisagg_tokens": want, "sim_cached_tokens": cached, "agree": ok})
        if not ok:
            print(f"probe {k}: {len(ids)} tokens, condisagg {blocks} blocks = {want} tokens, simulator cached {cached}", file=sys.stderr)
        time.sleep(args.settle)  # the simulator batches its events; let them reach the index
    print(json.dumps({"probes": len(rows), "agree": agree, "rows": rows}))
    print(f"{agree}/{len(rows)} probes agree, {over} over-credited", file=sys.stderr)
    if over or (args.require_all and agree != len(rows)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
