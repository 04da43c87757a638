"""Fact (d) of docs/vllm-facts.md: what a LoRA request (and LoRA + cache_salt)
puts into BlockStored, and whether the CPU build serves a LoRA adapter.

    .cache/vllm-venv/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out .cache/models/tiny-qwen3 \
        --lora-out .cache/models/tiny-qwen3-lora
    .cache/vllm-venv/bin/python scripts/vllmfacts/probe_lora.py [--fixtures kvevents/testdata/vllm032]
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import REPO, Engine  # noqa: E402
from kvwire import Collector, decode, seq_of  # noqa: E402
from probe_events import describe, events_of, jsonable, save_fixture, tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3"))
    ap.add_argument("--lora", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3-lora"))
    ap.add_argument("--fixtures", default=os.path.join(REPO, "kvevents", "testdata", "vllm032"))
    ap.add_argument("--out", default=os.path.join(REPO, ".cache", "facts", "lora.json"))
    a = ap.parse_args()

    idx_path = os.path.join(a.fixtures, "index.json")
    fixtures = json.load(open(idx_path)) if os.path.exists(idx_path) else {}
    report = {}
    # vLLM puts the adapter path, exactly as --lora-modules gives it, into every block hash
    # (docs/vllm-facts.md §d). Relative to the repository root (the engine's working
    # directory), so that the recorded fixtures name no machine's directory and
    # check_hashes.py verifies them anywhere.
    lora_path = os.path.relpath(os.path.abspath(a.lora), REPO)
    extra = ["--enable-lora", "--lora-modules", f"sql-lora={lora_path}", "--max-lora-rank", "8", "--max-loras", "1"]
    eng = Engine(a.model, blocks=128, max_model_len=1024, extra=extra)
    col = None
    try:
        try:
            eng.start()
        except Exception as e:  # record why the CPU build refuses
            report["start_error"] = str(e)
            with open(eng.log_path) as f:
                report["log_tail"] = f.read().splitlines()[-60:]
            raise
        report["startup_s"] = round(eng.startup_s, 1)
        report["models"] = eng.get("/v1/models")[1]
        base = eng.model_id()
        col = Collector(eng.kv_port, topic=b"kv-events")
        time.sleep(1.0)

        def run(model, ids, **kw):
            mark = col.mark()
            status, resp = eng.post("/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                         "temperature": 0, **kw})
            col.wait_quiet()
            msgs = col.since(mark)
            return {"status": status,
                    "cached_tokens": (resp.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens")
                    if status == 200 else resp,
                    "events": jsonable(events_of(msgs)), "messages": msgs}

        ids = tokens(500, 64)
        steps = [
            ("base", base, {}),
            ("lora_same_tokens", "sql-lora", {}),
            ("lora_again", "sql-lora", {}),
            ("lora_with_salt", "sql-lora", {"cache_salt": "tenant-a"}),
            ("base_again", base, {}),
        ]
        out = []
        for name, model, kw in steps:
            r = run(model, ids, **kw)
            out.append({"step": name, "model": model, **{k: v for k, v in r.items() if k != "messages"}})
            if name == "lora_same_tokens" and r["messages"]:
                save_fixture(a.fixtures, "store_lora", r["messages"][0],
                             'BlockStored of a 64-token prompt sent to LoRA adapter "sql-lora" (lora_id 1): '
                             'lora_name set, extra_keys [["sql-lora"], ["sql-lora"]]; the hashes differ from the base model\'s', fixtures,
                             {"lora_path": lora_path})
            if name == "lora_with_salt" and r["messages"]:
                save_fixture(a.fixtures, "store_lora_cache_salt", r["messages"][0],
                             'BlockStored of the same prompt to "sql-lora" with cache_salt "tenant-a": '
                             'extra_keys [["sql-lora", "tenant-a"], ["sql-lora"]]', fixtures,
                             {"lora_path": lora_path})
        report["steps"] = out
        report["tokenize_with_lora_model"] = eng.post("/tokenize", {"model": "sql-lora", "prompt": "Hello world"})
        status, metrics = eng.get("/metrics")
        report["lora_metrics"] = [l for l in metrics.splitlines() if l.startswith("vllm:lora_requests_info")]
        report["peak_rss_gib"] = round(eng.peak_rss / 2**30, 2)
    finally:
        eng.stop()
        if col:
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
