# Renders the body of SGLang's GET /server_info (sglang==0.5.23) for pool's engine-flag check:
# SGLang's own ServerArgs resolved by its own build_server_info (the function the HTTP handler
# and the gRPC metadata server share), plus the four keys the HTTP handler adds
# (http_server.py server_info: startup_time, internal_states, version, frontend). Run with a
# Python that has sglang installed (kvevents/testdata/gen_publishers.py lists the install):
#   python gen_sglang_server_info.py OUT_DIR MODEL_DIR
# MODEL_DIR holds the Qwen3 tokenizer files and a Qwen3 config.json; every occurrence of its
# path in the output (model_path, tokenizer_path, launch_command) is written as "Qwen/Qwen3-8B"
# so no path of the generating machine is committed.
import json
import os
import sys

import sglang
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import build_server_info

out, model = sys.argv[1], sys.argv[2]

CASES = {
    # What condisagg requires (README "Engines"): page size = block_size 16, cache report on,
    # KV events on a PUB and a replay ROUTER, two data-parallel ranks.
    "sglang_server_info.json": dict(
        page_size=16,
        enable_cache_report=True,
        dp_size=2,
        kv_events_config=json.dumps(
            {"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5567", "topic": "kv"}
        ),
    ),
    # SGLang's defaults: page size 1, no cache report, no KV events, one rank.
    "sglang_server_info_defaults.json": dict(),
    # The first case with EAGLE speculative decoding (bigram radix keys: the model needs
    # speculative: eagle). The draft model path is only recorded, never loaded.
    "sglang_server_info_eagle.json": dict(
        page_size=16,
        enable_cache_report=True,
        dp_size=2,
        kv_events_config=json.dumps(
            {"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5567", "topic": "kv"}
        ),
        speculative_algorithm="EAGLE",
        speculative_draft_model_path="Tengyunw/qwen3_8b_eagle3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    ),
}

for name, kw in CASES.items():
    args = ServerArgs(model_path=model, skip_tokenizer_init=True, device="cpu", **kw)
    body = {
        **build_server_info(args, {}),
        "startup_time": 1765100000.0,
        "internal_states": [{"last_gen_throughput": 0.0, "memory_usage": {}}],
        "version": sglang.__version__,
        "frontend": "python",
    }
    text = json.dumps(body, indent=1, sort_keys=True, default=str).replace(os.path.abspath(model), "Qwen/Qwen3-8B").replace(model, "Qwen/Qwen3-8B")
    with open(os.path.join(out, name), "w") as f:
        f.write(text + "\n")
    print(name, {k: body.get(k) for k in ("page_size", "enable_cache_report", "dp_size", "kv_events", "speculative_algorithm")})
