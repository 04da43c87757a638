#!/usr/bin/env python3
"""Record KV event streams from real publisher code, with the producer's own truth.

Two producers, each in its own Python environment (see publishers/README.md):

    python3 gen_publishers.py sglang   # SGLang's RadixCache, KVCacheEventRecorder, ZmqEventPublisher
                                       # (sglang_default, sglang_dynamo, sglang_eagle; or name some)
    python3 gen_publishers.py dynamo   # Dynamo's TRT-LLM Publisher and its ZmqKvEventPublisher

Each run drives the producer through stores (salted and unsalted), evictions and a reset, lets
the producer's own ZeroMQ publisher send every batch over a real TCP socket on 127.0.0.1, and
writes each received message frame by frame (publishers/<stream>.<n>.{topic,seq,payload}.bin)
plus publishers/<stream>.json: the order in which the messages and the probes come, and for
every probe the number of leading blocks the producer itself says are cached.

Truth per producer:
- SGLang: RadixCache.match_prefix of the probe's tokens under its cache_salt (what the engine
  would reuse), in pages; the page size equals the block size.
- Dynamo/TRT-LLM: TRT-LLM cannot run here, so the generator plays the engine. It keeps the
  engine's block tree itself (salt namespace, parent, tokens), feeds TRT-LLM-shaped event dicts
  (a "created" event with window_size first, then "stored"/"removed" with the salt on each block
  as TRT-LLM 1.3 sends it) to Dynamo's Publisher, and the truth is that tree's longest cached
  prefix. The bytes on the wire are Dynamo's.
"""

import hashlib
import json
import os
import re
import sys
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "publishers")
BLOCK = 16
TOPIC = "kv"


def tokens(seed, n):
    """n deterministic token ids in [1000, 33000) (no two sequences share a block by chance)."""
    out = []
    i = 0
    while len(out) < n:
        d = hashlib.sha256(f"{seed}:{i}".encode()).digest()
        for k in range(0, 32, 4):
            out.append(1000 + int.from_bytes(d[k : k + 4], "little") % 32000)
        i += 1
    return out[:n]


# The sequences of the scenario. A has 6 full blocks and a partial tail (page-aligned away).
A = tokens("A", 6 * BLOCK + 4)
AX = A[: 6 * BLOCK] + tokens("X", 2 * BLOCK)  # A's 6 blocks and 2 more
C = A[: 2 * BLOCK] + tokens("C", 3 * BLOCK)  # branches from A after 2 blocks
D = tokens("D", 4 * BLOCK)  # unrelated

LORA = "sql-lora"
# SGLang's tree namespace of an adapter: Req puts the adapter's 32-hex-digit lora_id at the end
# of extra_key (here the whole extra_key: the request sets none of its own).
LORA_ID = "5f1c0de5a1b2c3d4e5f60718293a4b5c"

# (name, tokens, cache_salt, adapter)
PROBES = [
    ("A/tenant-a", A, "tenant-a", None),
    ("A/none", A, None, None),
    ("A/tenant-b", A, "tenant-b", None),
    ("AX/tenant-a", AX, "tenant-a", None),
    ("AX/none", AX, None, None),
    ("C/tenant-a", C, "tenant-a", None),
    ("C/none", C, None, None),
    ("D/none", D, None, None),
    ("D/tenant-a", D, "tenant-a", None),
    ("A/sql-lora", A, None, LORA),
    ("A/sql-lora+tenant-a", A, "tenant-a", LORA),
    ("AX/sql-lora+tenant-a", AX, "tenant-a", LORA),
]


# EAGLE (bigram keys, page i cached only with the first token of page i+1): E is exactly 4
# pages; E1 is E and one token more; E2 is E1 with a different 65th token (the 4th page's pair
# (t63, t64) differs); E3 is E's first 3 pages and 1 token of the 4th.
E = tokens("E", 4 * BLOCK)
E1 = E + tokens("E1", 1)
E2 = E + tokens("E2", 1)
E3 = E[: 3 * BLOCK + 1]
EAGLE_PROBES = [
    ("E/none", E, None, None),
    ("E1/none", E1, None, None),
    ("E2/none", E2, None, None),
    ("E3/none", E3, None, None),
    ("E-3-pages/none", E[: 3 * BLOCK], None, None),
]


class Capture:
    """A SUB socket on the publisher's endpoint that keeps every message it receives."""

    def __init__(self, zmq, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.RCVTIMEO, 5000)
        self.sock.connect(endpoint)
        self.n = 0

    def expect(self, stream, count, steps):
        """Receives count messages and records them as one step."""
        names = []
        for _ in range(count):
            frames = self.sock.recv_multipart()
            if len(frames) != 3:
                raise SystemExit(f"{stream}: a live message has {len(frames)} frames, want 3")
            name = f"{stream}.{self.n:03d}"
            for suffix, data in zip(("topic", "seq", "payload"), frames):
                with open(os.path.join(OUT, f"{name}.{suffix}.bin"), "wb") as f:
                    f.write(data)
            names.append(name)
            self.n += 1
        steps.append({"messages": names})

    def close(self):
        self.sock.close(0)
        self.ctx.term()


def wait_joined():
    """PUB drops what it sends before the subscription arrives; wait out the slow joiner."""
    time.sleep(0.5)


def write_stream(stream, meta, steps):
    doc = dict(meta)
    doc["stream"] = stream
    doc["block_size"] = BLOCK
    doc["steps"] = steps
    text = json.dumps(doc, indent=1, sort_keys=True)
    # Lists of numbers (token ids) on one line each: one line per token would bury the steps.
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", text)
    with open(os.path.join(OUT, f"{stream}.json"), "w") as f:
        f.write(text + "\n")


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- SGLang -------------------------------------------------------------------------------


def run_sglang(only=()):
    """Records the SGLang streams (those named in only, or all)."""
    import msgspec
    import zmq
    from importlib.metadata import version

    from sglang.srt.disaggregation.kv_events import KVEventBatch, ZmqEventPublisher
    from types import SimpleNamespace

    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.events import KvEventLoraNames
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    class Allocator:
        """What RadixCache.evict needs of the token pool: somewhere to free pages to."""

        device = "cpu"

        def free_segment(self, value, start_pos=0):
            pass

    meta = {
        "producer": "sglang",
        "topic": TOPIC,
        "versions": {
            "sglang": version("sglang"),
            "msgspec": msgspec.__version__,
            "pyzmq": zmq.__version__,
        },
    }
    for fmt, eagle in (("default", False), ("dynamo", False), ("default", True)):
        stream = "sglang_eagle" if eagle else f"sglang_{fmt}"
        if only and stream not in only:
            continue
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        pub = ZmqEventPublisher(attn_dp_rank=0, endpoint=endpoint, topic=TOPIC, bind=True)
        cap = Capture(zmq, endpoint)
        wait_joined()
        # The adapter's public name, as the scheduler registers it when the adapter loads and
        # when a request for it is admitted.
        names = KvEventLoraNames()
        names.register(lora_id=LORA_ID, lora_name=LORA)
        names.register(SimpleNamespace(extra_key=LORA_ID, lora_id=LORA_ID))
        # What RadixCache.create_simulated builds, plus is_eagle (which it does not take).
        cache = RadixCache(CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=Allocator(),
            page_size=BLOCK,
            enable_kv_cache_events=True,
            dynamo_kv_event_format=(fmt == "dynamo"),
            kv_event_lora_names=names,
            is_eagle=eagle,
        ))
        steps = []

        def publish(count_expected=1):
            events = cache.kv_events.take()
            if not events:
                raise SystemExit(f"{stream}: nothing to publish")
            pub.publish(KVEventBatch(ts=time.time(), events=events))
            cap.expect(stream, count_expected, steps)

        def key(toks, salt, lora):
            return RadixKey(array("q", toks), LORA_ID if lora else None, cache_salt=salt)

        def insert(toks, salt, lora=None):
            cache.insert(InsertParams(key=key(toks, salt, lora)))

        def probe(label):
            rows = []
            for name, toks, salt, lora in PROBES + (EAGLE_PROBES if eagle else []):
                res = cache.match_prefix(MatchPrefixParams(key=key(toks, salt, lora)))
                n = res.device_prefix_len
                if n % BLOCK:
                    raise SystemExit(f"{stream}: match of {n} tokens is not page-aligned")
                rows.append({"name": name, "tokens": toks, "salt": salt, "lora": lora, "want_blocks": n // BLOCK})
            # match_prefix may split nodes; splits publish nothing, but check.
            if cache.kv_events.take():
                raise SystemExit(f"{stream}: match_prefix recorded events")
            steps.append({"probes": rows, "label": label})

        cache.kv_events.take()  # the AllBlocksCleared that reset() records at construction
        if eagle:
            # Bigram pages at the sequence end: E ends exactly on a page boundary, so its last
            # page has no next token and is not cached (3 of its 4 pages are); E1 is E and one
            # token more, which caches all 4.
            insert(E, None)
            publish()
            probe("EAGLE: a sequence of exactly 4 pages caches 3")
            insert(E1, None)
            publish()
            probe("EAGLE: one token more caches the 4th page")
        insert(A, "tenant-a")
        publish()
        probe("salted A stored")  # the case: A/tenant-a 6, A/none 0
        insert(A[: 4 * BLOCK], None)
        publish()
        probe("unsalted prefix of A stored beside the salted A")
        insert(AX, "tenant-a")
        insert(C, "tenant-a")
        insert(A, "tenant-b")
        insert(D, None)
        publish()
        probe("salted continuation, salted branch, a second salt, an unrelated prompt")
        insert(A, None, LORA)
        insert(AX, "tenant-a", LORA)
        publish()
        probe("adapter sql-lora: A unsalted, A and its continuation salted")
        cache.evict(EvictParams(num_tokens=3 * BLOCK))
        publish()
        probe("LRU evictions")
        cache.evict(EvictParams(num_tokens=1 << 20))
        publish()
        probe("everything evicted")
        insert(A, "tenant-a")
        insert(A, None)
        publish()
        probe("stored again")
        cache.reset()
        publish()
        probe("reset")
        pub.shutdown()
        cap.close()
        write_stream(stream, dict(meta, format=fmt, eagle=eagle), steps)
        print(f"{stream}: {cap.n} messages")


# --- Dynamo's TRT-LLM publisher ----------------------------------------------------------


class EngineTree:
    """The TRT-LLM side that the generator plays: blocks keyed by their namespace (adapter,
    salt) and token prefix; a salted or adapter request shares no block with another namespace."""

    def __init__(self):
        self.blocks = {}  # ((lora, salt), tuple(tokens up to and including the block)) -> block hash
        self.event_id = 0

    @staticmethod
    def block_hash(salt, prefix):
        # TRT-LLM's hashes are opaque to consumers; any stable 64-bit value per block will do.
        h = hashlib.sha256(repr((salt, prefix)).encode()).digest()
        return int.from_bytes(h[:8], "little")

    def next_id(self):
        self.event_id += 1
        return self.event_id

    def store(self, toks, salt, lora=None):
        """The "stored" event TRT-LLM would emit for toks: its new full blocks (after the cached
        ones, which are its parent) and the partial tail block, which it reports too."""
        wire_salt, salt = salt, (lora, salt)
        n = len(toks) // BLOCK
        first = 0
        while first < n and (salt, tuple(toks[: (first + 1) * BLOCK])) in self.blocks:
            first += 1
        parent = self.block_hash(salt, tuple(toks[: first * BLOCK])) if first else None
        blocks = []
        for i in range(first, n):
            prefix = tuple(toks[: (i + 1) * BLOCK])
            self.blocks[(salt, prefix)] = self.block_hash(salt, prefix)
            blocks.append(self.block(salt, wire_salt, prefix, toks[i * BLOCK : (i + 1) * BLOCK]))
        if len(toks) > n * BLOCK:  # Dynamo's publisher drops partial blocks
            blocks.append(self.block(salt, wire_salt, tuple(toks), toks[n * BLOCK :]))
        if not blocks:
            return None
        data = {"type": "stored", "parent_hash": parent, "blocks": blocks}
        if lora is not None:
            data["lora_name"] = lora
        return {"event_id": self.next_id(), "window_size": 4096, "attention_dp_rank": 0, "data": data}

    def block(self, ns, wire_salt, prefix, toks):
        # TRT-LLM 1.3 puts cache_salt on each block of a salted request.
        b = {"block_hash": self.block_hash(ns, prefix), "tokens": [{"token_id": t} for t in toks]}
        if wire_salt is not None:
            b["cache_salt"] = wire_salt
        return b

    def remove(self, toks, salt, from_block, lora=None):
        """Evicts the blocks of toks from block from_block on (a suffix, as an LRU would)."""
        salt = (lora, salt)
        hashes = []
        for i in range(len(toks) // BLOCK - 1, from_block - 1, -1):
            prefix = tuple(toks[: (i + 1) * BLOCK])
            h = self.blocks.pop((salt, prefix), None)
            if h is not None:
                hashes.append(h)
        return {
            "event_id": self.next_id(),
            "window_size": 4096,
            "attention_dp_rank": 0,
            "data": {"type": "removed", "block_hashes": hashes},
        }

    def match(self, toks, salt, lora=None):
        salt = (lora, salt)
        n = 0
        while (n + 1) * BLOCK <= len(toks) and (salt, tuple(toks[: (n + 1) * BLOCK])) in self.blocks:
            n += 1
        return n


def run_dynamo():
    import msgspec
    import zmq
    from importlib.metadata import version

    from dynamo.trtllm.publisher import KvEventPublicationMode, Publisher

    class Engine:
        """What Publisher reads of the TRT-LLM engine before any event flows."""

        def get_attention_dp_size(self):
            return 1

    meta = {
        "producer": "dynamo-trtllm",
        "topic": "",  # Publisher builds its ZmqKvEventPublisher with the default topic
        "format": "trtllm",
        "versions": {
            "ai-dynamo": version("ai-dynamo"),
            "ai-dynamo-runtime": version("ai-dynamo-runtime"),
            "msgspec": msgspec.__version__,
            "pyzmq": zmq.__version__,
        },
    }
    stream = "dynamo_trtllm"
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    pub = Publisher(
        endpoint=None,
        engine=Engine(),
        worker_id=1,
        kv_block_size=BLOCK,
        metrics_labels=[],
        component_gauges=None,
        zmq_endpoint=endpoint,
        kv_event_publication_mode=KvEventPublicationMode.POLLING,
        publish_metrics=False,
    )
    cap = Capture(zmq, endpoint)
    wait_joined()
    eng = EngineTree()
    steps = []

    def feed(*events):
        sent = 0
        for ev in events:
            if ev is None:
                continue
            pub._handle_zmq_kv_event(ev)
            sent += 1 if ev["data"]["type"] != "created" and (ev["data"].get("blocks") or ev["data"].get("block_hashes")) else 0
        cap.expect(stream, sent, steps)

    def probe(label):
        rows = [
            {"name": name, "tokens": toks, "salt": salt, "lora": lora, "want_blocks": eng.match(toks, salt, lora)}
            for name, toks, salt, lora in PROBES
        ]
        steps.append({"probes": rows, "label": label})

    # The first events of a TRT-LLM engine are "created" ones; Publisher learns window_size from them.
    pub._handle_zmq_kv_event({"event_id": eng.next_id(), "window_size": 4096, "data": {"type": "created", "num_blocks_per_cache_level": [64, 0]}})
    feed(eng.store(A, "tenant-a"))
    probe("salted A stored")
    feed(eng.store(A[: 4 * BLOCK], None))
    probe("unsalted prefix of A stored beside the salted A")
    feed(eng.store(AX, "tenant-a"), eng.store(C, "tenant-a"), eng.store(A, "tenant-b"), eng.store(D, None))
    probe("salted continuation, salted branch, a second salt, an unrelated prompt")
    feed(eng.store(A, None, LORA), eng.store(AX, "tenant-a", LORA))
    probe("adapter sql-lora: A unsalted, A and its continuation salted")
    feed(eng.remove(AX, "tenant-a", 5), eng.remove(D, None, 2), eng.remove(AX, "tenant-a", 7, LORA))
    probe("evictions")
    feed(eng.store(A, None))
    probe("unsalted A completed")
    pub.zmq_kv_event_publisher.shutdown()
    cap.close()
    write_stream(stream, meta, steps)
    print(f"{stream}: {cap.n} messages")


def main():
    os.makedirs(OUT, exist_ok=True)
    which = sys.argv[1:] or []
    if which[:1] == ["sglang"]:
        run_sglang(which[1:])
    elif which == ["dynamo"]:
        run_dynamo()
    else:
        raise SystemExit("usage: gen_publishers.py sglang [sglang_default|sglang_dynamo|sglang_eagle ...] | dynamo")


if __name__ == "__main__":
    main()
