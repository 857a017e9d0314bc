#!/usr/bin/env bash
# NGRAM speculative decoding against plain decoding on stories260K: two
# `gosling serve` processes, the same command but for
# --speculative-algorithm NGRAM, each warmed up, then the same /generate
# requests sent to one and the other in turn (interleaved, one at a time);
# tok/s is completion tokens / e2e_latency from meta_info. Medians and
# ranges over RUNS requests per workload and server.
#   copy:  the prompt is the model's own greedy continuation (256 tokens),
#          which it goes on to repeat: copying from the prompt pays.
#   fresh: a short prompt sampled at temperature 1 (seeded): little
#          repeats, drafts are mostly rejected, the verify work is overhead.
#   loop:  "Once upon a time", 400 greedy tokens: stories260K's greedy
#          text falls into loops that n-gram lookup can follow.
# Usage: scripts/bench-spec-ngram.sh [RUNS] (default 9); SPEC_FLAGS adds
# flags to the NGRAM server (e.g. --speculative-num-draft-tokens 4).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-9}
MODEL=${MODEL:-../shared/models/stories260K/stories260K.gguf}
TMP=$(mktemp -d)
go build -o "$TMP/gosling" ./cmd/gosling
"$TMP/gosling" serve --model-path "$MODEL" --port 30811 --disable-radix-cache >"$TMP/plain.log" 2>&1 &
PLAIN=$!
"$TMP/gosling" serve --model-path "$MODEL" --port 30812 --disable-radix-cache --speculative-algorithm NGRAM ${SPEC_FLAGS:-} >"$TMP/ngram.log" 2>&1 &
NGRAM=$!
trap 'kill $PLAIN $NGRAM' EXIT
for port in 30811 30812; do
	until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.2; done
done
python3 - "$RUNS" <<'PY'
import json, statistics, sys, urllib.request
runs = int(sys.argv[1])
def gen(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
seed = gen(30811, {"text": "Once upon a time", "sampling_params": {"temperature": 0, "max_new_tokens": 256}})
copy_ids = [1] + seed["output_ids"]  # BOS, then the model's own story
work = {
    "copy": {"input_ids": copy_ids, "sampling_params": {"temperature": 0, "max_new_tokens": 256, "ignore_eos": True}},
    "fresh": {"text": "Lily", "sampling_params": {"temperature": 1, "seed": 1, "max_new_tokens": 256, "ignore_eos": True}},
    "loop": {"text": "Once upon a time", "sampling_params": {"temperature": 0, "max_new_tokens": 400, "ignore_eos": True}},
}
for name, body in work.items():
    for port in (30811, 30812):  # warm up both engines on this workload
        gen(port, body)
    tps = {30811: [], 30812: []}
    acc, same = [], True
    for _ in range(runs):
        outs = {}
        for port in (30811, 30812):
            o = gen(port, body)
            m = o["meta_info"]
            tps[port].append(m["completion_tokens"] / m["e2e_latency"])
            outs[port] = o["output_ids"]
        acc.append(o["meta_info"].get("spec_accept_length", 1))
        same = same and outs[30811] == outs[30812]
    p, n = tps[30811], tps[30812]
    line = (f"{name:5s}  plain {statistics.median(p):7.1f} tok/s ({min(p):.0f}-{max(p):.0f})   "
            f"NGRAM {statistics.median(n):7.1f} tok/s ({min(n):.0f}-{max(n):.0f})   "
            f"speedup {statistics.median(n)/statistics.median(p):.2f}x   accept length {statistics.median(acc):.2f}")
    if name != "fresh":
        line += f"   greedy output identical: {same}"
    print(line)
PY
