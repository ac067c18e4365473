#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus (tests/fuzz/corpus): small valid calls of each kind.

An input is: one byte choosing the entry point (api_fuzzer.cpp, LLVMFuzzerTestOneInput, by the
byte % 8: 0-1 attention, but 1 from 128 on attngen_attention_varlen, 2 linear, 3 mha, 4-5 KV cache
session, 4's with pages and a rope sometimes, 6 pattern_attends, 7 the small entry points), four
bytes seeding the random data, then the bytes the call's decoder reads. Bytes below the decoder's
thresholds take the usual path, and a used-up input takes it too, so a short run of small values
is a small valid call; the fuzzer mutates from there.
"""
import os
import sys


def with_bytes(head, at, length):
    """head padded with zeros to length, with the bytes at the offsets of `at` set: for draws made
    late in a call (a rope's), found by offset."""
    data = head + [0] * (length - len(head))
    for offset, value in at.items():
        data[offset] = value
    return data


# Attention, B2 Sq13 Skv17 Hq4 Hkv2 D64: the rope's chance is byte 53 (drawn after the rest of the
# call); then rotary_dim 32 (byte 55), interleaved (56); q_positions (67) and k_positions (76).
attention_d64 = [1, 9, 9, 9, 9] + [1, 12, 16, 1, 1, 0, 12]
# Varlen, 4 sequences of q/k rows 6/11, 0/5, 8/0, 2/3, Hq4 Hkv2 D64, causal (byte 62); the rope's
# chance at 66 (full rotary dims, interleaved at 69), the size query's at 85.
varlen = [129, 3, 3, 3, 3] + [3, 0, 1, 1, 0, 12, 0] + [5, 10, 216, 4, 7, 216, 1, 2]
# KV cache: 1 layer, B2, Hkv2, D64, capacity 16, F32, no window (bytes 5-16); entry 4's sessions
# then draw pages (byte 17: 255, then their size and pool) and a rope (the next byte).
kv_create = [0, 0, 1, 1, 12, 0, 12, 15, 0, 0, 0, 0]
# With a rope (byte 18); then 5 operations: append 4 tokens (byte 38), decode 1 (54), append 1
# (75), decode 2 (91), MHA decode 1 (112).
kv_rope = [4, 2, 2, 2, 2] + kv_create + [0, 255] + [0] * 18 + [4]
# In pages of 16 slots, a pool of 9 (bytes 17-19), no rope (20); then 6 operations (byte 26).
kv_paged = [4, 3, 3, 3, 3] + kv_create + [255, 0, 200, 0] + [0] * 5 + [5] + [0, 0, 2] * 12

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
os.makedirs(out, exist_ok=True)
seeds = {
    "attention-small": [0, 1, 2, 3, 4] + [1, 5, 7, 1, 0, 0, 63],
    "attention-d64-gqa": [1, 9, 9, 9, 9] + [1, 12, 16, 1, 1, 12, 0],
    "attention-f16": [0, 7, 7, 7, 7] + [0, 4, 6, 0, 0, 16, 0, 1],
    "linear-small": [2, 5, 6, 7, 8] + [1, 3, 6, 7, 0],
    "linear-bf16": [2, 1, 1, 1, 1] + [0, 2, 16, 8, 2],
    "mha-small": [3, 3, 3, 3, 3] + [1, 4, 1, 6, 0],
    # (The two 0s after the window's byte: no pages, no rope.)
    "kv-cache-append-decode":
    [4, 2, 2, 2, 2] + [0, 1, 0, 6, 0, 10, 0, 0, 0, 3, 0, 0, 0, 0, 2, 0, 0, 1],
    "kv-cache-session": [5, 8, 8, 8, 8] + [0, 1, 1, 16, 0, 12, 1, 0, 0, 5] + [0, 0, 2] * 6,
    "pattern-attends": [6, 4, 4, 4, 4] + [10, 10, 1, 5, 5, 4, 4, 4, 2, 3, 1, 7, 9],
    "small-entry-points": [7, 0, 0, 0, 0, 2, 2],
    "attention-rope": with_bytes(attention_d64, {53: 255, 55: 16, 56: 1}, 57),
    "attention-rope-positions": with_bytes(attention_d64, {53: 255, 67: 255, 76: 255}, 77),
    "varlen-causal": with_bytes(varlen, {62: 1}, 63),
    "varlen-rope-size-query": with_bytes(varlen, {62: 1, 66: 255, 69: 1, 85: 255}, 86),
    "kv-cache-rope-session": with_bytes(
        kv_rope, {38: 0, 40: 3, 54: 2, 60: 1, 75: 0, 91: 2, 93: 1, 97: 1, 112: 3}, 113),
    "kv-cache-paged-session": kv_paged,
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(data))
