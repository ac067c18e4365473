#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus (tests/fuzz/corpus): small valid calls of each kind.

An input is: one byte choosing the entry point (api_fuzzer.cpp, LLVMFuzzerTestOneInput: 0-1
attention, 2 linear, 3 mha, 4-5 KV cache session, 6 pattern_attends, 7 the small entry points),
four bytes seeding the random data, then the bytes the call's decoder reads. Bytes below the
decoder's thresholds take the usual path, and a used-up input takes it too, so a short run of
small values is a small valid call; the fuzzer mutates from there.
"""
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
os.makedirs(out, exist_ok=True)
seeds = {
    "attention-small": [0, 1, 2, 3, 4] + [1, 5, 7, 1, 0, 0, 63],
    "attention-d64-gqa": [1, 9, 9, 9, 9] + [1, 12, 16, 1, 1, 12, 0],
    "attention-f16": [0, 7, 7, 7, 7] + [0, 4, 6, 0, 0, 16, 0, 1],
    "linear-small": [2, 5, 6, 7, 8] + [1, 3, 6, 7, 0],
    "linear-bf16": [2, 1, 1, 1, 1] + [0, 2, 16, 8, 2],
    "mha-small": [3, 3, 3, 3, 3] + [1, 4, 1, 6, 0],
    "kv-cache-append-decode": [4, 2, 2, 2, 2] + [0, 1, 0, 6, 0, 10, 0, 0, 0, 3, 0, 0, 2, 0, 0, 1],
    "kv-cache-session": [5, 8, 8, 8, 8] + [0, 1, 1, 16, 0, 12, 1, 0, 0, 5] + [0, 0, 2] * 6,
    "pattern-attends": [6, 4, 4, 4, 4] + [10, 10, 1, 5, 5, 4, 4, 4, 2, 3, 1, 7, 9],
    "small-entry-points": [7, 0, 0, 0, 0, 2, 2],
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(data))
