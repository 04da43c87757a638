"""Facts (e) and (g) of docs/vllm-facts.md: the token ids a real vLLM renders
for chats with continue_final_message, on /v1/chat/completions and /tokenize,
and the shape of /tokenize answers.

    .cache/vllm-venv/bin/python scripts/vllmfacts/probe_chat.py [--model .cache/models/tiny-qwen3]
        [--fixture tokenizer/testdata/vllm_continue_final.json] [--out .cache/facts/chat.json]

/v1/chat/completions is asked for its prompt ids with "return_token_ids": true
(a vLLM extension; the answer then carries "prompt_token_ids").
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import REPO, Engine  # noqa: E402

CHATS = [
    {
        "name": "prefill_answer",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"},
        ],
    },
    {
        "name": "multi_turn_list_prefix",
        "messages": [
            {"role": "user", "content": "Name two primes."},
            {"role": "assistant", "content": "2 and 3."},
            {"role": "user", "content": "Now list three more, one per line."},
            {"role": "assistant", "content": "Sure:\n1. 5\n2."},
        ],
    },
    {
        "name": "thinking_prefix_no_thinking_kwarg",
        "messages": [
            {"role": "user", "content": "Héllo! 你好, what's 2+2?"},
            {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n2+2 ="},
        ],
        "chat_template_kwargs": {"enable_thinking": False},
    },
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "tiny-qwen3"))
    ap.add_argument("--fixture", default=os.path.join(REPO, "tokenizer", "testdata", "vllm_continue_final.json"))
    ap.add_argument("--out", default=os.path.join(REPO, ".cache", "facts", "chat.json"))
    a = ap.parse_args()

    report = {}
    cases = []
    with Engine(a.model, blocks=128, max_model_len=2048) as eng:
        model = eng.model_id()
        report["startup_s"] = round(eng.startup_s, 1)
        status, ver = eng.get("/version")
        for chat in CHATS:
            base = {"messages": chat["messages"], "add_generation_prompt": False,
                    "continue_final_message": True}
            if "chat_template_kwargs" in chat:
                base["chat_template_kwargs"] = chat["chat_template_kwargs"]
            chat_body = dict(base, model=model, max_tokens=1, temperature=0, return_token_ids=True)
            s1, r1 = eng.post("/v1/chat/completions", chat_body)
            tok_body = dict(base, model=model)
            s2, r2 = eng.post("/tokenize", dict(tok_body, return_token_strs=True))
            # For contrast: the same chat with the final assistant turn closed and a generation prompt.
            s3, r3 = eng.post("/tokenize", dict(tok_body, continue_final_message=False, add_generation_prompt=True))
            if s1 != 200 or s2 != 200:
                raise RuntimeError(f"{chat['name']}: {s1} {r1} / {s2} {r2}")
            chat_ids = r1.get("prompt_token_ids")
            if chat_ids is None:  # older layout: inside the choice
                chat_ids = r1["choices"][0].get("prompt_token_ids")
            cases.append({
                "name": chat["name"],
                "request": base,
                "chat_completions_prompt_token_ids": chat_ids,
                "tokenize_tokens": r2["tokens"],
                "tokenize_token_strs": r2["token_strs"],
                "equal": chat_ids == r2["tokens"],
                "usage_prompt_tokens": r1["usage"]["prompt_tokens"],
                "contrast_generation_prompt_tokens": r3.get("tokens") if s3 == 200 else r3,
            })
        # Both flags true is a validation error on both endpoints.
        bad = {"messages": CHATS[0]["messages"], "add_generation_prompt": True, "continue_final_message": True}
        report["both_flags"] = {
            "chat": eng.post("/v1/chat/completions", dict(bad, model=model, max_tokens=1)),
            "tokenize": eng.post("/tokenize", dict(bad, model=model)),
        }
        # Continuing a final *user* message.
        report["continue_user_message"] = eng.post("/tokenize", {
            "model": model, "messages": [{"role": "user", "content": "Complete this: once upon"}],
            "add_generation_prompt": False, "continue_final_message": True})

        # (g) /tokenize shapes.
        report["tokenize_completion"] = eng.post("/tokenize", {"model": model, "prompt": "Hello world"})
        report["tokenize_completion_strs"] = eng.post("/tokenize", {"model": model, "prompt": "Hello world",
                                                                     "return_token_strs": True})
        report["tokenize_completion_no_model"] = eng.post("/tokenize", {"prompt": "Hello world"})
        report["tokenize_chat"] = eng.post("/tokenize", {"model": model, "messages": [
            {"role": "user", "content": "Hello world"}]})
        report["tokenize_chat_with_cache_salt"] = eng.post("/tokenize", {"model": model, "messages": [
            {"role": "user", "content": "Hello world"}], "cache_salt": "x"})
        report["tokenize_both_prompt_and_messages"] = eng.post("/tokenize", {"model": model, "prompt": "a",
                                                                            "messages": [{"role": "user", "content": "b"}]})
        report["tokenize_wrong_model"] = eng.post("/tokenize", {"model": "nope", "prompt": "a"})
        report["detokenize"] = eng.post("/detokenize", {"model": model, "tokens": [9707, 1879]})
        report["version"] = ver

    doc = {
        "about": ("Token ids a real vLLM 0.32.0 (CPU build) renders for chats with "
                  "continue_final_message=true and add_generation_prompt=false, using the qwen3 "
                  "tokenizer files in tokenizer/testdata/models/qwen3 (tiny random-weight model). "
                  "Made by scripts/vllmfacts/probe_chat.py. chat_completions_prompt_token_ids comes from "
                  "POST /v1/chat/completions with return_token_ids=true; tokenize_tokens from POST /tokenize "
                  "with the same request fields; contrast_generation_prompt_tokens is /tokenize of the same "
                  "messages with continue_final_message=false, add_generation_prompt=true."),
        "vllm_version": ver.get("version") if isinstance(ver, dict) else None,
        "tokenizer": "qwen3",
        "cases": cases,
    }
    with open(a.fixture, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    report["cases"] = cases
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(a.out)


if __name__ == "__main__":
    main()
