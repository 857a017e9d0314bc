#!/usr/bin/env python3
"""Instructions of the innermost loops that hold dp4a (IDP) in a SASS listing.

The unit loop of quant.cu's qgemv_int kernels, counted by opcode, per
iteration: the figure behind the instructions-per-weight estimates of
issue 24. From NVRTC's PTX (GOSLING_PTX_OUT=dir with
attention/gpu/gputest's TestNVRTCHopperLog):

    ptxas -arch=sm_90a -v -e qgemv_int_1_l1_q4_k -o k.cubin quant.ptx
    cuobjdump -sass k.cubin > k.sass
    scripts/sass-loops.py k.sass

A one-row kernel (qgemv_int_1_*) unrolls its unit loop twice over a
pair of weight rows: an iteration is 2 units x 2 rows x 32 = 128 weights.
It has two such loops: x in shared memory (LDS) and read in place (LDG).
"""
import collections
import re
import sys


def parse(path):
    ins = []
    for line in open(path):
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    return ins


def opcode(text):
    text = re.sub(r'^@!?U?P\w+\s+', '', text)  # predicate
    return text.split()[0]


def main():
    for path in sys.argv[1:]:
        ins = parse(path)
        at = {a: i for i, (a, _) in enumerate(ins)}
        loops = []
        for i, (a, text) in enumerate(ins):
            m = re.search(r'BRA(?:\.\w+)?\s+(?:\w+,\s*)?0x([0-9a-f]+)', text)
            if not m:
                continue
            target = int(m.group(1), 16)
            if target <= a and target in at:  # a backward branch: a loop
                j = at[target]
                body = [opcode(t) for _, t in ins[j:i + 1]]
                if any(b.startswith('IDP') for b in body):
                    loops.append((j, i, body))
        for j, i, body in loops:
            if any(j <= j2 and i2 <= i and (j2, i2) != (j, i) for j2, i2, _ in loops):
                continue  # not innermost
            count = collections.Counter(b.split('.')[0] for b in body)
            print(f"{path}: loop {ins[j][0]:#x}-{ins[i][0]:#x}: {len(body)} instructions: " +
                  ", ".join(f"{k} {v}" for k, v in count.most_common()))


if __name__ == '__main__':
    main()
