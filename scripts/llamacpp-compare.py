#!/usr/bin/env python3
"""gosling against llama.cpp on the same GGUF file, CPU, interleaved rounds.

Each round runs, in this order and on the same thread count:
  1. gosling bench one-batch, batch 1, a --pp-token prompt, --tg tokens
     (prefill tok/s, decode tok/s, and the read bandwidth probed beside it);
     where llama-bench has no -d, the decode figures come from a second
     run after a 1-token prompt, as llama-bench decodes after none;
  2. llama-bench -p PP, then -n TG -d PP (pp tok/s, and tg tok/s after a
     prompt of PP tokens as gosling's);
  3. gosling bench one-batch, batch --bs, a --bs-prompt prompt, --bs-tg tokens
     (decode tok/s of the whole batch);
  4. llama-batched-bench -npp --bs-prompt -ntg --bs-tg -npl --bs (speed_tg).
It prints each figure's median [min-max] over the rounds and the median of
the per-round gosling/llama.cpp ratios, the 1-minute load average read
after each run (a shared machine's other work moves every figure), and
writes every raw result to --raw as JSON lines.

  scripts/llamacpp-compare.py --gosling /tmp/gosling \\
      --llama-bin /path/to/llama.cpp/build/bin --model m.gguf --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run(cmd, env=None):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=None if env is None else {**os.environ, **env})
    return out.stdout


def llama_env(args):
    return {"OMP_WAIT_POLICY": "passive"} if args.omp_passive else None


def gosling(args, batch, prompt, gen):
    out = run([args.gosling, "bench", "one-batch", "--model-path", args.model,
               "--threads", str(args.threads), "--batch", str(batch),
               "--input-len", str(prompt), "--output-len", str(gen),
               "--buffer-mib", "512", "--runs", "2", "--fma-ms", "50", "--json"])
    r = json.loads(out)["results"][0]
    return {"prefill": r["prefill_tok_per_s"], "decode": r["decode_tok_per_s"],
            "read_gbs": r["read_gb_per_s"], "of_roofline": r["decode_fraction_of_roofline"]}


def gosling_bs1(args):
    r = gosling(args, 1, args.pp, args.tg)
    if not args.depth:
        # Decode at llama-bench's context: a 1-token prompt, not PP's
        # (attention over 512 cached tokens is a good part of a small
        # model's step).
        short = gosling(args, 1, 1, args.tg)
        r.update({k: short[k] for k in ("decode", "read_gbs", "of_roofline")})
    return r


def has_depth(args):
    # llama-bench gained -d (--n-depth) in 2025; older builds decode after
    # an empty context.
    out = subprocess.run([f"{args.llama_bin}/llama-bench", "--help"], capture_output=True, text=True)
    return "--n-depth" in out.stdout + out.stderr


def llama_bench(args):
    # Decode after a prompt of --pp tokens (-d), as gosling's batch-1 run
    # decodes after its prompt, where llama-bench has -d.
    res = {}
    depth = ["-d", str(args.pp)] if args.depth else []
    for name, extra in (("prefill", ["-p", str(args.pp), "-n", "0"]),
                        ("decode", ["-p", "0", "-n", str(args.tg), *depth])):
        out = run([f"{args.llama_bin}/llama-bench", "-m", args.model, "-t", str(args.threads),
                   "-r", "1", "-o", "json", *extra], llama_env(args))
        res[name] = json.loads(out)[0]["avg_ts"]
    return res


def llama_batched(args):
    out = run([f"{args.llama_bin}/llama-batched-bench", "-m", args.model,
               "-t", str(args.threads), "-tb", str(args.threads),
               "-c", str(args.bs * (args.bs_prompt + args.bs_tg) + 64),
               "-npp", str(args.bs_prompt), "-ntg", str(args.bs_tg), "-npl", str(args.bs),
               "--output-format", "jsonl"], llama_env(args))
    for line in out.splitlines():
        if line.startswith("{"):
            return {"decode": json.loads(line)["speed_tg"]}
    raise RuntimeError("llama-batched-bench printed no result")


def fmt(v):
    return f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gosling", required=True)
    p.add_argument("--llama-bin", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pp", type=int, default=512)
    p.add_argument("--tg", type=int, default=64)
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--bs-prompt", type=int, default=32)
    p.add_argument("--bs-tg", type=int, default=32)
    p.add_argument("--raw", default="/dev/null")
    p.add_argument("--omp-passive", action="store_true",
                   help="run llama.cpp with OMP_WAIT_POLICY=passive: on a machine whose cores other "
                        "processes share, its spinning threads otherwise wait out whole time slices "
                        "at every barrier")
    args = p.parse_args()
    args.depth = has_depth(args)
    if not args.depth:
        print("llama-bench has no -d: its decode runs after an empty context", file=sys.stderr)

    rows = {k: [] for k in ("g1", "l1", "gb", "lb")}
    with open(args.raw, "a") as raw:
        for i in range(args.rounds):
            for key, fn in (("g1", lambda: gosling_bs1(args)), ("l1", lambda: llama_bench(args)),
                            ("gb", lambda: gosling(args, args.bs, args.bs_prompt, args.bs_tg)), ("lb", lambda: llama_batched(args))):
                r = fn()
                r["load1"] = os.getloadavg()[0]
                rows[key].append(r)
                raw.write(json.dumps({"round": i, "run": key, "model": args.model, **r}) + "\n")
                raw.flush()
                print(f"round {i} {key}: {r}", file=sys.stderr, flush=True)

    def col(key, field):
        return [r[field] for r in rows[key]]

    def ratio(a, fa, b, fb):
        return statistics.median(x / y for x, y in zip(col(a, fa), col(b, fb)))

    print(f"model {args.model}, {args.threads} threads, {args.rounds} interleaved rounds: median [min-max]")
    if args.omp_passive:
        print("llama.cpp ran with OMP_WAIT_POLICY=passive")
    if not args.depth:
        print("llama.cpp's batch-1 decode after an empty context (its llama-bench has no -d); gosling's after a 1-token prompt")
    print(f"read probe beside gosling's batch-1 run: {fmt(col('g1', 'read_gbs'))} GB/s; "
          f"gosling decode at {fmt([100 * x for x in col('g1', 'of_roofline')])} % of the read roofline")
    print(f"load average (1 min) after each run: {fmt([r['load1'] for key in rows for r in rows[key]])} on {os.cpu_count()} CPUs")
    print(f"{'':28s} {'gosling':>24s} {'llama.cpp':>24s} {'ratio':>7s}")
    print(f"{'prefill ' + str(args.pp) + ' tok/s':28s} {fmt(col('g1', 'prefill')):>24s} {fmt(col('l1', 'prefill')):>24s} {ratio('g1', 'prefill', 'l1', 'prefill'):7.2f}")
    print(f"{'decode batch 1 tok/s':28s} {fmt(col('g1', 'decode')):>24s} {fmt(col('l1', 'decode')):>24s} {ratio('g1', 'decode', 'l1', 'decode'):7.2f}")
    print(f"{'decode batch ' + str(args.bs) + ' tok/s':28s} {fmt(col('gb', 'decode')):>24s} {fmt(col('lb', 'decode')):>24s} {ratio('gb', 'decode', 'lb', 'decode'):7.2f}")


if __name__ == "__main__":
    main()
