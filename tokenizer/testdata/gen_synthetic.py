#!/usr/bin/env python3
"""Builds two small tokenizer.json files that exercise features the Qwen3 and
Llama-3 files do not use, and records Hugging Face tokenizers' ids for a list of
probe strings. Writes synthetic_<name>_tokenizer.json and synthetic_expect.json.

    pip install tokenizers && python3 tokenizer/testdata/gen_synthetic.py
"""
import json
import os

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.pre_tokenizers import ByteLevel

HERE = os.path.dirname(os.path.abspath(__file__))

PROBES = ["hello world", "say <sw> now", "say<sw>now", "x <ls>  y", "x   <ls>y", "a<rs>   b", "a <rs>\n\nb",
          "ﬁx the ﬁle", "fix it", "<eos> inside", "  leading and trailing  ", "naïve café 😀", "",
          "<sw>", "<rs><rs> <ls><ls>", "hello\u3000world\u00a0!", "ZZZ unknown ☃ chars", "ab" * 40,
          "<s>hello world</s>", "</s> hello", " hello  world ", "▁hello▁▁world", "hello</s>world <s> x",
          "a\ufffdb \ufffd", "tab\there", "abc", "xabcx", "abab bc", "off", "oﬀ", "ﬀo", "a ff"]


def byte_level():
    alphabet = ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))}
    merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"),
                 ("Ġwor", "l"), ("Ġworl", "d"), ("f", "i"), ("fi", "x"), ("a", "b"), ("ab", "ab")]:
        vocab.setdefault(a + b, len(vocab))
        merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=False))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken("<sw>", single_word=True, normalized=False),
                    AddedToken("<ls>", lstrip=True, normalized=False),
                    AddedToken("<rs>", rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("fix", normalized=True)])
    tok.add_special_tokens([AddedToken("<bos>", normalized=False), AddedToken("<eos>", normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B:1 <eos>:1",
        special_tokens=[("<bos>", tok.token_to_id("<bos>")), ("<eos>", tok.token_to_id("<eos>"))])
    return tok


def sentencepiece(style="normalizer"):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for p in ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "b", "i", "t", "s", "y", "n", "x", "f", "c", "é"]:
        vocab.setdefault(p, len(vocab))
    merges = []
    for a, b in [("▁", "h"), ("e", "l"), ("▁h", "el"), ("l", "o"), ("▁hel", "lo"), ("▁", "w"), ("o", "r"),
                 ("▁w", "or"), ("l", "d"), ("▁wor", "ld"), ("a", "b"), ("ab", "ab")]:
        vocab.setdefault(a + b, len(vocab))
        merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if style == "normalizer":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    elif style == "metaspace_first":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.add_special_tokens([AddedToken("<s>", normalized=False), AddedToken("</s>", normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B:1", special_tokens=[("<s>", 1)])
    return tok


def overlap():
    """No normalizer: normalized added tokens still match after the others."""
    vocab = {c: i for i, c in enumerate("abcx ")}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.add_tokens([AddedToken("ab", normalized=True), AddedToken("bc", normalized=False)])
    return tok


def normalized_content():
    """A normalized added token is matched by its normalized content."""
    vocab = {c: i for i, c in enumerate("abcfo▁ x")}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Prepend("▁")])
    tok.add_tokens([AddedToken("ﬀ", normalized=True)])
    return tok


def main():
    expect = {}
    for name, tok in [("bytelevel", byte_level()), ("sentencepiece", sentencepiece()),
                      ("metaspace_first", sentencepiece("metaspace_first")),
                      ("metaspace_always", sentencepiece("metaspace_always")), ("overlap", overlap()),
                      ("normalized_content", normalized_content())]:
        path = os.path.join(HERE, f"synthetic_{name}_tokenizer.json")
        tok.save(path)
        expect[name] = [{"text": p, "special": s, "ids": tok.encode(p, add_special_tokens=s).ids}
                        for p in PROBES for s in (True, False)]
    with open(os.path.join(HERE, "synthetic_expect.json"), "w") as f:
        json.dump(expect, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
