"""Fact (f) of docs/vllm-facts.md: can the CPU build run --data-parallel-size 2,
and if so which ports the per-rank publishers use and what
data_parallel_rank their batches carry.

    .cache/vllm-venv/bin/python scripts/vllmfacts/probe_dp.py [--bind auto|nobind|"0|1"]

Two engine cores run inside one server here (the one step that needs two).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import REPO, Engine  # noqa: E402
from kvwire import Collector, decode, replay, seq_of  # noqa: E402
from probe_events import tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3"))
    ap.add_argument("--bind", default=None, help="VLLM_CPU_OMP_THREADS_BIND for this run")
    ap.add_argument("--out", default=os.path.join(REPO, ".cache", "facts", "dp.json"))
    ap.add_argument("--extra", default="", help="more vLLM flags, space-separated")
    a = ap.parse_args()

    env = {"VLLM_CPU_OMP_THREADS_BIND": a.bind} if a.bind else {}
    extra = ["--data-parallel-size", "2"] + a.extra.split()
    report = {"flags": extra, "env": env}
    eng = Engine(a.model, blocks=64, max_model_len=1024, extra=extra, env=env)
    cols = {}
    try:
        try:
            eng.start(timeout=900)
        except Exception as e:
            report["start_error"] = str(e)
            with open(eng.log_path) as f:
                lines = f.read().splitlines()
            report["log_errors"] = [l for l in lines if "Error" in l or "error" in l][-30:]
            report["log_tail"] = lines[-40:]
            return
        report["startup_s"] = round(eng.startup_s, 1)
        report["kv_event_sources"] = eng.get("/kv_event_sources")[1]
        status, metrics = eng.get("/metrics")
        report["cache_config_info_engines"] = [l.split("engine=")[1].split(",")[0] for l in metrics.splitlines()
                                               if l.startswith("vllm:cache_config_info")]
        model = eng.model_id()
        for port in (eng.kv_port, eng.kv_port + 1, eng.kv_port + 2):
            cols[port] = Collector(port, topic=b"kv-events")
        time.sleep(1.0)
        for i in range(8):
            eng.post("/v1/completions", {"model": model, "prompt": tokens(700 + i, 64), "max_tokens": 1, "temperature": 0})
        time.sleep(2.0)
        per_port = {}
        for port, col in cols.items():
            msgs = [f for _, f in col.msgs]
            per_port[str(port)] = {
                "messages": len(msgs),
                "seqs": [seq_of(m) for m in msgs],
                "data_parallel_rank": sorted({decode(m[2])[2] for m in msgs}),
            }
        report["live"] = per_port
        rep = {}
        for port in (eng.replay_port, eng.replay_port + 1):
            msgs, ended = replay(port, 0, total_timeout=10)
            data = [m for m in msgs if len(m) == 4 and m[2] != b"\xff" * 8]
            rep[str(port)] = {"ended": ended, "data_seqs": [int.from_bytes(m[2], "big") for m in data],
                              "data_parallel_rank": sorted({decode(m[3])[2] for m in data})}
        report["replay"] = rep
        report["peak_rss_gib"] = round(eng.peak_rss / 2**30, 2)
    finally:
        eng.stop()
        for c in cols.values():
            c.close()
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        print(a.out)


if __name__ == "__main__":
    main()
