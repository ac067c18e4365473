#!/usr/bin/env python3
"""The innermost loops of the ARM kernels, read from the generated assembly: for each loop that
multiplies (fmla / sdot on aarch64; vmla / vmul / vfma on 32-bit ARM), its instructions per
iteration, its multiply instructions, loads, stores and the spills among them (LLVM's
"Folded Spill" / "Folded Reload" comments), named by the Halide loop it is (LLVM's block comment:
dot.s1.rd$x is q.k, acc.s1.rj_pv$x / block_pv... is p.v). Model figures of the code, not timings
(no ARM board): where a loop spends instructions besides its products.

    bench/arm_loops.py build/aarch64/generated build/armv7/generated [--kernels REGEX] [--all]

Prints a markdown table per kernel (attention f32 kernels by default: --kernels
'^attn_f32_.*__(aarch64_neon|armv7_neon32)$'). --all lists loops without products too.
"""
import argparse
import os
import re
import sys

LABEL = re.compile(r'^(\.?L\w+):\s*(?:[/@;]+\s*(.*))?$')
BRANCH = re.compile(r'^\s+(b(?:\.\w+)?|b[a-z]{2}|cbn?z|tbn?z)\s+(?:[^,]+,\s*)*(\.?L\w+)\s*$')
PRODUCT = re.compile(r'^\s+(fmla|sdot|udot|vmla\.f32|vfma\.f32|vmul\.f32|vmla\.i32)\b')
LOAD = re.compile(r'^\s+(ldr|ldp|ldur|ld1\w*|ld2|ld3|ld4|vld\w*|vldr)\b')
STORE = re.compile(r'^\s+(str|stp|stur|st1\w*|vst\w*|vstr)\b')


def instruction(line):
    s = line.strip()
    return line.startswith('\t') and s and not s.startswith(('.', '//', '@', ';'))


def loops(lines):
    """(name, body lines) of each innermost loop: from its header label to the branch back."""
    out = []
    for i, line in enumerate(lines):
        m = LABEL.match(line)
        if not m:
            continue
        window = ' '.join(lines[i:i + 6])
        if 'Inner Loop Header' not in window:
            continue
        label, comment = m.group(1), m.group(2) or ''
        name = re.search(r'%"?for ([^"\s]+)', comment)
        for j in range(i + 1, min(len(lines), i + 20000)):
            b = BRANCH.match(lines[j])
            if b and b.group(2) == label:
                body = [x for x in lines[i + 1:j + 1] if instruction(x)]
                out.append((name.group(1) if name else label, body))
                break
    return out


def stats(body):
    products = sum(1 for x in body if PRODUCT.match(x))
    loads = sum(1 for x in body if LOAD.match(x))
    stores = sum(1 for x in body if STORE.match(x))
    spills = sum(1 for x in body if 'Folded Spill' in x or 'Folded Reload' in x or 'Spill' in x)
    return len(body), products, loads, stores, spills


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('dirs', nargs='+')
    ap.add_argument('--kernels', default=r'^attn_f32_.*__(aarch64_neon|armv7_neon32)$')
    ap.add_argument('--all', action='store_true')
    args = ap.parse_args()
    pattern = re.compile(args.kernels)
    found = 0
    for d in args.dirs:
        for f in sorted(os.listdir(d)):
            if not f.endswith('.s') or not pattern.search(f[:-2]):
                continue
            found += 1
            with open(os.path.join(d, f)) as fh:
                lines = fh.read().split('\n')
            rows = []
            for name, body in loops(lines):
                n, p, ld, st, sp = stats(body)
                if p or args.all:
                    rows.append((name, n, p, ld, st, sp))
            print(f'\n### {f[:-2]}\n')
            print('| loop | instructions | products | per product | loads | stores | spills |')
            print('|---|---|---|---|---|---|---|')
            for name, n, p, ld, st, sp in rows:
                per = f'{n / p:.2f}' if p else '-'
                print(f'| `{name}` | {n} | {p} | {per} | {ld} | {st} | {sp} |')
    if not found:
        sys.exit(f'no kernel matching {args.kernels} in {args.dirs}')


if __name__ == '__main__':
    main()
