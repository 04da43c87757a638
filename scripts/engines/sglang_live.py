#!/usr/bin/env python3
"""SGLang's own RadixCache and KV event publisher against `condisagg serve`, live.

One RadixCache per data-parallel rank (KV events on, the chosen page size and event format,
EAGLE bigram keys when asked), each with SGLang's ZmqEventPublisher bound on its own PUB and
replay ROUTER ports (SGLang offsets both by the rank, as vLLM does). condisagg serve subscribes
to them as one `engine: sglang` worker with `data_parallel_size` ranks. A seeded corpus of
inserts (salted and unsalted, base model and a LoRA adapter, continuations and branches),
LRU evictions and resets is played; after each step the driver waits until condisagg has
applied every batch published, then for every probe compares SGLang's own
`match_prefix(...).device_prefix_len / page_size` on the rank's cache with condisagg's GPU
overlap for that rank's worker (POST /debug/explain of a completions body of the same token
ids, cache_salt and model). Midway condisagg is SIGKILLed, more batches are published while it
is down, and it is started again: it learns the index from SGLang's replay ROUTER.

Prints one JSON line of totals; exit status 1 on any disagreement.
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time
from array import array
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router import Router, free_port  # noqa: E402

LORA = "sql-lora"
LORA_ID = "5f1c0de5a1b2c3d4e5f60718293a4b5c"
SALTS = [None, None, None, "tenant-a", "tenant-b"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--condisagg", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--runs", default="16:default:1,1:default:1,32:dynamo:1,16:dynamo:2,16:default:1:eagle",
                    help="comma-separated PAGE:FORMAT:DP[:eagle] (one SGLang import for them all)")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t = time.time()

    sg = load()
    imported = round(time.time() - t, 1)
    status = 0
    for spec in args.runs.split(","):
        f = spec.split(":")
        one = SimpleNamespace(page_size=int(f[0]), format=f[1], dp=int(f[2]), eagle=len(f) > 3 and f[3] == "eagle")
        status |= run(sg, args, one, imported)
    return status


def load():
    """SGLang's classes the driver uses (the import takes 30-110 s: do it once)."""
    from importlib.metadata import version

    from sglang.srt.disaggregation.kv_events import KVEventBatch, ZmqEventPublisher
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.events import KvEventLoraNames
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    return SimpleNamespace(version=version("sglang"), KVEventBatch=KVEventBatch, ZmqEventPublisher=ZmqEventPublisher,
                           EvictParams=EvictParams, InsertParams=InsertParams, MatchPrefixParams=MatchPrefixParams,
                           CacheInitParams=CacheInitParams, KvEventLoraNames=KvEventLoraNames, RadixCache=RadixCache,
                           RadixKey=RadixKey)


class Allocator:
    """What RadixCache.evict needs of the token pool: somewhere to free pages to."""

    device = "cpu"

    def free_segment(self, value, start_pos=0):
        pass


def run(sg, args, one, imported):
    t0 = time.time()
    seed = args.seed
    args = SimpleNamespace(**{**vars(args), **vars(one)})
    page = args.page_size
    rnd = random.Random(seed)
    work = tempfile.mkdtemp(prefix="engines-sglang-")
    pub_port = free_port()
    while True:  # ranks use port .. port+dp-1 for PUB and the replay ROUTER each
        rep_port = free_port()
        if abs(rep_port - pub_port) >= args.dp:
            break
    grpc, admin_grpc, admin_http = Router.ports()
    cfg = f"""listen: 127.0.0.1:{grpc}
admin_listen: 127.0.0.1:{admin_http}
admin_grpc_listen: 127.0.0.1:{admin_grpc}
pool: {{health_interval: -1s}}
model: {{tokenizer: {args.tokenizer}, block_size: {page}, lora_adapters: [{LORA}]{", speculative: eagle" if args.eagle else ""}}}
router: {{kv_events: true}}
workers:
  - {{name: sg-0, role: decode, engine: sglang, endpoint: 127.0.0.1:{free_port()}, data_parallel_size: {args.dp},
     kv_events: "tcp://127.0.0.1:{pub_port}", kv_replay: "tcp://127.0.0.1:{rep_port}", num_gpu_blocks: 100000}}
"""
    router = Router(args.condisagg, work, cfg, grpc, admin_grpc, admin_http)
    wid = ["sg-0"] + [f"sg-0/dp{r}" for r in range(1, args.dp)]

    ranks = []
    for r in range(args.dp):
        names = sg.KvEventLoraNames()
        names.register(lora_id=LORA_ID, lora_name=LORA)
        names.register(SimpleNamespace(extra_key=LORA_ID, lora_id=LORA_ID))
        cache = sg.RadixCache(sg.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=Allocator(), page_size=page,
            enable_kv_cache_events=True, dynamo_kv_event_format=(args.format == "dynamo"),
            kv_event_lora_names=names, is_eagle=args.eagle))
        cache.kv_events.take()  # the AllBlocksCleared of construction: nothing to say yet
        pub = sg.ZmqEventPublisher(attn_dp_rank=r, endpoint=f"tcp://127.0.0.1:{pub_port}",
                                replay_endpoint=f"tcp://127.0.0.1:{rep_port}", topic="kv", bind=True)
        ranks.append({"cache": cache, "pub": pub, "seq": -1})

    def publish(r):
        ev = ranks[r]["cache"].kv_events.take()
        if ev:
            ranks[r]["pub"].publish(sg.KVEventBatch(ts=time.time(), events=ev))
            ranks[r]["seq"] += 1
            return 1
        return 0

    def sync():
        router.wait_seq({wid[r]: ranks[r]["seq"] for r in range(args.dp) if ranks[r]["seq"] >= 0})

    def key(toks, salt, lora, limit=None):
        return sg.RadixKey(array("q", toks), LORA_ID if lora else None, limit=limit, cache_salt=salt)

    # Sequences: (tokens, salt, lora, rank). New ones are fresh, continue an old one or branch off it.
    seqs = []

    def fresh(n):
        return [1000 + rnd.randrange(32000) for _ in range(n)]

    def new_seq():
        blocks = rnd.randint(1, 10)
        tail = rnd.randrange(page) if rnd.random() < 0.5 else 0
        salt = rnd.choice(SALTS)
        lora = LORA if rnd.random() < 0.2 else None
        r = rnd.randrange(args.dp)
        if seqs and rnd.random() < 0.6:
            base = rnd.choice(seqs)
            cut = rnd.randint(1, max(1, len(base[0]) // page)) * page if rnd.random() < 0.5 else len(base[0]) // page * page
            toks = base[0][:cut] + fresh(blocks * page + tail)
            if rnd.random() < 0.8:
                salt, lora, r = base[1], base[2], base[3]
        else:
            toks = fresh(blocks * page + tail)
        return toks, salt, lora, r

    stats = {"probes": 0, "agree": 0, "credits": 0, "credits_agree": 0, "inserts": 0, "evictions": 0, "resets": 0, "batches": 0, "nonzero_truth": 0,
             "differences": {}}  # condisagg minus SGLang, in blocks -> probes
    fails = []

    def probe(label):
        picks = rnd.sample(seqs, min(len(seqs), 10))
        for toks, salt, lora, r in picks:
            variants = [(toks, salt, lora), (toks, rnd.choice(SALTS), lora), (toks[: len(toks) // 2] + fresh(page), salt, lora)]
            for vt, vs, vl in variants:
                doc = router.explain(vt, vs, vl or "base")
                got = router.overlaps_of(doc)
                # The credit: the scheduler matches at most len-1 tokens (Req._compute_max_prefix_len,
                # its `limit`); under EAGLE that is len-2 pairs. Against the worker condisagg chose.
                dw = doc.get("decodeWorker", "")
                if dw in wid:
                    rr = wid.index(dw)
                    res = ranks[rr]["cache"].match_prefix(sg.MatchPrefixParams(key=key(vt, vs, vl, limit=len(vt) - 1)))
                    credit = int((doc.get("inputs") or {}).get("cachedTokens", 0))
                    stats["credits"] += 1
                    if credit == res.device_prefix_len:
                        stats["credits_agree"] += 1
                    elif len(fails) < 20:
                        fails.append({"step": label, "rank": rr, "tokens": len(vt), "salt": vs, "lora": vl,
                                      "sglang_credit_tokens": res.device_prefix_len, "condisagg_credit_tokens": credit})
                for rr in range(args.dp):
                    res = ranks[rr]["cache"].match_prefix(sg.MatchPrefixParams(key=key(vt, vs, vl)))
                    n = res.device_prefix_len
                    want = n // page
                    have = got.get(wid[rr], (0, 0))[0]
                    stats["probes"] += 1
                    stats["nonzero_truth"] += want > 0
                    if have == want:
                        stats["agree"] += 1
                    else:
                        d = str(have - want)
                        stats["differences"][d] = stats["differences"].get(d, 0) + 1
                    if have != want and len(fails) < 20:
                        fails.append({"step": label, "rank": rr, "tokens": len(vt), "salt": vs, "lora": vl,
                                      "sglang_blocks": want, "sglang_tokens": n, "condisagg_blocks": have})
                for rr in range(args.dp):
                    if ranks[rr]["cache"].kv_events.take():
                        raise SystemExit("match_prefix recorded events")

    router.start()
    time.sleep(0.3)  # the SUB sockets join; a batch sent before is fetched by the seq check's replay anyway
    restart_at = args.steps // 2
    for step in range(args.steps):
        if step == restart_at:
            router.kill()
        ops = rnd.randint(1, 3)
        for _ in range(ops):
            x = rnd.random()
            if x < 0.7 or not seqs:
                s = new_seq()
                ranks[s[3]]["cache"].insert(sg.InsertParams(key=key(s[0], s[1], s[2])))
                seqs.append(s)
                stats["inserts"] += 1
            elif x < 0.97:
                r = rnd.randrange(args.dp)
                ranks[r]["cache"].evict(sg.EvictParams(num_tokens=rnd.randint(1, 12) * page))
                stats["evictions"] += 1
            else:
                r = rnd.randrange(args.dp)
                ranks[r]["cache"].reset()
                stats["resets"] += 1
        for r in range(args.dp):
            stats["batches"] += publish(r)
        if router.proc is None:
            if step < restart_at + 3:
                continue  # batches published while condisagg is down: only the replay has them
            router.start()
        sync()
        probe(step)
        if len(seqs) > 60:
            seqs[:] = seqs[-60:]
    # The restarted router's replays: > 0 shows it took the batches it missed from the ROUTER.
    stats["replays"] = {w["id"]: int((w.get("events") or {}).get("replays", 0)) for w in router.workers()}
    for r in ranks:
        r["pub"].shutdown()
    router.stop()
    stats.update({
        "import_seconds": imported,
        "name": f"sglang page {page} {args.format} dp{args.dp}{' eagle' if args.eagle else ''}",
        "sglang": sg.version, "page_size": page, "format": args.format, "dp": args.dp, "eagle": args.eagle,
        "router_starts": router.starts, "seconds": round(time.time() - t0, 1), "mismatches": fails,
    })
    print(json.dumps(stats), flush=True)
    ok = stats["agree"] == stats["probes"] > 0 and stats["credits_agree"] == stats["credits"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
