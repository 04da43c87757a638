"""Facts (a), (b), (c) of docs/vllm-facts.md against one real vLLM engine.

    .cache/vllm-venv/bin/python scripts/vllmfacts/probe_events.py [--model .cache/models/tiny-qwen3]
        [--fixtures kvevents/testdata/vllm032] [--out .cache/facts/events.json]

Starts the engine twice (the second time to see what a restart does to the
sequence numbers), one at a time, and always stops it. Prompts are given as
token ids so their lengths are exact. Writes a JSON report and the raw
multipart frames of selected messages as fixtures.
"""

import argparse
import json
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import REPO, Engine  # noqa: E402
from kvwire import Collector, decode, replay, seq_of  # noqa: E402

BLOCK = 32
END = b"\xff" * 8


def jsonable(v):
    if isinstance(v, bytes):
        return {"bin": v.hex()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


def describe(frames):
    """Decoded view of one live message."""
    if len(frames) != 3:
        return {"frames": len(frames), "raw": [f.hex() for f in frames]}
    batch = decode(frames[2])
    return {"topic": frames[0].decode(errors="replace"), "seq": seq_of(frames),
            "payload_len": len(frames[2]), "batch": jsonable(batch)}


def events_of(frames_list):
    out = []
    for frames in frames_list:
        batch = decode(frames[2])
        evs = batch["events"] if isinstance(batch, dict) else batch[1]
        out.extend(evs)
    return out


def tokens(seed, n, lo=1000, hi=100000):
    rng = random.Random(seed)
    return [rng.randrange(lo, hi) for _ in range(n)]


def save_fixture(dirpath, name, frames, note, index, extra=None):
    os.makedirs(dirpath, exist_ok=True)
    for i, suffix in enumerate(("topic", "seq", "payload") if len(frames) == 3 else
                               [f"frame{k}" for k in range(len(frames))]):
        with open(os.path.join(dirpath, f"{name}.{suffix}.bin"), "wb") as f:
            f.write(frames[i])
    view = describe(frames) if len(frames) == 3 else {"frames": [f.hex() for f in frames]}
    view.update(extra or {})  # capture facts the frames do not carry (e.g. the LoRA adapter's path)
    with open(os.path.join(dirpath, f"{name}.json"), "w") as f:
        json.dump(view, f, indent=1)
        f.write("\n")
    index[name] = note


class Probe:
    def __init__(self, eng, col):
        self.eng, self.col = eng, col
        self.model = eng.model_id()

    def complete(self, prompt_ids, max_tokens=1, **extra):
        mark = self.col.mark()
        body = {"model": self.model, "prompt": prompt_ids, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, **extra}
        status, resp = self.eng.post("/v1/completions", body)
        if status != 200:
            raise RuntimeError(f"completion failed: {status} {resp}")
        self.col.wait_quiet()
        usage = resp["usage"]
        details = usage.get("prompt_tokens_details") or {}
        return {"prompt_tokens": usage["prompt_tokens"],
                "cached_tokens": details.get("cached_tokens"),
                "messages": self.col.since(mark)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3"))
    ap.add_argument("--fixtures", default=os.path.join(REPO, "kvevents", "testdata", "vllm032"))
    ap.add_argument("--out", default=os.path.join(REPO, ".cache", "facts", "events.json"))
    ap.add_argument("--blocks", type=int, default=64)
    a = ap.parse_args()

    report = {"block_size": BLOCK, "num_gpu_blocks_override": a.blocks}
    idx_path = os.path.join(a.fixtures, "index.json")
    fixtures = json.load(open(idx_path)) if os.path.exists(idx_path) else {}
    ports = dict(port=18100, kv_port=15557, replay_port=15567)
    eng = Engine(a.model, blocks=a.blocks, max_model_len=1024, **ports)
    col = None
    try:
        eng.start()
        report["startup_s_first"] = round(eng.startup_s, 1)

        # (c) replay right after startup, before any request and before any SUB.
        msgs, ended = replay(ports["replay_port"], 0)
        report["replay_at_startup"] = {"ended": ended, "messages": [[f.hex() for f in m] for m in msgs]}
        if msgs:
            save_fixture(a.fixtures, "replay_empty_end_marker", msgs[-1],
                         "replay reply right after startup (nothing published yet): the end marker only, as a DEALER receives it", fixtures)
        status, srcs = eng.get("/kv_event_sources")
        report["kv_event_sources"] = srcs
        status, metrics = eng.get("/metrics")
        report["cache_config_info"] = [l for l in metrics.splitlines() if l.startswith("vllm:cache_config_info")]

        col = Collector(ports["kv_port"], topic=b"kv-events")
        time.sleep(1.0)  # slow joiner: let the subscription reach the PUB
        p = Probe(eng, col)

        # (a) cached_tokens for exact-multiple and off-by-k lengths, each sent twice.
        hits = []
        first_store_saved = False
        for i, n in enumerate([64, 96, 128, 65, 69, 97, 101, 32, 33, 31]):
            ids = tokens(100 + i, n)
            r1 = p.complete(ids)
            r2 = p.complete(ids)
            hits.append({
                "prompt_len": n, "blocks_full": n // BLOCK,
                "first": {"cached_tokens": r1["cached_tokens"],
                          "events": jsonable(events_of(r1["messages"])),
                          "seqs": [seq_of(m) for m in r1["messages"]]},
                "second": {"cached_tokens": r2["cached_tokens"],
                           "events": jsonable(events_of(r2["messages"])),
                           "seqs": [seq_of(m) for m in r2["messages"]]},
            })
            if n == 64 and r1["messages"] and not first_store_saved:
                save_fixture(a.fixtures, "store_plain", r1["messages"][0],
                             "BlockStored of a fresh 64-token prompt (2 blocks, parent nil), max_tokens 1", fixtures)
                first_store_saved = True
            if n == 64 and r2["messages"]:
                save_fixture(a.fixtures, "store_recompute_last_block", r2["messages"][0],
                             "the same 64-token prompt again: cached_tokens 32, the last block is recomputed and stored again (same hash, parent = block 0)", fixtures)
        report["cached_tokens"] = hits

        # A store made during decode: output tokens complete a block.
        ids = tokens(200, 40)
        r = p.complete(ids, max_tokens=40)
        report["decode_store"] = {"prompt_len": 40, "max_tokens": 40, "events": jsonable(events_of(r["messages"])),
                                  "seqs": [seq_of(m) for m in r["messages"]]}
        for m in r["messages"]:
            evs = events_of([m])
            if any(isinstance(e, dict) and e.get("parent_block_hash") is not None for e in evs):
                save_fixture(a.fixtures, "store_decode", m,
                             "BlockStored emitted during decode: a 40-token prompt with 40 generated tokens completes block 1 with generated tokens (parent = block 0)", fixtures)
                break

        # cache_salt: same token ids as the 96-token prompt above, with a salt.
        ids96 = tokens(101, 96)
        rs1 = p.complete(ids96, cache_salt="tenant-a")
        rs2 = p.complete(ids96, cache_salt="tenant-a")
        rs3 = p.complete(ids96, cache_salt="tenant-b")
        report["cache_salt"] = [
            {"salt": s, "cached_tokens": r["cached_tokens"], "events": jsonable(events_of(r["messages"]))}
            for s, r in (("tenant-a", rs1), ("tenant-a (again)", rs2), ("tenant-b", rs3))]
        if rs1["messages"]:
            save_fixture(a.fixtures, "store_cache_salt", rs1["messages"][0],
                         'BlockStored of a 96-token prompt sent with cache_salt "tenant-a": extra_keys = [["tenant-a"], nil, nil]', fixtures)

        # (c) replay after some traffic: from 0, from the middle, from past the end.
        last_seq = seq_of(col.msgs[-1][1])
        live = {seq_of(f): f for _, f in col.msgs}
        rep = {"last_live_seq": last_seq}
        for start in (0, last_seq // 2, last_seq, last_seq + 1, 1 << 40):
            msgs, ended = replay(ports["replay_port"], start)
            data = [m for m in msgs if len(m) == 4 and m[2] != END]
            rep[str(start)] = {
                "ended": ended, "replies": len(msgs),
                "frame_counts": sorted({len(m) for m in msgs}),
                "leading_empty_frame": all(m[0] == b"" for m in msgs),
                "data_seqs": [struct.unpack(">Q", m[2])[0] for m in data],
                "topics": sorted({m[1].decode() for m in data}),
                "end_marker": [f.hex() for f in msgs[-1]] if msgs else None,
                # Each replayed (topic, seq, payload) is byte-identical to the live message.
                "identical_to_live": all(live.get(struct.unpack(">Q", m[2])[0]) == m[1:] for m in data),
            }
            if start == last_seq and data:
                save_fixture(a.fixtures, "replay_data_message", msgs[0],
                             "one replayed batch as a DEALER receives it: ['', topic, seq, payload]", fixtures)
                save_fixture(a.fixtures, "replay_end_marker", msgs[-1],
                             "the replay end marker as a DEALER receives it: ['', '', ff*8, '']", fixtures)
        # A malformed request (3 frames after the identity instead of 2) gets no answer.
        msgs, ended = replay(ports["replay_port"], 0, raw_request=[b"", struct.pack(">Q", 0), b"extra"],
                             idle_timeout=2.0, total_timeout=3.0)
        rep["malformed_request_3_frames"] = {"replies": len(msgs), "ended": ended}
        # A start_seq that is not 8 bytes is still read with int.from_bytes(..., "big").
        msgs, ended = replay(ports["replay_port"], 0, raw_request=[b"", b"\x00\x05"],
                             idle_timeout=2.0, total_timeout=3.0)
        rep["two_byte_start_seq_5"] = {"replies": len(msgs), "ended": ended,
                                       "data_seqs": [struct.unpack(">Q", m[2])[0] for m in msgs if len(m) == 4 and m[2] != END]}
        report["replay_after_traffic"] = rep

        # (b) eviction: distinct 512-token prompts until a BlockRemoved appears.
        evict = []
        saved_evict = False
        for i in range(12):
            r = p.complete(tokens(300 + i, 512))
            evs = events_of(r["messages"])
            kinds = [e.get("type") for e in evs]
            evict.append({"request": i, "cached_tokens": r["cached_tokens"], "kinds": kinds,
                          "removed": sum(1 for e in evs if e.get("type") == "BlockRemoved"),
                          "seqs": [seq_of(m) for m in r["messages"]]})
            for m in r["messages"]:
                ks = [e.get("type") for e in events_of([m])]
                if "BlockRemoved" in ks and not saved_evict:
                    save_fixture(a.fixtures, "evict", m,
                                 "the first batch with BlockRemoved events when a 512-token prompt no longer fits in the 64-block cache (removes first, then the new BlockStored, in one batch)", fixtures)
                    saved_evict = True
            if saved_evict and i >= 3:
                break
        report["eviction"] = evict

        # (b) AllBlocksCleared after POST /reset_prefix_cache on an idle engine.
        mark = col.mark()
        status, resp = eng.post("/reset_prefix_cache", {})
        time.sleep(5)
        idle = col.since(mark)
        # The next request (the 64-token prompt of store_plain, which was cached) makes the engine step.
        r = p.complete(tokens(100, 64))
        report["reset_prefix_cache"] = {
            "status": status, "response": resp,
            "messages_within_5s_while_idle": [describe(m) for m in idle],
            "next_request_cached_tokens": r["cached_tokens"],
            "next_request_messages": [describe(m) for m in r["messages"]],
        }
        if r["messages"]:
            save_fixture(a.fixtures, "all_blocks_cleared", r["messages"][0],
                         "after POST /reset_prefix_cache on an idle engine nothing is published until the engine steps again; "
                         "the next request's batch then carries AllBlocksCleared followed by that request's BlockStored", fixtures)
        # Reset while a long request is running: the reset fails (success false) and emits nothing.
        import threading
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("r", p.eng.post("/v1/completions", {
            "model": p.model, "prompt": tokens(400, 64), "max_tokens": 300, "temperature": 0, "ignore_eos": True})))
        mark = col.mark()
        t.start()
        time.sleep(3)
        status, resp = eng.post("/reset_prefix_cache", {})
        t.join()
        col.wait_quiet()
        report["reset_while_running"] = {"status": status, "response": resp,
                                         "event_types": [e.get("type") for e in events_of(col.since(mark))]}
        report["last_seq_before_restart"] = seq_of(col.msgs[-1][1])
        report["peak_rss_gib_first"] = round(eng.peak_rss / 2**30, 2)
    finally:
        eng.stop()

    # Restart on the same ports; the SUB keeps its connection attempts going.
    eng2 = Engine(a.model, blocks=a.blocks, max_model_len=1024, **ports)
    try:
        mark = col.mark()
        eng2.start()
        report["startup_s_restart"] = round(eng2.startup_s, 1)
        msgs, ended = replay(ports["replay_port"], 0)
        report["replay_after_restart_before_traffic"] = {"ended": ended, "replies": len(msgs)}
        time.sleep(1.0)
        p2 = Probe(eng2, col)
        r = p2.complete(tokens(100, 64))
        got = col.since(mark)
        report["restart"] = {
            "messages_during_shutdown_and_startup": [describe(m) for m in got if m not in r["messages"]],
            "first_seqs_after_restart": [seq_of(m) for m in r["messages"]],
            "events": jsonable(events_of(r["messages"])),
            "cached_tokens": r["cached_tokens"],
        }
        if r["messages"]:
            save_fixture(a.fixtures, "store_after_restart", r["messages"][0],
                         "the first batch after an engine restart: seq starts again at 0; same prompt as store_plain, same block hashes (sha256 NONE_HASH is fixed)", fixtures)
        report["peak_rss_gib_restart"] = round(eng2.peak_rss / 2**30, 2)
    finally:
        eng2.stop()
        col.close()

    with open(idx_path, "w") as f:
        json.dump(fixtures, f, indent=1, sort_keys=True)
        f.write("\n")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(a.out)


if __name__ == "__main__":
    main()
