#!/usr/bin/env python3
"""The innermost loops of the ARM kernels, read from the generated assembly: for each loop that
multiplies (fmla / sdot on aarch64; vmla / vmul / vfma on 32-bit ARM), its instructions per
iteration, its multiply instructions, loads, stores, the spills and reloads among them (LLVM's
"Spill" / "Reload" comments), its scalar (address and loop) and other vector instructions, named
by the Halide loop it is (LLVM's block comment: dot.s1.rd$x is q.k, acc.s1.rj_pv$x /
block_pv... is p.v). Against three cores' multiply issue rates from Arm's Software Optimization
Guides (Cortex-A55, Cortex-A76, Neoverse V1): the cycles an iteration needs to issue its
products, and with --mca, llvm-mca's cycles for the loop body where llvm-mca has a model whose
FMA rate matches the guide (checked first, on independent fmla chains). Model figures of the
code, not timings (no ARM board): where a loop spends instructions and cycles besides its
products.

    (the trees configured with -DATTNGEN_KERNEL_ASM=ON, which writes the kernels' .s files)
    bench/arm_loops.py build/aarch64/generated build/armv7/generated [--kernels REGEX]
        [--loops REGEX] [--all] [--summary] [--mca [--llvm-mca PATH]]

Prints a markdown table per kernel (attention f32 kernels by default: --kernels
'^attn_f32_.*__(aarch64_neon|armv7_neon32)$'), or with --summary one table, a row per kernel and
role (q.k, p.v). --all lists loops without products too. Python 3, standard library only;
llvm-mca (Debian's llvm-19 package, tools/setup.sh --bench) only for --mca.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

LABEL = re.compile(r'^(\.?L\w+):\s*(?:[/@;]+\s*(.*))?$')
BRANCH = re.compile(r'^\s+(b(?:\.\w+)?|b[a-z]{2}|cbn?z|tbn?z)\s+(?:[^,]+,\s*)*(\.?L\w+)\s*$')
PRODUCT = re.compile(r'^\s+(fmla|sdot|udot|vmla\.f32|vfma\.f32|vmul\.f32|vmla\.i32)\b')
LOAD = re.compile(r'^\s+(ldr\w*|ldp\w*|ldur\w*|ldnp|ld[1-4]\w*|vld\w*|ldm\w*|vpop|pop)\b')
STORE = re.compile(r'^\s+(str\w*|stp|stur\w*|stnp|st[1-4]\w*|vst\w*|stm\w*|vpush|push)\b')
JUMP = re.compile(r'^\s+(b|bx|bl|blx|blr|br|ret|b\.\w+|cbn?z|tbn?z|'
                  r'b(eq|ne|cs|cc|hs|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le))\s')
SCALAR = re.compile(r'^\s+[a-z][\w.]*\s+(x\d+|w\d+|sp|xzr|wzr|r\d+|lr|ip|fp)\b')
QFORM = re.compile(r'^\s+[\w.]+\s+(v\d+\.(4s|8h|2d|16b)|q\d+)\b')
CALL = re.compile(r'^\s+(bl|blr|blx)\s')
# A vector register copied to another: the accumulators LLVM rotates through registers.
MOVE = re.compile(r'^\s+(mov\s+v\d+\.16b, v\d+\.16b|vorr\s+(q\d+), (q\d+), \3|vmov\s+q)')

# Multiply instructions each core issues a cycle (Q-form: 128-bit; D: 64-bit or scalar), and the
# accumulate latency of a chain of FMLAs, from Arm's Software Optimization Guides, the "ASIMD
# floating-point instructions" (FMLA, FMUL) and "ASIMD integer instructions" (SDOT) tables:
# - Cortex-A55 Software Optimization Guide (ARM-EPM-128372, v3.0): ASIMD FP multiply accumulate
#   and dot product, Q-form throughput 1, D-form 2 (two 64-bit pipes, a Q-form op takes both);
#   latency 4 (four chains reach the rate of 1 whatever the forwarding).
# - Cortex-A76 Software Optimization Guide: ASIMD FP multiply accumulate latency 4(2),
#   throughput 2 (pipes V0 and V1); dot product throughput 2.
# - Neoverse V1 Software Optimization Guide: ASIMD FP multiply accumulate latency 4(2),
#   throughput 4 (pipes V0-V3; SVE's 256-bit FMLA 2); ASIMD dot product throughput 4.
# The 32-bit kernels are given the same per-instruction rates (their Q-form NEON ops use the same
# pipes); they multiply-add with a vmul.f32 and a vadd.f32 (no fused form is emitted), so each
# vmul.f32 counts twice against the rate.
# mca: the llvm-mca models standing for the core, tried in order (neoverse-n1: the Cortex-A76's
# server derivative, the same FP/ASIMD pipes; LLVM maps -mcpu=cortex-a76 to the Cortex-A57's
# model). One is used only if check_models() finds the guide's rate in it.
CORES = (
    dict(name='A55', title='Cortex-A55', q=1, d=2, acc=4, mca=('cortex-a55',)),
    dict(name='A76', title='Cortex-A76', q=2, d=2, acc=2, mca=('cortex-a76', 'neoverse-n1')),
    dict(name='V1', title='Neoverse-V1', q=4, d=4, acc=2, mca=('neoverse-v1',)),
)
MCA_TRIPLE = {'aarch64': 'aarch64', 'arm': 'armv7a-linux-gnueabihf'}
MCA_MARK = {'aarch64': '#', 'arm': '@'}  # the comment llvm-mca reads region markers from
MCA_ATTR = {'aarch64': [], 'arm': ['-mattr=+neon,+vfp4']}
MCA_ITERATIONS = 100
CHECK_BODY = {  # the model check: n independent 128-bit FMAs
    'aarch64': 'fmla v{i}.4s, v{a}.4s, v{b}.4s',
    'arm': 'vfma.f32 q{i}, q{a}, q{b}',
}
ROLES = (('q.k', re.compile(r'^(class_)?dot')),
         ('p.v', re.compile(r'^(acc\.s1\.rj|(class_)?block_pv)')))


def instruction(line):
    s = line.strip()
    return line.startswith('\t') and s and not s.startswith(('.', '//', '@', ';', '#'))


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


def role(name):
    for r, pattern in ROLES:
        if pattern.match(name):
            return r
    return 'other'


def stats(body, arch):
    """Counts of one loop body's instructions, and its products' issue cycles on each core."""
    s = dict(n=len(body), products=0, loads=0, stores=0, spills=0, reloads=0, scalar=0,
             moves=0, vector=0, jumps=0, calls=0)
    accs = set()
    weights = []  # (Q-form?, weight) of each product
    for x in body:
        if PRODUCT.match(x):
            s['products'] += 1
            weights.append((bool(QFORM.match(x)), 2 if 'vmul.f32' in x else 1))
            dest = x.split()[1].rstrip(',')
            accs.add(dest.split('.')[0])
        elif LOAD.match(x):
            s['loads'] += 1
        elif STORE.match(x):
            s['stores'] += 1
        elif JUMP.match(x):
            s['jumps'] += 1
        elif SCALAR.match(x):
            s['scalar'] += 1
        elif MOVE.match(x):
            s['moves'] += 1
        else:
            s['vector'] += 1
        s['spills'] += 'Spill' in x
        s['reloads'] += 'Reload' in x
        s['calls'] += bool(CALL.match(x))
    # Independent accumulator chains (fmla/sdot write their accumulator; a 32-bit vmul does not).
    s['chains'] = len(accs) if arch == 'aarch64' and s['products'] else None
    s['bound'] = {c['name']: sum(w / (c['q'] if q else c['d']) for q, w in weights)
                  if weights else None for c in CORES}
    return s


def find_mca(explicit):
    if explicit:
        return explicit if shutil.which(explicit) else None
    versions = []
    for d in os.environ.get('PATH', '').split(os.pathsep):
        for p in glob.glob(os.path.join(d, 'llvm-mca-[0-9]*')):
            v = os.path.basename(p)[len('llvm-mca-'):]
            if v.isdigit():
                versions.append((int(v), p))
    if versions:
        return max(versions)[1]
    return shutil.which('llvm-mca')


def clean(line, arch):
    """One instruction of the .s as llvm-mca reads it: no indent, no trailing comment."""
    s = line.strip()
    s = s.split('//')[0] if arch == 'aarch64' else s.split('@')[0]
    return s.strip()


def mca_cycles(tool, arch, cpu, bodies):
    """llvm-mca's cycles an iteration of each body (a list of instruction lines), one run with a
    code region a body; a body llvm-mca cannot read gets None. Raises RuntimeError when the
    model cannot be used at all (no scheduling model for the triple)."""
    mark = MCA_MARK[arch]
    text = ''.join(f'{mark} LLVM-MCA-BEGIN r{i}\n' + ''.join(clean(x, arch) + '\n' for x in b) +
                   f'{mark} LLVM-MCA-END r{i}\n' for i, b in enumerate(bodies))
    cmd = [tool, f'-mtriple={MCA_TRIPLE[arch]}', f'-mcpu={cpu}', *MCA_ATTR[arch],
           f'-iterations={MCA_ITERATIONS}', '-all-views=false', '-summary-view']
    r = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if r.returncode != 0:
        if 'scheduling information' in r.stderr:
            raise RuntimeError(r.stderr.strip().split('\n')[0])
        if len(bodies) == 1:
            return [None]
        return [mca_cycles(tool, arch, cpu, [b])[0] for b in bodies]  # find the unreadable one
    cycles = [int(m) / MCA_ITERATIONS for m in re.findall(r'Total Cycles:\s+(\d+)', r.stdout)]
    if len(cycles) != len(bodies):
        raise RuntimeError(f'{len(cycles)} regions in llvm-mca output for {len(bodies)} bodies')
    return cycles


def check_models(tool, arch):
    """The model check: for each core, the first of its llvm-mca models whose rate on 16
    independent 128-bit FMA chains is the guide's (within 5%), and the check's figures."""
    used, rows = {}, []
    for c in CORES:
        for cpu in c['mca']:
            rates = []
            try:
                for n in (1, 4, 16):
                    body = ['\t' + CHECK_BODY[arch].format(i=i, a=16 + i % 8, b=24 + i % 8)
                            if arch == 'aarch64' else
                            '\t' + CHECK_BODY[arch].format(i=i % 8, a=8 + i % 4, b=12 + i % 4)
                            for i in range(n)]
                    rates.append(n / mca_cycles(tool, arch, cpu, [body])[0])
            except (RuntimeError, TypeError) as e:
                no_model = 'scheduling information' in str(e)
                rows.append((c, cpu, None, f'no model for {MCA_TRIPLE[arch]}' if no_model
                             else 'the check loop is unreadable'))
                continue
            ok = abs(rates[2] - c['q']) <= 0.05 * c['q']
            rows.append((c, cpu, rates, 'used' if ok else 'not used: rate is not the guide\'s'))
            if ok:
                used[c['name']] = cpu
                break
    return used, rows


def print_check(tool, arch, rows):
    print(f'\n### llvm-mca model check ({arch}, {os.path.basename(tool)}: '
          f'{MCA_ITERATIONS} iterations of n independent 128-bit FMA chains)\n')
    if arch == 'arm':  # 32-bit: q0-q7 hold the accumulators; 16 FMAs make 8 chains
        print('(32-bit: vfma.f32 into q0-q7; the 16-FMA body has 8 chains.)\n')
    print('| core | model | FMA/cycle, 1 chain: model / guide | 4 chains | 16 chains | |')
    print('|---|---|---|---|---|---|')
    for c, cpu, rates, verdict in rows:
        guide = [min(c['q'], n / c['acc']) for n in (1, 4, 16)]
        cells = [f'{r:.2f} / {g:g}' if rates else f'- / {g:g}'
                 for r, g in zip(rates or guide, guide)]
        print(f'| {c["title"]} | {cpu} | ' + ' | '.join(cells) + f' | {verdict} |')


def fmt(x, digits=2):
    return '-' if x is None else f'{x:.{digits}f}'


def span(values, digits=2):
    values = [v for v in values if v is not None]
    if not values:
        return '-'
    lo, hi = min(values), max(values)
    return f'{lo:.{digits}f}' if abs(hi - lo) < 0.5 * 10 ** -digits else \
        f'{lo:.{digits}f}-{hi:.{digits}f}'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('dirs', nargs='+')
    ap.add_argument('--kernels', default=r'^attn_f32_.*__(aarch64_neon|armv7_neon32)$')
    ap.add_argument('--loops', default='', help='only loops whose Halide name matches REGEX')
    ap.add_argument('--all', action='store_true', help='loops without products too')
    ap.add_argument('--summary', action='store_true',
                    help='one row per kernel and role (q.k, p.v), ranges over its loop copies')
    ap.add_argument('--mca', action='store_true', help="llvm-mca's cycles an iteration")
    ap.add_argument('--llvm-mca', default='', help='the llvm-mca to run (default: the newest '
                    'llvm-mca-N on PATH, else llvm-mca)')
    args = ap.parse_args()
    pattern, loop_pattern = re.compile(args.kernels), re.compile(args.loops)

    files = []
    for d in args.dirs:
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f.endswith('.s') and pattern.search(f[:-2])]
    if not files:
        sys.exit(f'no kernel .s matching {args.kernels} in {args.dirs} '
                 '(configure with -DATTNGEN_KERNEL_ASM=ON)')

    tool, models = None, {'aarch64': {}, 'arm': {}}
    if args.mca:
        tool = find_mca(args.llvm_mca)
        if not tool:
            print('\nllvm-mca not found (tools/setup.sh --bench installs it): no model columns.')
        else:
            for arch in sorted({'arm' if 'armv7' in f else 'aarch64' for f in files}):
                models[arch], rows = check_models(tool, arch)
                print_check(tool, arch, rows)
                if not models[arch]:
                    print(f'\nNo llvm-mca model with a guide\'s FMA rate for {arch}: '
                          'no model columns there.')

    summary = []
    for path in files:
        kernel = os.path.basename(path)[:-2]
        arch = 'arm' if 'armv7' in kernel else 'aarch64'
        with open(path) as fh:
            lines = fh.read().split('\n')
        rows = [(name, body, stats(body, arch)) for name, body in loops(lines)
                if loop_pattern.search(name)]
        rows = [r for r in rows if r[2]['products'] or args.all]
        used = models[arch]
        mca = {core: mca_cycles(tool, arch, cpu, [b for _, b, _ in rows]) if rows else []
               for core, cpu in used.items()}
        if args.summary:
            summary.append((kernel, arch, rows, mca))
            continue
        print(f'\n### {kernel}\n')
        head = ('| loop | instructions | products | instr/product | loads | stores | spills | '
                'reloads | scalar | vector moves | other vector | chains |' +
                ''.join(f' {c["name"]} bound |' for c in CORES) +
                ''.join(f' mca {core} ({cpu}) | ratio |' for core, cpu in used.items()))
        print(head)
        print('|---' * head.count(' |') + '|')
        for k, (name, body, s) in enumerate(rows):
            p = s['products']
            cells = [f'`{name}`', s['n'], p, f'{s["n"] / p:.2f}' if p else '-', s['loads'],
                     s['stores'], s['spills'], s['reloads'], s['scalar'], s['moves'], s['vector'],
                     s['chains'] if s['chains'] is not None else '-']
            cells += [fmt(s['bound'][c['name']], 1) for c in CORES]
            for core in used:
                cyc, bound = mca[core][k], s['bound'][core]
                cells += [fmt(cyc, 1), fmt(cyc / bound if cyc and bound else None)]
            if s['calls'] and used:
                cells[0] += ' (call: llvm-mca assumes 100 cycles)'
            print('| ' + ' | '.join(str(c) for c in cells) + ' |')

    if args.summary:
        models_cpu = {core: cpu for arch in models for core, cpu in models[arch].items()}
        cores = [c['name'] for c in CORES if c['name'] in models_cpu]
        head = ('| kernel | loop | copies | products | instructions per product | spills + '
                'reloads | scalar | vector moves | chains |' +
                ''.join(f' {c["name"]} bound |' for c in CORES) +
                ''.join(f' mca {core} ({models_cpu[core]}) | ratio |' for core in cores))
        print('\n' + head)
        print('|---' * head.count(' |') + '|')
        for kernel, arch, rows, mca in summary:
            for r, _ in ROLES + (('other', None),):
                picked = [(k, s) for k, (name, _, s) in enumerate(rows)
                          if role(name) == r and s['products']]
                if not picked or (r == 'other' and not args.all):
                    continue
                ss = [s for _, s in picked]
                cells = [f'`{kernel}`', r, len(ss), span([s['products'] for s in ss], 0),
                         span([s['n'] / s['products'] for s in ss]),
                         span([s['spills'] + s['reloads'] for s in ss], 0),
                         span([s['scalar'] for s in ss], 0),
                         span([s['moves'] for s in ss], 0),
                         span([s['chains'] for s in ss], 0)]
                cells += [span([s['bound'][c['name']] for s in ss], 1) for c in CORES]
                for core in cores:
                    if core not in mca:
                        cells += ['-', '-']
                        continue
                    cyc = [(mca[core][k], s['bound'][core]) for k, s in picked]
                    cells += [span([c for c, _ in cyc], 1),
                              span([c / b if c and b else None for c, b in cyc])]
                print('| ' + ' | '.join(str(c) for c in cells) + ' |')


if __name__ == '__main__':
    main()
