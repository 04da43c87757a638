#!/usr/bin/env python3
"""Write a tiny random-weight causal LM checkpoint that a real vLLM can serve.

The weights are random (seeded, so the same flags give the same files), the
architecture is a real one (Qwen3 or Llama), and the tokenizer files are the
real ones from tokenizer/testdata/models/<arch>, so token ids, chat templates
and block boundaries are exactly those of the real models. Only the numbers
the model computes are meaningless.

Run it with the vLLM venv's python (scripts/vllm-venv.sh), which has torch and
transformers:

    .cache/vllm-venv/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out .cache/models/tiny-qwen3

The output directory holds config.json, generation_config.json,
model.safetensors and the tokenizer files; it is never committed.

With --lora-out DIR it also writes a random LoRA adapter for that model in the
PEFT layout vLLM loads (adapter_config.json + adapter_model.safetensors,
targets q_proj and v_proj), written directly with safetensors so that peft
itself is not needed:

    .cache/vllm-venv/bin/python scripts/vllm-tiny-model.py --arch qwen3 --out .cache/models/tiny-qwen3 \
        --lora-out .cache/models/tiny-qwen3-lora
"""

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ARCHS = {
    # tokenizer dir name -> (config class, model class)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "llama3": ("LlamaConfig", "LlamaForCausalLM"),
}


def vocab_size_of(tok_dir, multiple):
    """Highest token id in tokenizer.json plus one, rounded up to `multiple`."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    top = max(tok["model"]["vocab"].values())
    for added in tok.get("added_tokens", []):
        top = max(top, added["id"])
    n = top + 1
    return (n + multiple - 1) // multiple * multiple


def token_id(tok_dir, text):
    """Id of a token given by its text, or None."""
    if not text:
        return None
    if isinstance(text, dict):  # AddedToken serialised as a dict
        text = text.get("content")
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    for added in tok.get("added_tokens", []):
        if added["content"] == text:
            return added["id"]
    return tok["model"]["vocab"].get(text)


def write_lora(args, config, base_dir):
    """A random rank-r LoRA on q_proj and v_proj of every layer, PEFT naming."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(args.seed + 1)
    r = args.lora_rank
    shapes = {  # module -> (in_features, out_features)
        "q_proj": (config.hidden_size, config.num_attention_heads * config.head_dim),
        "v_proj": (config.hidden_size, config.num_key_value_heads * config.head_dim),
    }
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for mod, (fan_in, fan_out) in shapes.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{mod}"
            tensors[f"{prefix}.lora_A.weight"] = (torch.randn(r, fan_in, generator=gen) * 0.02).to(getattr(torch, args.dtype))
            tensors[f"{prefix}.lora_B.weight"] = (torch.randn(fan_out, r, generator=gen) * 0.02).to(getattr(torch, args.dtype))
    os.makedirs(args.lora_out, exist_ok=True)
    save_file(tensors, os.path.join(args.lora_out, "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_dir,
        "r": r,
        "lora_alpha": 2 * r,
        "lora_dropout": 0.0,
        "target_modules": sorted(shapes),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
    }
    with open(os.path.join(args.lora_out, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(adapter_config, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=sorted(ARCHS), required=True,
                    help="architecture and tokenizer: qwen3 (Qwen3ForCausalLM) or llama3 (LlamaForCausalLM)")
    ap.add_argument("--out", required=True, help="output directory (created; existing files are replaced)")
    ap.add_argument("--tokenizer-dir", help="default: tokenizer/testdata/models/<arch>")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--max-position", type=int, default=8192,
                    help="max_position_embeddings, i.e. vLLM's default max_model_len")
    ap.add_argument("--vocab-multiple", type=int, default=128,
                    help="round the embedding rows up to a multiple of this")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lora-out", help="also write a random LoRA adapter (PEFT layout) into this directory")
    ap.add_argument("--lora-rank", type=int, default=8)
    args = ap.parse_args()

    import torch
    import transformers

    tok_dir = args.tokenizer_dir or os.path.join(REPO, "tokenizer", "testdata", "models", args.arch)
    if not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
        sys.exit(f"vllm-tiny-model: no tokenizer.json in {tok_dir} (run tokenizer/testdata/fetch_models.sh)")
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_cfg = json.load(f)

    vocab = vocab_size_of(tok_dir, args.vocab_multiple)
    bos = token_id(tok_dir, tok_cfg.get("bos_token"))
    eos = token_id(tok_dir, tok_cfg.get("eos_token"))
    pad = token_id(tok_dir, tok_cfg.get("pad_token"))

    config_cls_name, model_cls_name = ARCHS[args.arch]
    config_cls = getattr(transformers, config_cls_name)
    model_cls = getattr(transformers, model_cls_name)
    config = config_cls(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        max_position_embeddings=args.max_position,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    config.dtype = args.dtype

    torch.manual_seed(args.seed)
    model = model_cls(config).to(getattr(torch, args.dtype))
    model.eval()

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    gen = transformers.GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    gen.save_pretrained(args.out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok_dir, name), os.path.join(args.out, name))

    if args.lora_out:
        write_lora(args, config, os.path.abspath(args.out))

    n_params = sum(p.numel() for p in model.parameters())
    print(json.dumps({
        "out": args.out, "arch": model_cls_name, "params": n_params, "vocab_size": vocab,
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
        "head_dim": args.head_dim, "dtype": args.dtype, "bos": bos, "eos": eos, "pad": pad,
        "transformers": transformers.__version__, "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
