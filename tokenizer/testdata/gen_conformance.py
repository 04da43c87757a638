#!/usr/bin/env python3
"""Writes the tokenizer conformance fixtures from Hugging Face's own implementation.

Usage (from the repo root, after tokenizer/testdata/fetch_models.sh):
    pip install tokenizers transformers jinja2
    python3 tokenizer/testdata/gen_conformance.py [--check]

For every model in testdata/models/ it records
  * the ids of tokenizer.encode(text) (add_special_tokens=True, as vLLM's completions
    endpoint does) for every text of the deterministic corpus, and
  * for every chat request: the prompt rendered by transformers' apply_chat_template
    after the same message preprocessing vLLM's chat endpoint does, and its ids
    encoded with add_special_tokens=False.
--check compares a fresh run against the committed fixtures instead of writing.
"""
import copy
import gzip
import io
import json
import os
import sys

import tokenizers
import transformers
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_gen  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["qwen3", "llama3"]


def vllm_messages(msgs):
    """Mirrors vllm.entrypoints.chat_utils for "string" content-format templates:
    text parts joined with newlines, tool_calls kept with their JSON arguments
    parsed to objects, reasoning (or the deprecated reasoning_content) handed on
    under both names, tool_call_id, name and task copied, developer tools kept."""
    out = []
    for m in msgs:
        content = m.get("content")
        if content is None:
            parts = []
        elif isinstance(content, str):
            parts = [content]
        else:
            parts = [p["text"] for p in content if p.get("type") == "text"]
        r = {"role": m["role"], "content": "\n".join(parts)}
        if m["role"] == "assistant" and m.get("tool_calls") is not None:
            calls = copy.deepcopy(m["tool_calls"])
            for c in calls:
                a = c["function"].get("arguments")
                if not a:
                    c["function"]["arguments"] = {}
                elif not isinstance(a, dict):
                    c["function"]["arguments"] = json.loads(a)
            r["tool_calls"] = calls
        if m["role"] == "assistant":
            reasoning = m.get("reasoning")
            if reasoning is None:
                reasoning = m.get("reasoning_content")
            if reasoning is not None:
                r["reasoning"] = reasoning
                r["reasoning_content"] = reasoning
        elif m["role"] == "tool" and "tool_call_id" in m:
            r["tool_call_id"] = m["tool_call_id"]
        for k in ("name", "task"):
            if isinstance(m.get(k), str):
                r[k] = m[k]
        if m["role"] == "developer":
            r["tools"] = m.get("tools")
        out.append(r)
    return out


def vllm_tools(tools):
    """ChatCompletionToolsParam.model_dump(): declared fields (None included) in field
    order, then extra fields in request order (vLLM's models use extra="allow")."""
    if tools is None:
        return None
    out = []
    for t in tools:
        fn = {"name": t["function"]["name"], "description": t["function"].get("description"),
              "parameters": t["function"].get("parameters")}
        fn.update({k: v for k, v in t["function"].items() if k not in fn})  # extra="allow" fields
        tool = {"type": t.get("type", "function"), "function": fn}
        tool.update({k: v for k, v in t.items() if k not in tool})
        out.append(tool)
    return out


def render_chat(tok, req):
    kwargs = dict(req.get("chat_template_kwargs") or {})
    try:
        prompt = tok.apply_chat_template(
            vllm_messages(req["messages"]), tools=vllm_tools(req.get("tools")),
            add_generation_prompt=req.get("add_generation_prompt", True), tokenize=False, **kwargs)
    except Exception as e:  # the template raised: the request is refused
        return {"error": str(e)}
    return {"prompt": prompt, "ids": tok.encode(prompt, add_special_tokens=False)}


def dump_gz(lines):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as f:
        for obj in lines:
            f.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return buf.getvalue()


def main():
    check = "--check" in sys.argv
    texts = corpus_gen.text_corpus()
    chats = corpus_gen.chat_corpus()
    files = {"conformance_texts.jsonl.gz": dump_gz(texts), "conformance_chats.jsonl.gz": dump_gz(chats)}
    for m in MODELS:
        d = os.path.join(HERE, "models", m)
        tok = AutoTokenizer.from_pretrained(d)
        raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        ids = []
        for t in texts:
            a = tok.encode(t)
            b = raw.encode(t, add_special_tokens=True).ids
            if a != b:
                print(f"{m}: transformers and tokenizers disagree on {t!r}", file=sys.stderr)
            ids.append(a)
        files[f"conformance_{m}_texts_hf.jsonl.gz"] = dump_gz(ids)
        files[f"conformance_{m}_chats_hf.jsonl.gz"] = dump_gz([render_chat(tok, r) for r in chats])
    meta = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
            "texts": len(texts), "chats": len(chats)}
    files["conformance_meta.json"] = (json.dumps(meta, indent=1) + "\n").encode()
    bad = 0
    for name, data in files.items():
        path = os.path.join(HERE, name)
        if check:
            with open(path, "rb") as f:
                old = f.read()
            if name.endswith(".gz"):
                old, data = gzip.decompress(old), gzip.decompress(data)
            if name != "conformance_meta.json" and old != data:
                print(f"conformance: {name} differs from the live reference", file=sys.stderr)
                bad += 1
        else:
            with open(path, "wb") as f:
                f.write(data)
            print(f"wrote {name} ({len(data)} bytes)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
