"""Fact (c), second part, of docs/vllm-facts.md: the replay ROUTER serves a
bounded ring of the last `buffer_steps` batches, not the blocks still held.
Also: what `vllm_xargs: {"kv_cache_report_mode": "full"}` does to the events
of a prefix-cache hit.

    .cache/vllm-venv/bin/python scripts/vllmfacts/probe_replay_buffer.py [--buffer-steps 4]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import REPO, Engine  # noqa: E402
from kvwire import Collector, decode, replay, seq_of  # noqa: E402
from probe_events import events_of, jsonable, tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3"))
    ap.add_argument("--buffer-steps", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(REPO, ".cache", "facts", "replay_buffer.json"))
    a = ap.parse_args()

    report = {"buffer_steps": a.buffer_steps}
    eng = Engine(a.model, blocks=64, max_model_len=1024, buffer_steps=a.buffer_steps)
    col = None
    try:
        eng.start()
        report["startup_s"] = round(eng.startup_s, 1)
        report["kv_event_sources"] = eng.get("/kv_event_sources")[1]
        model = eng.model_id()
        col = Collector(eng.kv_port, topic=b"kv-events")
        time.sleep(1.0)

        def run(ids, **kw):
            mark = col.mark()
            s, r = eng.post("/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                 "temperature": 0, **kw})
            col.wait_quiet()
            msgs = col.since(mark)
            return {"status": s, "cached_tokens": (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
                    if s == 200 else r, "seqs": [seq_of(m) for m in msgs], "events": jsonable(events_of(msgs))}

        for i in range(8):
            run(tokens(900 + i, 64))
        live = [seq_of(f) for _, f in col.msgs]
        msgs, ended = replay(eng.replay_port, 0)
        data = [m for m in msgs if len(m) == 4 and m[2] != b"\xff" * 8]
        report["live_seqs"] = live
        report["replay_from_0"] = {"ended": ended, "data_seqs": [int.from_bytes(m[2], "big") for m in data]}

        # kv_cache_report_mode "full": a prefix hit is announced again as a BlockStored from block 0.
        ids = tokens(950, 96)
        report["report_mode"] = {
            "first": run(ids),
            "incremental_hit": run(ids),
            "full_hit": run(ids, vllm_xargs={"kv_cache_report_mode": "full"}),
        }
        report["peak_rss_gib"] = round(eng.peak_rss / 2**30, 2)
    finally:
        eng.stop()
        if col:
            col.close()
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    print(a.out)


if __name__ == "__main__":
    main()
