#!/usr/bin/env python3
"""Greedy output of gosling against llama.cpp's on files llama.cpp quantized.

For each model: make its F16 GGUF (`gosling model random --dtype float16`
at a preset shape, or take a real GGUF), quantize it with llama.cpp's own
llama-quantize to each --types type, then run both engines greedily from
the same prompt ids for --n tokens on 2 CPU threads:

  gosling generate --device cpu --input-ids IDS --temperature 0
      --ignore-eos --json --logprobs --top-logprobs 2
  llamacpp-greedy (scripts/llamacpp-greedy.cpp, built here against the
      llama.cpp build's llama.h and libllama; F32 K/V cache)

and prints, per file, whether the ids are identical and else each
divergence with the top-2 logit gap at that step from both (gosling's is
the difference of its two top log-probabilities, the same number): after
one, gosling restarts from the prompt plus llama.cpp's tokens through the
diverging one, so the steps after it are compared too. A divergence is a
near-tie when the two tokens' log-probabilities differ by less than
--tie in exact arithmetic (gosling with the file's weights widened to
float32, `--dtype float32`; gosling's own gap where that run fails):
each engine's 8-bit activations move a random model's flat logits by a
few hundredths, so neither engine's quantized gap says whether the step
was a tie. The script exits 1 if
any file diverges at a step that is not one, 0 if all agree (or diverge
only at near-ties), and 77 (skipped) when llama.cpp's build is not where
--llama-dir says.

A random model's logits are flat (its top-2 gaps are tenths of a unit or
less), so its greedy run is a strict test of the arithmetic and a poor
one of tie-free agreement; stories260K (../shared/models/stories260K) is a
real, trained model, but its 64-wide rows are not multiples of 256, so
llama-quantize gives its matrices Q5_0/Q8_0 fallbacks where Q4_K_M asks
for K-quants.

  scripts/llamacpp-greedy.py --gosling /tmp/gosling --llama-dir /tmp/llama.cpp \\
      --shapes stories110M,llama-3.2-1b --types Q4_K_M \\
      --real ../shared/models/stories260K/stories260K.gguf:Q4_K_M,Q4_0,Q8_0
"""

import argparse
import json
import os
import subprocess
import sys

# A prompt in the llama-2 vocabulary (stories*, BOS 1), and one in the
# llama-3 vocabulary (BOS 128000); the random models' tokens mean nothing,
# any ids do.
PROMPTS = {
    32000: [1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203],
    128256: [128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13],
    512: [1, 403, 407, 261, 378],
}


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def vocab_of(path):
    # The vocabulary size from the GGUF header: the length of
    # tokenizer.ggml.tokens.
    import struct
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    off = 4

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, data, off)
        off += struct.calcsize(fmt)
        return v[0]

    take("<I")
    take("<Q")
    nkv = take("<Q")
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string():
        nonlocal off
        n = take("<Q")
        s = data[off:off + n]
        off += n
        return s

    def skip(t):
        nonlocal off
        if t == 8:
            string()
        elif t == 9:
            at, n = take("<I"), take("<Q")
            if at == 8:
                for _ in range(n):
                    string()
            else:
                off += sizes[at] * n
            return n
        else:
            off += sizes[t]
        return None

    for _ in range(nkv):
        key = string().decode()
        t = take("<I")
        n = skip(t)
        if key == "tokenizer.ggml.tokens":
            return n
    raise RuntimeError(f"{path}: no tokenizer.ggml.tokens")


def build_helper(args):
    exe = os.path.join(args.work, "llamacpp-greedy")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp-greedy.cpp")
    if os.path.exists(exe) and os.path.getmtime(exe) > os.path.getmtime(src):
        return exe
    bindir = os.path.join(args.llama_dir, "build", "bin")
    run([args.cxx, "-O2", "-std=c++17", f"-I{args.llama_dir}/include", f"-I{args.llama_dir}/ggml/include",
         src, "-o", exe, f"-L{bindir}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bindir}"])
    return exe


def quantize(args, src, qtype, name):
    out = os.path.join(args.work, f"{name}-{qtype.lower()}.gguf")
    if not os.path.exists(out):
        # Into a temporary name first: a failed run leaves a partial file.
        run([os.path.join(args.llama_dir, "build", "bin", "llama-quantize"), src, out + ".part", qtype, str(args.threads)])
        os.rename(out + ".part", out)
    return out


def gosling_greedy(args, model, ids, n):
    out = run([args.gosling, "generate", "--model-path", model, "--device", "cpu", "--threads", str(args.threads),
               "--input-ids", ",".join(map(str, ids)), "--max-new-tokens", str(n), "--temperature", "0",
               "--ignore-eos", "--json", "--logprobs", "--top-logprobs", "2"])
    r = json.loads(out)
    gaps = []
    for top in r["output_top_logprobs"]:
        gaps.append(top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf"))
    return r["output_ids"], gaps


def exact_gap(args, model, ids, gt, lt):
    """The log-probability of gosling's token gt less llama.cpp's lt at
    the step after ids, with the file's weights widened to float32
    (--dtype float32): the gap in exact arithmetic, which neither
    engine's quantized activations move. None where the run fails or
    either token is not among the 20 most likely."""
    try:
        out = run([args.gosling, "generate", "--model-path", model, "--device", "cpu", "--threads", str(args.threads),
                   "--dtype", "float32", "--input-ids", ",".join(map(str, ids)), "--max-new-tokens", "1",
                   "--temperature", "0", "--ignore-eos", "--json", "--logprobs", "--top-logprobs", "20"])
    except subprocess.CalledProcessError:
        return None
    top = {t["id"]: t["logprob"] for t in json.loads(out)["output_top_logprobs"][0]}
    if gt not in top or lt not in top:
        return None
    return top[gt] - top[lt]


def compare(args, helper, model):
    """Compares the two greedy runs; after a divergence gosling starts
    again from the prompt plus llama.cpp's tokens up to and including
    the diverging one, so that every later step is compared too (up to
    --max-divergences). Returns whether every divergence is a near-tie."""
    ids = PROMPTS.get(vocab_of(model))
    if ids is None:
        raise RuntimeError(f"{model}: no prompt for its vocabulary")
    ll = json.loads(run([helper, model, str(args.n), ",".join(map(str, ids)), str(args.threads)]))
    l, lgaps = ll["ids"], ll["gaps"]
    name = os.path.basename(model)
    pos, divs, smallest = 0, [], (float("inf"), -1)
    while pos < args.n and len(divs) < args.max_divergences:
        g, ggaps = gosling_greedy(args, model, ids + l[:pos], args.n - pos)
        first = next((i for i, (a, b) in enumerate(zip(g, l[pos:])) if a != b), None)
        agreed = len(g) if first is None else first
        for i in range(agreed):
            smallest = min(smallest, (ggaps[i], pos + i))
        if first is None:
            break
        step = pos + first
        exact = exact_gap(args, model, ids + l[:step], g[first], l[step])
        divs.append((step, g[first], l[step], ggaps[first], lgaps[step], exact))
        pos += first + 1
    if not divs:
        print(f"{name}: identical, {args.n} tokens (smallest gosling top-2 gap {smallest[0]:.4f} at step {smallest[1]})")
        return True
    # A near-tie by the exact gap where there is one (a random model's
    # quantized activations move its flat logits by a few hundredths, each
    # engine its own way), else by gosling's.
    ties = all((abs(d[5]) if d[5] is not None else d[3]) < args.tie for d in divs)
    print(f"{name}: {len(divs)} divergence(s) in {args.n} tokens{' (stopped at --max-divergences)' if pos < args.n else ''}, "
          f"each followed by a restart from llama.cpp's tokens; {'all near-ties' if ties else 'NOT all near-ties'} "
          f"(--tie {args.tie}); smallest gosling top-2 gap where they agreed {smallest[0]:.4f}")
    for step, gt, lt, gg, lg, ex in divs:
        exs = "n/a" if ex is None else f"{ex:+.4f}"
        print(f"  step {step}: gosling {gt}, llama.cpp {lt}; top-2 logit gap: gosling {gg:.4f}, llama.cpp {lg:.4f}; "
              f"exact (float32 weights) {exs}")
    return ties


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gosling", required=True)
    p.add_argument("--llama-dir", default="/tmp/llama.cpp", help="llama.cpp source tree with its build in build/")
    p.add_argument("--work", default="/tmp/gosling-llamacpp-greedy", help="where the models and the helper go")
    p.add_argument("--shapes", default="stories110M,llama-3.2-1b", help="random models' presets (comma list, may be empty)")
    p.add_argument("--types", default="Q4_K_M", help="llama-quantize types for the random models")
    p.add_argument("--real", action="append", default=[],
                   help="PATH.gguf:TYPE,TYPE a real GGUF to quantize to each type (repeatable)")
    p.add_argument("--n", type=int, default=64, help="tokens to generate")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-divergences", type=int, default=8)
    p.add_argument("--tie", type=float, default=0.05,
                   help="a divergence where the two tokens' log-probabilities with the weights widened to float32 "
                        "differ by less than this (gosling's top-2 gap where that run fails) is a near-tie")
    p.add_argument("--cxx", default="c++")
    args = p.parse_args()

    quant = os.path.join(args.llama_dir, "build", "bin", "llama-quantize")
    if not os.path.exists(quant) or not os.path.exists(os.path.join(args.llama_dir, "include", "llama.h")):
        print(f"skipped: no llama.cpp build at {args.llama_dir} (llama.h, build/bin/llama-quantize; "
              f"cmake --build {args.llama_dir}/build --target llama-quantize)")
        sys.exit(77)
    os.makedirs(args.work, exist_ok=True)
    helper = build_helper(args)

    files = []
    for shape in filter(None, args.shapes.split(",")):
        f16 = os.path.join(args.work, f"{shape}-f16.gguf")
        if not os.path.exists(f16):
            run([args.gosling, "model", "random", "--shape", shape, "--format", "gguf", "--dtype", "float16", "--out", f16])
        files += [quantize(args, f16, t, shape) for t in filter(None, args.types.split(","))]
    for spec in args.real:
        path, _, types = spec.rpartition(":")
        name = os.path.splitext(os.path.basename(path))[0]
        files += [quantize(args, path, t, name) for t in filter(None, types.split(","))]

    ok = all([compare(args, helper, f) for f in files])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
