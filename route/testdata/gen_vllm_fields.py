#!/usr/bin/env python3
"""vLLM 0.32's own reading of request bodies, for route's differential check (issue 23 item 4).

Each body of a corpus (hand-written seeds plus seeded random variants: key case variants,
duplicate keys, BOM, NaN, string booleans, float and string token ids, truncation fields,
engine-control members) goes through what vLLM's server does with it: json.loads on the
bytes (Starlette's Request.json), then the endpoint's pydantic request model
(CompletionRequest, ChatCompletionRequest) in lax mode, as FastAPI validates a body
parameter. The routing fields vLLM ends up with are written next to the body:

  route/testdata/vllm_request_fields.jsonl   one JSON object per body

route's TestVLLMRequestFields reads them with condisagg's parsers and must agree on every
body vLLM accepts. Run from the vLLM venv (scripts/vllm-venv.sh):

  .cache/vllm-venv/bin/python route/testdata/gen_vllm_fields.py           # rewrite
  .cache/vllm-venv/bin/python route/testdata/gen_vllm_fields.py --check   # re-check live
"""
import base64
import json
import os
import random
import sys

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.renderers.params import TokenizeParams

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "vllm_request_fields.jsonl")
ENGINE_CONTROL = ("kv_transfer_params", "ec_transfer_params", "vllm_xargs")
BOM = b"\xef\xbb\xbf"
MSGS = [{"role": "user", "content": "hi"}]


class _GenerateTokenizer:
    truncation_side = "left"  # vLLM's tokenizer default for generating models (tokenizers/registry.py)


def seeds():
    """Hand-written bodies: (name, endpoint, raw bytes)."""
    c, ch = "completions", "chat"
    j = lambda o: json.dumps(o).encode()
    yield "plain", c, j({"model": "m", "prompt": "hello"})
    yield "upper_prompt_key", c, b'{"model":"m","prompt":"long text","PROMPT":"cached text"}'
    yield "upper_prompt_first", c, b'{"PROMPT":"cached text","model":"m","prompt":"long text"}'
    yield "upper_model_key", c, b'{"model":"a","MODEL":"b","prompt":"x"}'
    yield "only_upper_model", c, b'{"MODEL":"b","prompt":"x"}'
    yield "duplicate_prompt", c, b'{"model":"m","prompt":"a","prompt":"b"}'
    yield "escaped_key", c, b'{"model":"m","pro\\u006dpt":"a"}'
    yield "bom", c, BOM + j({"model": "m", "prompt": "x"})
    yield "nan_temperature", c, b'{"model":"m","prompt":"x","temperature":NaN}'
    yield "infinity_top_p", c, b'{"model":"m","prompt":"x","top_p":Infinity,"seed":1}'
    yield "string_stream", c, b'{"model":"m","prompt":"x","stream":"true"}'
    yield "string_include_usage", ch, j({"model": "m", "messages": MSGS, "stream": "yes", "stream_options": {"include_usage": "on"}})
    yield "int_stream", c, b'{"model":"m","prompt":"x","stream":1}'
    yield "float_ids", c, b'{"model":"m","prompt":[1.0,2.0,3]}'
    yield "string_ids", c, b'{"model":"m","prompt":["1",2]}'
    yield "bool_ids", c, b'{"model":"m","prompt":[true,2]}'
    yield "fraction_id", c, b'{"model":"m","prompt":[1.5,2]}'
    yield "string_list", c, b'{"model":"m","prompt":["1","2"]}'
    yield "nested_float_ids", c, b'{"model":"m","prompt":[[1.0,2]]}'
    yield "truncate", c, b'{"model":"m","prompt":[1,2,3,4,5],"truncate_prompt_tokens":3}'
    yield "truncate_right", c, b'{"model":"m","prompt":[1,2,3,4,5],"truncate_prompt_tokens":3,"truncation_side":"right"}'
    yield "truncate_string", c, b'{"model":"m","prompt":[1,2,3,4,5],"truncate_prompt_tokens":"2"}'
    yield "truncate_float", c, b'{"model":"m","prompt":[1,2,3,4,5],"truncate_prompt_tokens":2.0}'
    yield "truncate_zero", c, b'{"model":"m","prompt":[1,2,3],"truncate_prompt_tokens":0}'
    yield "kv_transfer_params", c, j({"model": "m", "prompt": "x", "kv_transfer_params": {"do_remote_prefill": True, "remote_host": "10.9.9.9"}})
    yield "vllm_xargs", c, j({"model": "m", "prompt": "x", "vllm_xargs": {"kv_transfer_params": "x"}})
    yield "ec_transfer_params", ch, j({"model": "m", "messages": MSGS, "ec_transfer_params": {}})
    yield "upper_kv_transfer_params", c, j({"model": "m", "prompt": "x", "KV_TRANSFER_PARAMS": {"remote_host": "h"}})
    yield "cache_salt", c, j({"model": "m", "prompt": "x", "cache_salt": "s"})
    yield "chat_template", ch, j({"model": "m", "messages": MSGS, "chat_template": "{{ messages }}"})
    yield "chat_string_bools", ch, j({"model": "m", "messages": MSGS, "add_generation_prompt": "false", "continue_final_message": "true"})
    yield "not_json", c, b'{"model":"m","prompt":'
    yield "utf16", c, json.dumps({"model": "m", "prompt": "x"}).encode("utf-16")
    yield "stream_bad", c, b'{"model":"m","prompt":"x","stream":"maybe"}'


def variants(rng, n):
    """Seeded random bodies around the routing fields."""
    keys = ["model", "prompt", "stream", "stream_options", "cache_salt", "truncate_prompt_tokens",
            "truncation_side", "add_special_tokens", "kv_transfer_params", "vllm_xargs", "messages"]
    vals = {
        "model": ['"m"', '"other"', "null", "3", '""'],
        "prompt": ['"text"', "[1,2,3]", "[1.0,2]", '["1",2]', '["a","b"]', '["a"]', "[[1,2]]", "[]", "[-1]",
                   "[1.5]", "null", '"\\u00e9"', "[true,false]", "[[1],[2]]"],
        "stream": ["true", "false", '"true"', '"False"', '"yes"', '"off"', "1", "0", "2", "1.0", "null", '"maybe"'],
        "stream_options": ['{"include_usage":true}', '{"include_usage":"yes"}', '{"include_usage":0}',
                           '{"INCLUDE_USAGE":true}', "null", "{}"],
        "cache_salt": ['"s"', "null", "1"],
        "truncate_prompt_tokens": ["2", "-1", "0", '"2"', "2.0", "2.5", "null", "-2", '" 3 "'],
        "truncation_side": ['"left"', '"right"', '"middle"', "null"],
        "add_special_tokens": ["true", "false", '"false"', "0", "null"],
        "kv_transfer_params": ['{"remote_host":"h"}', "null", "{}"],
        "vllm_xargs": ['{"a":1}', "null"],
        "messages": ['[{"role":"user","content":"hi"}]', "[]", "null"],
    }
    for i in range(n):
        ep = rng.choice(["completions", "chat"])
        members = []
        for _ in range(rng.randint(1, 7)):
            k = rng.choice(keys)
            v = rng.choice(vals[k])
            if rng.random() < 0.15:
                k = k.upper() if rng.random() < 0.5 else k.capitalize()
            members.append((k, v))
        if ep == "chat" and rng.random() < 0.8:
            members.append(("messages", vals["messages"][0]))
        if ep == "completions" and rng.random() < 0.8:
            members.append(("prompt", rng.choice(vals["prompt"])))
        if rng.random() < 0.8:
            members.insert(0, ("model", '"m"'))
        rng.shuffle(members)
        body = ("{" + ",".join(f'"{k}":{v}' for k, v in members) + "}").encode()
        if rng.random() < 0.1:
            body = BOM + body
        yield f"random_{i:03d}", ep, body


def prompt_reading(p):
    if isinstance(p, str):
        return {"text": p}
    if p and isinstance(p[0], list):
        return {"id_lists": p}
    if p and isinstance(p[0], str):
        return {"texts": p}
    return {"ids": p}


def vllm_reading(endpoint, raw):
    """What vLLM 0.32's server reads from raw, or why it refuses it."""
    try:
        data = json.loads(raw)
    except Exception as e:  # JSONDecodeError, UnicodeDecodeError: FastAPI answers 400/422
        return {"accepted": False, "error": type(e).__name__}
    model = CompletionRequest if endpoint == "completions" else ChatCompletionRequest
    try:
        r = model.model_validate(data)
    except Exception as e:  # pydantic ValidationError, VLLMValidationError: 400
        return {"accepted": False, "error": type(e).__name__}
    out = {
        "accepted": True,
        "model": r.model,
        "stream": bool(r.stream),
        "include_usage": bool(r.stream_options and r.stream_options.include_usage),
        "cache_salt": r.cache_salt,
        "engine_control": sorted(k for k in data if k in ENGINE_CONTROL),
        "truncate_prompt_tokens": r.truncate_prompt_tokens,
        "truncation_side": r.truncation_side,
        "add_special_tokens": r.add_special_tokens,
    }
    if endpoint == "completions":
        out["prompt"] = None if r.prompt is None else prompt_reading(r.prompt)
        ids = r.prompt if isinstance(r.prompt, list) and r.prompt and isinstance(r.prompt[0], int) else None
        if ids is not None and r.truncate_prompt_tokens is not None and r.truncate_prompt_tokens >= 0:
            tp = TokenizeParams(max_total_tokens=None, truncate_prompt_tokens=r.truncate_prompt_tokens,
                                truncation_side=r.truncation_side)
            out["truncated_ids"] = tp._token_truncation(_GenerateTokenizer(), list(ids))
    else:
        kw = r.chat_template_kwargs or {}
        out["request_template"] = r.chat_template is not None or kw.get("chat_template") is not None
        out["add_generation_prompt"] = r.add_generation_prompt
        out["continue_final_message"] = r.continue_final_message
    return out


def corpus():
    yield from seeds()
    yield from variants(random.Random(23), 400)


def main():
    check = "--check" in sys.argv[1:]
    rows = []
    for name, endpoint, raw in corpus():
        row = {"name": name, "endpoint": endpoint, "body_b64": base64.b64encode(raw).decode()}
        row["vllm"] = vllm_reading(endpoint, raw)
        rows.append(json.dumps(row, sort_keys=True))
    text = "\n".join(rows) + "\n"
    if check:
        with open(OUT) as f:
            old = f.read()
        if old != text:
            bad = [a[:120] for a, b in zip(old.splitlines(), rows) if a != b]
            print(f"vllm_request_fields.jsonl differs from vLLM's live reading in {len(bad)} rows, e.g. {bad[:3]}")
            sys.exit(1)
        print(f"vllm_request_fields.jsonl: {len(rows)} bodies agree with vLLM's live reading")
        return
    with open(OUT, "w") as f:
        f.write(text)
    accepted = sum('"accepted": true' in r for r in rows)
    print(f"wrote {OUT}: {len(rows)} bodies, {accepted} accepted by vLLM")


if __name__ == "__main__":
    main()
