#!/usr/bin/env python3
"""examples/llm/compare.py: llm_generate against Hugging Face transformers, token for token.

Builds small random-weight models in transformers (a Llama with grouped-query heads, a Mistral
whose sliding window is shorter than the prompts, a Llama with Llama 3's rope scaling and tied
embeddings), saves each with save_pretrained() (config.json, model.safetensors, F32), and checks
the example on it against the same weights run by transformers in float64:
  - logits along the reference's tokens: each prompt fed in one step, then the reference's
    generated tokens one at a time (cached decoding); relative L2 error <= 1e-5 per prompt;
  - greedy ids for --new-tokens tokens, the prompts generated together: identical to the
    reference's, except after a step where the reference's top two logits are closer than 1e-4
    (where rounding may pick either).

Needs torch and transformers (pip; never a test's dependency):
  python3 examples/llm/compare.py --binary build/ci/examples/llm/llm_generate
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

COMMON = dict(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
              num_attention_heads=4, max_position_embeddings=512, rms_norm_eps=1e-5,
              initializer_range=0.1, bos_token_id=0, eos_token_id=1, pad_token_id=2)

CASES = {
    "llama_gqa": (LlamaForCausalLM,
                  LlamaConfig(num_key_value_heads=2, rope_theta=10000.0, **COMMON), [5, 17, 30]),
    "mistral_window": (MistralForCausalLM,
                       MistralConfig(num_key_value_heads=2, sliding_window=12, **COMMON),
                       [20, 33, 14]),
    "llama3_scaling": (LlamaForCausalLM,
                       LlamaConfig(num_key_value_heads=1, rope_theta=500000.0,
                                   tie_word_embeddings=True,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 32},
                                   **COMMON), [9, 40, 3]),
}


def run(binary, model_dir, prompts, extra):
    cmd = [binary, "--model", model_dir]
    for p in prompts:
        cmd += ["--prompt", ",".join(map(str, p))]
    out = subprocess.run(cmd + extra, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("llm_generate failed: " + out.stderr)
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ok = True
    for name, (cls, config, lengths) in CASES.items():
        torch.manual_seed(a.seed)
        config._attn_implementation = "eager"
        model = cls(config).eval()
        rng = np.random.default_rng(a.seed)
        prompts = [[int(x) for x in rng.integers(3, config.vocab_size, n)] for n in lengths]
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)  # F32 weights, config.json
            ref = model.to(torch.float64)
            # The reference: greedy tokens, one prompt at a time, and its logits along them.
            ref_ids, ref_logits = [], []
            with torch.no_grad():
                for p in prompts:
                    seq = list(p)
                    for _ in range(a.new_tokens):
                        logits = ref(torch.tensor([seq])).logits[0, -1]
                        seq.append(int(torch.argmax(logits)))
                    ref_ids.append(seq[len(p):])
                    full = ref(torch.tensor([seq[:-1]])).logits[0, len(p) - 1:]
                    ref_logits.append(full.numpy())
            # Logits along the reference's tokens (cached decoding, teacher-forced).
            path = os.path.join(d, "logits.npy")
            extra = ["--logits", path]
            for ids in ref_ids:
                extra += ["--follow", ",".join(map(str, ids[:-1]))]
            run(a.binary, d, prompts, extra)
            got = np.load(path).astype(np.float64)
            # Greedy generation of the prompts together.
            lines = run(a.binary, d, prompts, ["--new-tokens", str(a.new_tokens)]).split()
        print("== %s (%s, prompts of %s tokens, window %s)" %
              (name, cls.__name__, lengths, getattr(config, "sliding_window", None)))
        for b, p in enumerate(prompts):
            want = ref_logits[b]
            err = np.linalg.norm(got[b] - want) / np.linalg.norm(want)
            ids = [int(x) for x in lines[b].split(",")]
            top2 = np.sort(want, axis=1)[:, -2:]
            gaps = top2[:, 1] - top2[:, 0]
            same = 0
            while same < len(ids) and ids[same] == ref_ids[b][same]:
                same += 1
            tie = next((i for i, g in enumerate(gaps) if g < 1e-4), None)
            ids_ok = same == len(ids) or (tie is not None and tie <= same)
            ok = ok and err <= 1e-5 and ids_ok
            print("  prompt %d: logits rel L2 %.2e (<= 1e-5: %s); greedy ids identical for %d of "
                  "%d tokens%s (%s); smallest top-2 gap %.2e" %
                  (b, err, err <= 1e-5, same, len(ids),
                   "" if tie is None else ", first near tie at %d" % tie,
                   "ok" if ids_ok else "DIFFERENT", gaps.min()))
            print("    ids: " + ",".join(map(str, ids)))
    print("all agree" if ok else "DISAGREEMENT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
