#!/usr/bin/env python3
"""Compares sentence_embedding (attngen) with the PyTorch reference (sentence-transformers).

Runs the C++ program and SentenceTransformer(model_dir) on a dozen real sentences and prints,
per sentence, the cosine between the two embeddings and whether the WordPiece tokens agree,
then both cosine-similarity matrices. Also checks --dump-qk's files of one sentence against
PyTorch's projected Q and K. Exits 1 if a cosine is below --min-cosine, the tokens differ or
the dump is off. --also-binary compares a second build too (e.g. an aarch64 one under qemu, with
--also-runner). Needs sentence-transformers (pip install sentence-transformers; never needed
by the build or the tests):

  python3 examples/sentence_embedding/compare.py \\
      --binary build/release/examples/sentence_embedding/sentence_embedding \\
      --model build/models/all-MiniLM-L6-v2
"""
import argparse
import shlex
import subprocess
import sys

import numpy as np

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "Hello!",
    "What's the weather like in Zürich today? I heard it's -5°C… brr!",
    "C++17 templates & Halide's scheduling: vectorize(x, 16), parallel(y); 3.14159 ≈ π.",
    "Un perro corre por la playa; «¡qué día!», dijo María, naïve café résumé façade.",
    "The quick brown fox jumps over the lazy dog, while the industrious beaver, undeterred "
    "by the rain, builds its dam again near the riverbank; meanwhile e-mail addresses "
    "(someone@example.com), URLs (https://example.org/a?b=c) and numbers like 1,000,000 "
    "appear in the same sentence, which keeps going for a good while longer than most.",
    # Past max_seq_length (256 tokens): truncated alike by both.
    " ".join(["Attention kernels generated ahead of time run sentence embeddings quickly."] * 30),
]


def run_cpp(runner, binary, model, extra):
    cmd = shlex.split(runner) + [binary, "--model", model, "--file", "-"] + extra
    out = subprocess.run(cmd, input="\n".join(SENTENCES) + "\n", capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()


def cpp_embeddings(runner, binary, model):
    lines = run_cpp(runner, binary, model, [])
    return np.array([[float(v) for v in l.split()] for l in lines], dtype=np.float64)


def check_dump(runner, binary, model, st, sentence):
    """--dump-qk of one sentence against the projected Q and K of PyTorch's BertModel."""
    import os
    import tempfile
    import torch

    bert = st[0].auto_model
    enc = st.tokenizer(sentence, return_tensors="pt")
    caps = {}
    hooks = []
    for i, layer in enumerate(bert.encoder.layer):
        for w, lin in (("q", layer.attention.self.query), ("k", layer.attention.self.key)):
            hooks.append(lin.register_forward_hook(
                lambda mod, inp, out, key=(i, w): caps.__setitem__(key, out[0].numpy())))
    with torch.no_grad():
        bert(**enc)
    for h in hooks:
        h.remove()
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(shlex.split(runner) + [binary, "--model", model, "--dump-qk", d, sentence],
                       check=True, capture_output=True)
        with open(os.path.join(d, "tokens.txt"), encoding="utf-8") as f:
            tokens = f.read().split("\n")[:-1]
        same = tokens == st.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        for (i, w), ref in sorted(caps.items()):
            got = np.load(os.path.join(d, f"layer{i}_{w}.npy"))
            assert got.dtype == np.float32 and got.shape[1:] == (bert.config.num_attention_heads,
                                                                bert.config.hidden_size //
                                                                bert.config.num_attention_heads)
            worst = max(worst, np.linalg.norm(got - ref.reshape(got.shape)) / np.linalg.norm(ref))
    print(f"--dump-qk of {sentence!r}: {len(caps)} files, shape {got.shape}, tokens "
          f"{'agree' if same else 'DIFFER'}, max rel L2 against PyTorch's Q/K {worst:.2e}")
    return same and worst < 1e-4


def cosine_matrix(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def print_matrix(title, m):
    print(title)
    print("      " + " ".join(f"{j:>6}" for j in range(len(m))))
    for i, row in enumerate(m):
        print(f"{i:>4}  " + " ".join(f"{v:6.3f}" for v in row))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="the sentence_embedding program")
    ap.add_argument("--runner", default="", help="prefix, e.g. 'qemu-aarch64-static -L ...'")
    ap.add_argument("--model", default="build/models/all-MiniLM-L6-v2")
    ap.add_argument("--also-binary", help="a second build to compare (e.g. aarch64)")
    ap.add_argument("--also-runner", default="")
    ap.add_argument("--min-cosine", type=float, default=0.99999)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    st = SentenceTransformer(args.model, device="cpu")
    ref = st.encode(SENTENCES, batch_size=32, convert_to_numpy=True).astype(np.float64)
    ref_tokens = [
        st.tokenizer.convert_ids_to_tokens(ids)
        for ids in getattr(st, "preprocess", st.tokenize)(SENTENCES)["input_ids"].tolist()
    ]
    # Strip the padding of the batch.
    ref_tokens = [[t for t in toks if t != "[PAD]"] for toks in ref_tokens]

    got = cpp_embeddings(args.runner, args.binary, args.model)
    cpp_tokens = [l.split("\t") for l in run_cpp(args.runner, args.binary, args.model,
                                                  ["--tokens"])]
    also = (cpp_embeddings(args.also_runner, args.also_binary, args.model)
            if args.also_binary else None)

    ok = True
    cos = np.sum(got * ref, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    header = f"{'#':>2} {'tokens':>6} {'same tokens':>11} {'cos(attngen, torch)':>20} {'1 - cos':>8}"
    if also is not None:
        cos2 = np.sum(got * also, axis=1) / (np.linalg.norm(got, axis=1) *
                                              np.linalg.norm(also, axis=1))
        cos3 = np.sum(also * ref, axis=1) / (np.linalg.norm(also, axis=1) *
                                              np.linalg.norm(ref, axis=1))
        header += f" {'1 - cos(attngen, also)':>22} {'1 - cos(also, torch)':>20}"
    print(header + "  sentence")
    for i, s in enumerate(SENTENCES):
        same = cpp_tokens[i] == ref_tokens[i]
        line = (f"{i:>2} {len(cpp_tokens[i]):>6} {('yes' if same else 'NO'):>11} {cos[i]:>20.9f}"
                f" {1 - cos[i]:>8.1e}")
        bad = not same or cos[i] < args.min_cosine
        if also is not None:
            line += f" {1 - cos2[i]:>22.1e} {1 - cos3[i]:>20.1e}"
            bad = bad or cos2[i] < args.min_cosine or cos3[i] < args.min_cosine
        ok = ok and not bad
        print(line + "  " + (s if len(s) <= 50 else s[:47] + "..."))
        if not same:
            print("     attngen:", cpp_tokens[i])
            print("     torch:  ", ref_tokens[i])
    print(f"min cosine {cos.min():.9f}, max |attngen - torch| {np.abs(got - ref).max():.3e}")
    if also is not None:
        print(f"also: min cosine with attngen {cos2.min():.9f} and with torch {cos3.min():.9f}, "
              f"max |attngen - also| {np.abs(got - also).max():.3e}, "
              f"max |also - torch| {np.abs(also - ref).max():.3e}")
    print()
    print_matrix("cosine similarity, attngen:", cosine_matrix(got, got))
    print()
    print_matrix("cosine similarity, PyTorch (sentence-transformers):", cosine_matrix(ref, ref))
    print()
    print(f"max |difference| of the similarity matrices: "
          f"{np.abs(cosine_matrix(got, got) - cosine_matrix(ref, ref)).max():.3e}")
    print()
    ok = check_dump(args.runner, args.binary, args.model, st, SENTENCES[1]) and ok
    if not ok:
        print(f"FAIL: a cosine below {args.min_cosine} or tokens that differ", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
