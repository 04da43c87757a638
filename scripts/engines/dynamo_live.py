#!/usr/bin/env python3
"""Dynamo's TRT-LLM KV event publisher against `condisagg serve`, live.

TensorRT-LLM cannot be installed here (its PyPI wheel is a stub that downloads from another
index), so the driver plays the engine: it keeps TRT-LLM's block tree (blocks keyed by their
namespace, adapter and cache_salt, and their token prefix; only leaf blocks are evicted, as
TRT-LLM's radix tree does) and feeds ai-dynamo's own `dynamo.trtllm.publisher.Publisher` the
event dicts TRT-LLM's `get_latest_kv_cache_events` returns: a `created` event with
`window_size` first, then `stored` (full blocks and the partial tail, `cache_salt` on every
block of a salted request, `lora_name` for an adapter) and `removed`. Dynamo's publisher
converts them and sends them on its own ZmqKvEventPublisher, to which condisagg serve subscribes
as an `engine: trtllm-dynamo` worker. After each step the driver waits until condisagg has
applied every batch, then compares per probe the tree's longest cached prefix with condisagg's
GPU overlap (POST /debug/explain). Dynamo's publisher has no replay socket and no clear event.

Prints one JSON line of totals; exit status 1 on any disagreement.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router import Router, free_port  # noqa: E402

LORA = "sql-lora"
SALTS = [None, None, None, "tenant-a", "tenant-b"]


class EngineTree:
    """TRT-LLM's cached blocks as the engine would hold them."""

    def __init__(self, bs, rnd):
        self.bs = bs
        self.rnd = rnd
        self.blocks = {}  # (ns, prefix tuple) -> hash
        self.children = {}  # (ns, prefix tuple) -> number of cached child blocks
        self.event_id = 0

    def hash(self, ns, prefix):
        return int.from_bytes(hashlib.sha256(repr((ns, prefix)).encode()).digest()[:8], "little") >> 1

    def event(self, data):
        self.event_id += 1
        return {"event_id": self.event_id, "window_size": 4096, "attention_dp_rank": 0, "data": data}

    def store(self, toks, salt, lora):
        ns, bs = (lora, salt), self.bs
        n = len(toks) // bs
        first = 0
        while first < n and (ns, tuple(toks[: (first + 1) * bs])) in self.blocks:
            first += 1
        parent = self.hash(ns, tuple(toks[: first * bs])) if first else None
        blocks = []
        for i in range(first, n):
            prefix = tuple(toks[: (i + 1) * bs])
            self.blocks[(ns, prefix)] = self.hash(ns, prefix)
            self.children[(ns, prefix)] = 0
            if i:
                self.children[(ns, tuple(toks[: i * bs]))] += 1
            blocks.append(self.block(ns, salt, prefix, toks[i * bs : (i + 1) * bs]))
        if len(toks) > n * bs:  # TRT-LLM reports the partial tail block; Dynamo drops it
            blocks.append(self.block(ns, salt, tuple(toks), toks[n * bs :]))
        if not blocks:
            return None
        data = {"type": "stored", "parent_hash": parent, "blocks": blocks}
        if lora:
            data["lora_name"] = lora
        return self.event(data)

    def block(self, ns, salt, prefix, toks):
        b = {"block_hash": self.hash(ns, prefix), "tokens": [{"token_id": t} for t in toks]}
        if salt is not None:
            b["cache_salt"] = salt
        return b

    def evict(self, k):
        """Removes up to k leaf blocks, one at a time (a freed parent may go next)."""
        hashes = []
        for _ in range(k):
            leaves = [key for key, c in self.children.items() if c == 0]
            if not leaves:
                break
            key = self.rnd.choice(sorted(leaves, key=lambda x: self.blocks[x]))
            ns, prefix = key
            hashes.append(self.blocks.pop(key))
            del self.children[key]
            if len(prefix) > self.bs:
                self.children[(ns, prefix[: -self.bs])] -= 1
        return self.event({"type": "removed", "block_hashes": hashes}) if hashes else None

    def match(self, toks, salt, lora):
        ns, n = (lora, salt), 0
        while (n + 1) * self.bs <= len(toks) and (ns, tuple(toks[: (n + 1) * self.bs])) in self.blocks:
            n += 1
        return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--condisagg", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--block-sizes", default="16,32,1")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    status = 0
    for bs in (int(x) for x in args.block_sizes.split(",")):
        status |= run(args, bs)
    return status


def run(args, bs):
    from importlib.metadata import version

    from dynamo.trtllm.publisher import KvEventPublicationMode, Publisher

    class Engine:
        def get_attention_dp_size(self):
            return 1

    t0 = time.time()
    rnd = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="engines-dynamo-")
    pub_port = free_port()
    grpc, admin_grpc, admin_http = Router.ports()
    cfg = f"""listen: 127.0.0.1:{grpc}
admin_listen: 127.0.0.1:{admin_http}
admin_grpc_listen: 127.0.0.1:{admin_grpc}
pool: {{health_interval: -1s}}
model: {{tokenizer: {args.tokenizer}, block_size: {bs}, lora_adapters: [{LORA}]}}
router: {{kv_events: true}}
workers:
  - {{name: trt-0, role: decode, engine: trtllm-dynamo, endpoint: 127.0.0.1:{free_port()},
     kv_events: "tcp://127.0.0.1:{pub_port}", num_gpu_blocks: 100000}}
"""
    router = Router(args.condisagg, work, cfg, grpc, admin_grpc, admin_http)
    pub = Publisher(endpoint=None, engine=Engine(), worker_id=1, kv_block_size=bs, metrics_labels=[],
                    component_gauges=None, zmq_endpoint=f"tcp://127.0.0.1:{pub_port}",
                    kv_event_publication_mode=KvEventPublicationMode.POLLING, publish_metrics=False)
    eng = EngineTree(bs, rnd)
    pub._handle_zmq_kv_event(eng.event({"type": "created", "num_blocks_per_cache_level": [100000, 0]}))
    router.start()
    time.sleep(0.5)  # no replay socket: the SUB must have joined before the first batch
    seq = -1
    seqs = []

    def fresh(n):
        return [1000 + rnd.randrange(32000) for _ in range(n)]

    stats = {"probes": 0, "agree": 0, "stores": 0, "removes": 0, "batches": 0, "nonzero_truth": 0}
    fails = []
    for step in range(args.steps):
        for _ in range(rnd.randint(1, 3)):
            if rnd.random() < 0.7 or not seqs:
                blocks, tail = rnd.randint(1, 10), (rnd.randrange(bs) if rnd.random() < 0.5 else 0)
                salt, lora = rnd.choice(SALTS), (LORA if rnd.random() < 0.2 else None)
                toks = fresh(blocks * bs + tail)
                if seqs and rnd.random() < 0.6:
                    base = rnd.choice(seqs)
                    toks = base[0][: rnd.randint(1, max(1, len(base[0]) // bs)) * bs] + toks
                    if rnd.random() < 0.8:
                        salt, lora = base[1], base[2]
                seqs.append((toks, salt, lora))
                ev = eng.store(toks, salt, lora)
                stats["stores"] += 1
            else:
                ev = eng.evict(rnd.randint(1, 12))
                stats["removes"] += 1
            if ev is None:
                continue
            pub._handle_zmq_kv_event(ev)
            # Dynamo publishes one message per stored event with a full block, one per removed.
            if ev["data"]["type"] == "removed" or any(len(b["tokens"]) == bs for b in ev["data"]["blocks"]):
                seq += 1
                stats["batches"] += 1
        if seq >= 0:
            router.wait_seq({"trt-0": seq})
        for toks, salt, lora in rnd.sample(seqs, min(len(seqs), 10)):
            for vt, vs in ((toks, salt), (toks, rnd.choice(SALTS)), (toks[: len(toks) // 2] + fresh(bs), salt)):
                want = eng.match(vt, vs, lora)
                have = router.overlaps(vt, vs, lora or "base").get("trt-0", (0, 0))[0]
                stats["probes"] += 1
                stats["nonzero_truth"] += want > 0
                if have == want:
                    stats["agree"] += 1
                elif len(fails) < 20:
                    fails.append({"step": step, "tokens": len(vt), "salt": vs, "lora": lora, "trtllm_blocks": want, "condisagg_blocks": have})
        if len(seqs) > 60:
            seqs[:] = seqs[-60:]
    pub.zmq_kv_event_publisher.shutdown()
    router.stop()
    stats.update({"name": f"dynamo-trtllm block {bs}", "ai-dynamo": version("ai-dynamo"), "block_size": bs,
                  "seconds": round(time.time() - t0, 1), "mismatches": fails})
    print(json.dumps(stats), flush=True)
    return 0 if stats["agree"] == stats["probes"] and stats["probes"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
