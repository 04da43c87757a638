#!/usr/bin/env python3
"""Writes the msgspec-encoded KV event fixtures of package kvevents.

Every payload is produced by the real msgspec encoder from structs declared with vLLM's own
options (vllm/distributed/kv_events.py): the batch is array_like; events are a tagged union
(tag=True, tag key "type", tag value = class name) that was array_like up to vLLM 0.23.x and a
map with omit_defaults from 0.24 on (PR #42892). Field order per era follows
vllm-kv-events.md §2.3. Hand-shaped payloads (reordered keys, unknown keys, map batches,
TRT-LLM events) are msgspec-encoded dicts, which keep their insertion order.

Writes <name>_msgspec.bin for each fixture and expectations.json with the decoded result each
payload must give (hashes normalised per §2.5, EAGLE pairs as the tokens they chain, plain block counts per
§4.2 step 5). Run from this directory:  python3 gen_fixtures.py
"""

import json
import os
from typing import Any

import msgspec

TS = 1700000000.5
U64 = (1 << 64) - 1

Hash = int | bytes

# ----------------------------------------------------------------------------------------------
# Struct declarations, one set per producer era.


class EventBatch2(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Batch before PR #18925: [ts, events]."""

    ts: float
    events: list[Any]


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Batch since PR #18925: [ts, events, data_parallel_rank]."""

    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class ArrayEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Array-form base of vLLM <= 0.23.x (omit_defaults has no effect on array_like)."""


class MapEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Map-form base of vLLM >= 0.24 (PR #42892)."""


def stored_fields(n):
    """The first n BlockStored fields in declaration order (§2.3)."""
    fields = [
        ("block_hashes", list[Hash], msgspec.NODEFAULT),
        ("parent_block_hash", Hash | None, msgspec.NODEFAULT),
        ("token_ids", list[Any], msgspec.NODEFAULT),
        ("block_size", Any, msgspec.NODEFAULT),
        ("lora_id", int | None, msgspec.NODEFAULT),
        ("medium", str | None, msgspec.NODEFAULT),
        ("lora_name", str | None, msgspec.NODEFAULT),
        ("extra_keys", list[Any] | None, None),
        ("group_idx", int | None, None),
        ("kv_cache_spec_kind", str | None, None),
        ("kv_cache_spec_sliding_window", int | None, None),
        ("locality", str | None, None),
    ]
    return fields[:n]


def removed_fields(n):
    fields = [
        ("block_hashes", Any, msgspec.NODEFAULT),
        ("medium", str | None, msgspec.NODEFAULT),
        ("group_idx", int | None, None),
        ("locality", str | None, None),
    ]
    return fields[:n]


def make_struct(name, base, fields):
    return msgspec.defstruct(name, fields, bases=(base,), tag="BlockStored" if name.startswith("BlockStored") else
                             "BlockRemoved" if name.startswith("BlockRemoved") else name)


# BlockStored array lengths including the tag: 6, 7, 8, 9, 10, 12 -> 5, 6, 7, 8, 9, 11 fields.
STORED_ARRAY = {n + 1: make_struct(f"BlockStored{n + 1}", ArrayEvent, stored_fields(n)) for n in (5, 6, 7, 8, 9, 11)}
REMOVED_ARRAY = {n + 1: make_struct(f"BlockRemoved{n + 1}", ArrayEvent, removed_fields(n)) for n in (1, 2, 3)}
ClearedArray = msgspec.defstruct("AllBlocksCleared", [], bases=(ArrayEvent,), tag="AllBlocksCleared")

StoredMap = make_struct("BlockStoredMap", MapEvent, stored_fields(12))
RemovedMap = make_struct("BlockRemovedMap", MapEvent, removed_fields(4))
ClearedMap = msgspec.defstruct("AllBlocksClearedMap", [], bases=(MapEvent,), tag="AllBlocksCleared")


def enc(obj):
    return msgspec.msgpack.encode(obj)


# ----------------------------------------------------------------------------------------------
# Expectation oracle (independent of the Go decoder).


def eh(h):
    """§2.5: uint -> value, negative int -> two's complement bits, bin -> last 8 bytes BE."""
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(bytes(h[-8:]).rjust(8, b"\0"), "big")
    return h & U64


def salt_of(extra_keys, lora_name, root):
    """vLLM puts a request's cache_salt last in block 0's extra keys: [salt] or [lora, salt]."""
    if not root or not extra_keys or extra_keys[0] is None:
        return None
    e = list(extra_keys[0])
    lead = [] if lora_name is None else [lora_name]
    if len(e) == len(lead) + 1 and e[:len(lead)] == lead and isinstance(e[-1], str) and e[-1]:
        return e[-1]
    return None


def plain_blocks(n, extra_keys, lora_name, mm_infos=None, root=False):
    salt = salt_of(extra_keys, lora_name, root)
    for j in range(n):
        e = extra_keys[j] if extra_keys is not None and j < len(extra_keys) else None
        plain = e is None or len(e) == 0 or (lora_name is not None and list(e) == [lora_name])
        if j == 0 and salt is not None:
            plain = True
        if mm_infos is not None and j < len(mm_infos) and mm_infos[j] is not None:
            plain = False
        if not plain:
            return j
    return n


def raw_tokens(tokens):
    """The tokens a decoded store holds: the ids, or for n chained EAGLE pairs (t_j, t_j+1) the
    n+1 tokens they are made of."""
    if tokens and isinstance(tokens[0], (list, tuple)):
        return [t[0] for t in tokens] + [tokens[-1][1]]
    return list(tokens)


def x_stored(hashes, parent, tokens, block_size, lora_id=None, medium=None, lora_name=None,
             extra_keys=None, group_idx=None, kind=None, window=None, locality=None, mm_infos=None,
             cache_salt=None):
    if cache_salt:  # the cache_salt key (SGLang, Dynamo's TRT-LLM publisher) names the salt
        return dict(x_stored(hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys,
                             group_idx, kind, window, locality, mm_infos), salt=cache_salt)
    return {
        "kind": "BlockStored",
        "hashes": [eh(h) for h in hashes],
        "parent": None if parent is None else eh(parent),
        "tokens": raw_tokens(tokens),
        **({"bigram": True} if tokens and isinstance(tokens[0], (list, tuple)) else {}),
        "block_size": block_size,
        "lora_id": lora_id,
        "medium": medium,
        "lora_name": lora_name,
        "group_idx": group_idx,
        "spec_kind": kind,
        "window": window,
        "locality": locality,
        "plain_blocks": plain_blocks(len(hashes), extra_keys, lora_name, mm_infos, parent is None),
        **({"salt": salt_of(extra_keys, lora_name, parent is None)}
           if salt_of(extra_keys, lora_name, parent is None) is not None else {}),
    }


def x_removed(hashes, medium=None, group_idx=None, locality=None):
    return {"kind": "BlockRemoved", "hashes": [eh(h) for h in hashes], "medium": medium,
            "group_idx": group_idx, "locality": locality}


X_CLEARED = {"kind": "AllBlocksCleared"}


def x_unknown(tag):
    return {"kind": "unknown", "unknown_tag": tag}


X_MALFORMED = {"kind": "malformed"}

# ----------------------------------------------------------------------------------------------
# Fixtures.

VECTOR_A = (
    "93cb41d954fc40200000939cab426c6f636b53746f726564927bcfffffffffffffffffc0940102030402c0a3475055c0"
    "92c0c000ae66756c6c5f617474656e74696f6ec094ac426c6f636b52656d6f766564917ba34750550091b0416c6c426c"
    "6f636b73436c656172656400")
VECTOR_B = (
    "93cb41d954fc40200000938ba474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573927bcfffffff"
    "ffffffffffb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f7369"
    "7a6502a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797392c0c0"
    "a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474"
    "797065ac426c6f636b52656d6f766564ac626c6f636b5f686173686573917ba66d656469756da3475055a967726f7570"
    "5f6964780081a474797065b0416c6c426c6f636b73436c656172656400")
VECTOR_C = (
    "92cb41d954fc402000009296ab426c6f636b53746f72656492fe05c0940102030402c092ac426c6f636b52656d6f7665"
    "6491fe")
VECTOR_D = (
    "93cb41d954fc402000009183a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391c420aaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa0102030405060708a66d656469756da343505503")

fixtures = []  # (name, payload bytes, expectation dict)


def add(name, payload, events=None, rank=None, ts=TS, error=None):
    if error is not None:
        fixtures.append((name, payload, {"error": error}))
        return
    fixtures.append((name, payload, {"ts": ts, "rank": rank, "events": events}))


def vectors():
    a_args = dict(hashes=[123, U64], parent=None, tokens=[1, 2, 3, 4], block_size=2, lora_id=None,
                  medium="GPU", lora_name=None, extra_keys=[None, None], group_idx=0,
                  kind="full_attention", window=None)
    a = enc(EventBatch(TS, [STORED_ARRAY[12](a_args["hashes"], None, [1, 2, 3, 4], 2, None, "GPU", None,
                                             [None, None], 0, "full_attention", None),
                            REMOVED_ARRAY[4]([123], "GPU", 0), ClearedArray()], 0))
    assert a.hex() == VECTOR_A, a.hex()
    want = [x_stored(**a_args), x_removed([123], "GPU", 0), X_CLEARED]
    add("vector_a_array12", a, want, rank=0)

    b = enc(EventBatch(TS, [StoredMap([123, U64], None, [1, 2, 3, 4], 2, None, "GPU", None, [None, None], 0,
                                      "full_attention"),
                            RemovedMap([123], "GPU", 0), ClearedMap()], 0))
    assert b.hex() == VECTOR_B, b.hex()
    add("vector_b_map", b, want, rank=0)

    c = enc(EventBatch2(TS, [STORED_ARRAY[6]([-2, 5], None, [1, 2, 3, 4], 2, None), REMOVED_ARRAY[2]([-2])]))
    assert c.hex() == VECTOR_C, c.hex()
    add("vector_c_original", c, [x_stored([-2, 5], None, [1, 2, 3, 4], 2), x_removed([-2])])

    h32 = b"\xaa" * 24 + bytes(range(1, 9))
    d = enc(EventBatch(TS, [RemovedMap([h32], "CPU")], 3))
    assert d.hex() == VECTOR_D, d.hex()
    add("vector_d_map_bin_cpu", d, [x_removed([h32], "CPU")], rank=3)


def eras():
    toks = list(range(100, 132))
    hs = [1001, 1002]
    base = ([1001, 1002], 1000, toks, 16, None)
    # (stored length, removed length, batch has rank)
    for sl, rl in ((6, 2), (7, 3), (8, 3), (9, 3), (10, 4), (12, 4)):
        s_vals = list(base)
        s_kw = {}
        if sl >= 7:
            s_vals.append("GPU")
            s_kw["medium"] = "GPU"
        if sl >= 8:
            s_vals.append("sql-lora")
            s_kw["lora_name"] = "sql-lora"
            s_vals[4] = 7
        if sl >= 9:
            s_vals.append([["sql-lora"], ["sql-lora"]])
            s_kw["extra_keys"] = [["sql-lora"], ["sql-lora"]]
        if sl >= 10:
            s_vals.append(0)
            s_kw["group_idx"] = 0
        if sl >= 12:
            s_vals += ["mla_attention", None]
            s_kw["kind"] = "mla_attention"
        r_vals = [[1001]]
        r_kw = {}
        if rl >= 3:
            r_vals.append("GPU")
            r_kw["medium"] = "GPU"
        if rl >= 4:
            r_vals.append(0)
            r_kw["group_idx"] = 0
        events = [STORED_ARRAY[sl](*s_vals), REMOVED_ARRAY[rl](*r_vals), ClearedArray()]
        want = [x_stored(hs, 1000, toks, 16, lora_id=s_vals[4], **s_kw), x_removed([1001], **r_kw), X_CLEARED]
        if sl == 6:
            add(f"era_stored{sl}_removed{rl}_batch2", enc(EventBatch2(TS, events)), want)
        else:
            add(f"era_stored{sl}_removed{rl}", enc(EventBatch(TS, events, 0)), want, rank=0)


def map_forms():
    # Defaults omitted: only the fields without a default, plus locality on the remove.
    ev = [StoredMap([7, 8], 6, list(range(32)), 16, None, None, None),
          RemovedMap([7], "GPU", locality="LOCAL"),
          StoredMap([9], 8, list(range(32, 48)), 16, None, "gpu", None, locality="REMOTE")]
    want = [x_stored([7, 8], 6, list(range(32)), 16),
            x_removed([7], "GPU", locality="LOCAL"),
            x_stored([9], 8, list(range(32, 48)), 16, medium="gpu", locality="REMOTE")]
    add("map_defaults_omitted", enc(EventBatch(TS, ev, 1)), want, rank=1)

    # Keys reordered (extra_keys before lora_name), unknown keys with nested values, map batch.
    stored = {
        "event_version": 2,
        "extra_keys": [["sql-lora"], ["sql-lora", "salt"]],
        "ownership": {"owner": ["a", {"b": None, "c": [1.5, b"\x00"]}], "n": -1},
        "token_ids": [5, 6, 7, 8],
        "lora_name": "sql-lora",
        "block_size": 2,
        "type": "BlockStored",
        "parent_block_hash": None,
        "lora_id": 3,
        "block_hashes": [11, 12],
        "medium": "GPU",
        "remaining_copy_counts": [[1, 2], {"x": 3}],
    }
    removed = {"remaining_copy_counts": [0], "block_hashes": [11, 12], "type": "BlockRemoved",
               "unknown_nil": None, "unknown_float": 2.5}
    batch = {"data_parallel_rank": 2, "publisher_id": {"id": [1, 2]}, "events": [stored, removed], "ts": 17}
    want = [x_stored([11, 12], None, [5, 6, 7, 8], 2, lora_id=3, medium="GPU", lora_name="sql-lora",
                     extra_keys=[["sql-lora"], ["sql-lora", "salt"]]),
            x_removed([11, 12])]
    add("map_batch_reordered_unknown_keys", enc(batch), want, rank=2, ts=17.0)

    # Mixed array and map events in one batch; 4-element batch (publisher_id proposal).
    ev = [STORED_ARRAY[7]([21], None, [1, 2], 2, None, "GPU"),
          RemovedMap([21], "GPU"),
          ClearedArray(),
          ClearedMap()]
    want = [x_stored([21], None, [1, 2], 2, medium="GPU"), x_removed([21], "GPU"), X_CLEARED, X_CLEARED]
    add("batch4_mixed_array_map", enc([TS, ev, 5, "publisher-7"]), want, rank=5)

    # Arrays with extra trailing elements beyond every known field.
    stored = ["BlockStored", [31], None, [1, 2], 2, None, "GPU", None, None, 0, "full_attention", None,
              "LOCAL", {"future": [1, 2]}, 99]
    removed = ["BlockRemoved", [31], "GPU", 0, None, [1, 2, 3]]
    want = [x_stored([31], None, [1, 2], 2, medium="GPU", group_idx=0, kind="full_attention", locality="LOCAL"),
            x_removed([31], "GPU", 0)]
    add("array_extra_trailing", enc([TS, [stored, removed], None]), want)

    # Batch with float32 ts and int ts; nil rank.
    add("batch_int_ts_nil_rank", enc([1700000000, [ClearedArray()], None]), [X_CLEARED], ts=1700000000.0)


def hashes():
    hs = [0, 5, 127, 200, 65535, 70000, (1 << 32) + 1, (1 << 63) + 5, U64,
          -1, -32, -33, -100, -30000, -(1 << 31), -(1 << 63),
          bytes(range(1, 9)), bytes(range(1, 17)), bytes(range(1, 33)), bytes(range(1, 65)),
          b"\x01\x02\x03", b""]
    toks = list(range(len(hs) * 2))
    parent = b"\xff" * 31 + b"\x07"
    ev = [STORED_ARRAY[12](hs, parent, toks, 2, None, "GPU", None, None, None, None, None),
          StoredMap(hs[:4], -7, toks[:8], 2, None, None, None),
          REMOVED_ARRAY[4](hs, "GPU", None)]
    want = [x_stored(hs, parent, toks, 2, medium="GPU"),
            x_stored(hs[:4], -7, toks[:8], 2),
            x_removed(hs, "GPU")]
    add("hash_widths_ints_bins", enc(EventBatch(TS, ev, 0)), want, rank=0)


def tokens():
    # EAGLE pairs as SGLang sends a bigram page: (t_j, t_j+1), each starting with the token the
    # one before ends with; in every int width.
    raw = [5, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 70000]
    pairs = [[raw[i], raw[i + 1]] for i in range(8)]
    ev = [STORED_ARRAY[12]([41, 42], None, pairs, 4, None, "GPU", None, None, None, None, None),
          StoredMap([43], 42, [0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1], 8, None, None, None),
          # Malformed pair lists: a broken chain, ints mixed with pairs, a triple.
          StoredMap([44], None, [[1, 2], [3, 4]], 2, None, None, None),
          StoredMap([45], None, [[1, 2], 2], 2, None, None, None),
          StoredMap([46], None, [1, [1, 2]], 2, None, None, None),
          StoredMap([47], None, [[1, 2, 3], [3, 4]], 2, None, None, None),
          StoredMap([48], None, [[1, 2]], 1, None, None, None)]
    want = [x_stored([41, 42], None, pairs, 4, medium="GPU"),
            x_stored([43], 42, [0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1], 8),
            X_MALFORMED, X_MALFORMED, X_MALFORMED, X_MALFORMED,
            x_stored([48], None, [[1, 2]], 1)]
    add("tokens_eagle_pairs_widths", enc(EventBatch(TS, ev, 0)), want, rank=0)


def extra_keys():
    toks = list(range(8))
    cases = [
        ("none", None, None),
        ("all_nil", [None, None, None, None], None),
        ("empty_tuples", [[], [], [], []], None),
        ("lora_only", [["sql-lora"]] * 4, "sql-lora"),
        ("lora_mismatch", [["other"], None, None, None], "sql-lora"),
        ("lora_without_name", [["sql-lora"], None, None, None], None),
        ("mm_block2", [None, None, [["img-1", 0]], [["img-1", 2]]], None),
        ("salt_block0", [["salt-abc"], None, None, None], None),
        ("lora_and_salt", [["sql-lora", "salt"], ["sql-lora"], ["sql-lora"], ["sql-lora"]], "sql-lora"),
        ("embeds_block1", [None, [b"\x01" * 32], None, None], None),
        ("short_list", [None], None),
    ]
    ev, want = [], []
    for i, (_, ek, lora) in enumerate(cases):
        hs = [100 * (i + 1) + j for j in range(4)]
        ev.append(StoredMap(hs, None, toks, 2, None, "GPU", lora, ek))
        want.append(x_stored(hs, None, toks, 2, medium="GPU", lora_name=lora, extra_keys=ek))
    add("extra_keys_variants", enc(EventBatch(TS, ev, 0)), want, rank=0)


def trtllm():
    # Dynamo's TRT-LLM publisher: one map event per batch, signed int64 hashes, no medium.
    hs = [-(1 << 62) - 3, 4611686018427387913, -1]
    ev = {"type": "BlockStored", "block_hashes": hs, "parent_block_hash": -9, "token_ids": list(range(48)),
          "block_size": 16}
    add("trtllm_stored_signed", enc([TS, [ev], 0]), [x_stored(hs, -9, list(range(48)), 16)], rank=0)
    mm = [None, {"mm_hashes": [[1, 2]], "offsets": [[0, 4]]}, None]
    ev = {"type": "BlockStored", "block_hashes": hs, "parent_block_hash": None, "token_ids": list(range(48)),
          "block_size": 16, "lora_name": None, "block_mm_infos": mm}
    add("trtllm_stored_mm_infos", enc([TS, [ev], 0]), [x_stored(hs, None, list(range(48)), 16, mm_infos=mm)],
        rank=0)
    add("trtllm_removed", enc([TS, [{"type": "BlockRemoved", "block_hashes": [hs[0]]}], 0]),
        [x_removed([hs[0]])], rank=0)
    add("trtllm_cleared", enc([TS, [{"type": "AllBlocksCleared"}], 0]), [X_CLEARED], rank=0)


def cache_salt_key():
    # SGLang and Dynamo's TRT-LLM publisher send the salt as the map key "cache_salt", on every
    # store of a salted request (vLLM: in block 0's extra_keys). No array form has a slot for it.
    toks = list(range(4))

    def ev(hs, parent, **kw):
        return {"type": "BlockStored", "block_hashes": hs, "parent_block_hash": parent, "token_ids": toks,
                "block_size": 2, **kw}

    events = [
        ev([401, 402], None, cache_salt="tenant-a"),
        ev([403, 404], 402, cache_salt="tenant-a"),                       # a continuation carries it too
        ev([405, 406], None, cache_salt=None),                            # nil: no salt
        ev([407, 408], None, cache_salt=""),                              # empty: no salt
        ev([409, 410], None, cache_salt="tenant-a", extra_keys=[["tenant-a"], None]),  # both, agreeing
        {"cache_salt": "tenant-c", "session_id": "s-1", **ev([411, 412], None, lora_id=None, medium="GPU")},
        ev([413, 414], None, cache_salt="tenant-b", extra_keys=[["tenant-a"], None]),  # both, disagreeing
        ev([415, 416], None, cache_salt=7),                               # not a str
    ]
    want = [
        x_stored([401, 402], None, toks, 2, cache_salt="tenant-a"),
        x_stored([403, 404], 402, toks, 2, cache_salt="tenant-a"),
        x_stored([405, 406], None, toks, 2),
        x_stored([407, 408], None, toks, 2),
        x_stored([409, 410], None, toks, 2, extra_keys=[["tenant-a"], None], cache_salt="tenant-a"),
        x_stored([411, 412], None, toks, 2, medium="GPU", cache_salt="tenant-c"),
        X_MALFORMED,
        X_MALFORMED,
    ]
    add("cache_salt_key", enc([TS, events, 0]), want, rank=0)


def unknown_and_malformed():
    ev = [["BlockUpdated", [1, 2], {"x": [None]}],
          {"type": "Heartbeat", "seq": 5, "nested": {"a": [1, [2, [3]]]}},
          STORED_ARRAY[7]([51], None, [1, 2], 2, None, "GPU"),
          ClearedArray()]
    want = [x_unknown("BlockUpdated"), x_unknown("Heartbeat"), x_stored([51], None, [1, 2], 2, medium="GPU"),
            X_CLEARED]
    add("unknown_tags", enc(EventBatch(TS, ev, 0)), want, rank=0)

    good = STORED_ARRAY[7]([61], None, [1, 2], 2, None, "GPU")
    ev = [
        STORED_ARRAY[7]([62], None, [1, 1 << 32], 2, None, "GPU"),          # token > 2^32-1
        STORED_ARRAY[7]([63], None, [1, -2], 2, None, "GPU"),               # negative token
        STORED_ARRAY[7](63, None, [1, 2], 2, None, "GPU"),                  # block_hashes not an array
        STORED_ARRAY[7]([64], None, [1, 2], "2", None, "GPU"),              # block_size not an int
        STORED_ARRAY[7](["h"], None, [1, 2], 2, None, "GPU"),               # hash is a str
        REMOVED_ARRAY[3]([1.5], "GPU"),                                     # hash is a float
        {"type": "BlockStored", "block_hashes": [65], "token_ids": [[1, 2, 3]], "block_size": 2},  # bad pair
        {"type": "BlockStored", "block_hashes": [66], "token_ids": [1, 2], "block_size": 2, "medium": 5},
        {"type": "BlockStored", "block_hashes": [67], "token_ids": [1, 2], "block_size": 2,
         "extra_keys": "salt"},                                              # extra_keys not an array
        {"type": "BlockStored", "block_hashes": [68], "token_ids": [1, 2], "block_size": 2,
         "group_idx": (1 << 64) - 1},                                       # group_idx overflows int64
        {"type": 7},                                                        # tag not a str
        [],                                                                 # empty array event
        "BlockStored",                                                      # event neither array nor map
        good,
    ]
    want = [X_MALFORMED] * (len(ev) - 1) + [x_stored([61], None, [1, 2], 2, medium="GPU")]
    add("malformed_events_then_valid", enc(EventBatch(TS, ev, 0)), want, rank=0)


def media_and_groups():
    ev, want = [], []
    for i, m in enumerate(["GPU", "gpu", "CPU", "STORAGE", "FS", "OBJ", "DISK", "TAPE", None]):
        ev.append(RemovedMap([200 + i], m))
        want.append(x_removed([200 + i], m))
    add("media_removed", enc(EventBatch(TS, ev, 0)), want, rank=0)

    toks = list(range(4))
    specs = [(None, None, None), (0, None, None), (1, None, None), (0, "full_attention", None),
             (1, "mla_attention", None), (2, "sliding_window", 128), (3, "mamba", None),
             (1, "sink_full_attention", None), (0, "chunked_local_attention", None)]
    ev, want = [], []
    for i, (g, k, w) in enumerate(specs):
        ev.append(StoredMap([300 + i], None, toks, 4, None, "GPU", None, None, g, k, w))
        want.append(x_stored([300 + i], None, toks, 4, medium="GPU", group_idx=g, kind=k, window=w))
    add("hybrid_groups", enc(EventBatch(TS, ev, 0)), want, rank=0)


def batch_errors():
    a = bytes.fromhex(VECTOR_A)
    add("batch_truncated_vector_a", a[:60], error="truncated")
    add("batch_truncated_header", a[:5], error="truncated")
    add("batch_garbage", bytes([0xc1, 0x00, 0xff, 0x12]), error="garbage")
    add("batch_outer_string", enc("KVEventBatch"), error="outer type")
    add("batch_outer_array1", enc([TS]), error="outer array too short")
    add("batch_events_not_array", enc([TS, {"a": 1}, 0]), error="events not an array")
    add("batch_rank_not_int", enc([TS, [], "0"]), error="rank not an int")
    add("batch_trailing_bytes", a + b"\x00", error="trailing bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    vectors()
    eras()
    map_forms()
    hashes()
    tokens()
    extra_keys()
    trtllm()
    cache_salt_key()
    unknown_and_malformed()
    media_and_groups()
    batch_errors()
    out = []
    for name, payload, want in fixtures:
        fname = f"{name}_msgspec.bin"
        with open(os.path.join(here, fname), "wb") as f:
            f.write(payload)
        out.append({"file": fname, **want})
    with open(os.path.join(here, "expectations.json"), "w") as f:
        json.dump({"msgspec_version": msgspec.__version__, "fixtures": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
