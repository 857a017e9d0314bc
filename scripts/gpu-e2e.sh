#!/usr/bin/env bash
# gpu-e2e.sh — whole-model GPU checks, built here and run on a GPU machine.
#
#   scripts/gpu-e2e.sh build   build into out/: the engine, device/cuda and
#                              attention CUDA test binaries, the gosling binary,
#                              and a copy of the ../shared models they read,
#                              also packed as out/bundle.tar.xz
#   scripts/gpu-e2e.sh precompile  (here, no GPU: libnvrtc.so.13 on
#                              LD_LIBRARY_PATH) compile every kernel file for
#                              sm_90a into out/nvrtc-cache, packed as
#                              out/nvrtc.txz; a GPU machine whose NVRTC has
#                              the same version then loads them without the
#                              ~100 s compile. With GOSLING_NVRTC_DEFINES set
#                              it adds that variant to the same cache
#   scripts/gpu-e2e.sh unpack  (on the GPU machine) unpack that bundle, and
#                              out/nvrtc.txz or out/nvrtc.tgz (compiled
#                              kernels) if carried
#   scripts/gpu-e2e.sh cache   (on the GPU machine) pack the compiled kernels
#                              as $OUT/nvrtc.tgz, to carry as out/nvrtc.tgz
#   scripts/gpu-e2e.sh run     (on the GPU machine, repo root) run them all;
#                              logs go to $OUT (or out/logs)
#   scripts/gpu-e2e.sh compare (on the GPU machine) out/gosling-before against
#                              out/gosling at 4,096-token prompts (issue 18)
#   scripts/gpu-e2e.sh overlap (on the GPU machine) issue 19's overlap
#                              schedule: dummy llama-3.1-8b bf16, bench
#                              one-batch (batch 1/16/64, input 512, output
#                              128) and bench serving against gosling serve
#                              (256 prompts, input 512, output 128,
#                              concurrency 64), interleaved pairs with and
#                              without --disable-overlap-schedule, medians
#   scripts/gpu-e2e.sh bench   (on the GPU machine) issue 7's figures: dummy
#                              llama-3.1-8b bf16 decode at batch 1/16/64 with
#                              and without CUDA graphs next to the copy
#                              roofline, 2048-token prefill, and attention
#                              against torch SDPA (FLASH and CUDNN)
#   scripts/gpu-e2e.sh profile (on the GPU machine) issue 19's breakdown:
#                              dummy llama-3.1-8b bf16 `bench one-batch
#                              --profile-kernels` (GPU time per kernel of a
#                              decode step at batch 1/16/64, input 128, and
#                              at batch 64, input 4,096; prefill 2,048),
#                              each kernel's own time in one bs1 step
#                              (ncu, scripts/ncu-step.py), then the PyTorch anchor
#                              (torch_decode_anchor.py) in the same command
#   scripts/gpu-e2e.sh tp      (on a 2-GPU machine) issue 21's figures: the
#                              engine's TP tests (reference-tiny float32 at
#                              TP=2 against TP=1, stories260K golden at
#                              TP=2), `generate --tp-size 2` against the
#                              golden, `--nnodes 2` as two processes (one
#                              GPU each, NCCL over its network transport)
#                              against `--tp-size 2`, and dummy
#                              llama-3.1-8b bf16 decode at batch 1/16/64
#                              (CUDA graphs at TP=1 and TP=2, TP=2 without
#                              graphs, TP=2 with --enable-custom-all-reduce,
#                              the others --disable-custom-all-reduce)
#                              and 2048-token prefill at TP=1 and TP=2, in
#                              one table; the peer all-reduce's GPU test
#                              first; NCCL_NVLS_ENABLE=0
#   scripts/gpu-e2e.sh vision  (on the GPU machine) issue 25's figure: a
#                              vision request (image encode + prefill) with
#                              dummy Qwen2.5-VL-7B bf16, `bench one-batch
#                              --image-size` 448x448 (256 image tokens) and
#                              1280x720 (1,196 image tokens) with 64 text
#                              tokens, batch 1 and 8, next to the same
#                              batches without images; medians of 3
#   scripts/gpu-e2e.sh spec    (on the GPU machine) issue 20 on the GPU: the
#                              speculative engine tests (NGRAM, STANDALONE,
#                              EAGLE; float32 and bf16; verify and draft
#                              steps from CUDA graphs, also in bf16), then `bench
#                              speculative` (plain against speculative
#                              decode tok/s, accept length and steps by
#                              graph path, one greedy request): stories260K NGRAM
#                              on the copy and prompt workloads and STANDALONE
#                              self-drafting; dummy llama-3.1-8b bf16: one
#                              verify step of 4, 8 and 16 tokens (chain and
#                              tree) against one decode step at batch 1 and
#                              16, then STANDALONE self-drafting (the draft is
#                              the target: every draft accepted) and NGRAM on
#                              the copy workload end to end; last, `bench
#                              one-batch` at batch 1 and 16 (input 128,
#                              output 256) plain, then STANDALONE
#                              self-drafting, with verify and draft steps
#                              by graph path
#   scripts/gpu-e2e.sh moe     (on the GPU machine) issue 23's MoE figures:
#                              dummy qwen3-30b-a3b, gpt-oss-20b and
#                              mixtral-8x7b bf16 (16 of its 32 layers on a
#                              card under 120 GB) `bench one-batch`, decode
#                              at batch 1 and 64 (input 128, output 64,
#                              CUDA graphs, experts routed on the device)
#                              and a 2,048-token prefill (the experts as
#                              grouped GEMMs, then with
#                              GOSLING_MOE_PREFILL_LOOP=1: one by one, as
#                              before them), each beside the read roofline
#                              of the weights a step reads;
#                              COMPARE=1 adds decode with
#                              GOSLING_MOE_HOST_ROUTING=1 and with
#                              GOSLING_MOE_UNGROUPED=1
#   scripts/gpu-e2e.sh bf16ref (on the GPU machine, repo root) issue 23's
#                              16-bit bounds: transformers in bf16 and
#                              float16 on the reference models in $MODELS
#                              (default: the seven issue 23 added), merged
#                              into engine/testdata/transformers_bf16.json
#                              (a copy lands in $OUT: commit it), then
#                              TestGPUReferenceModels and
#                              TestGPUPartialRotary against them
#   scripts/gpu-e2e.sh quant   (on the GPU machine) issue 24's GPU figures:
#                              the compact-matrix tests (device/cuda
#                              TestGPUQuantOps, TestGPUModelOpsMoE; engine
#                              TestGPUQuantGGUF, TestGPUQuant4: AWQ and
#                              MXFP4 reference models), then random
#                              llama-3.1-8b GGUF files in Q4_K_M and Q8_0
#                              and an AWQ (groups of 128) directory (gosling
#                              model random, under /tmp, made on every core;
#                              kept between runs of a session):
#                              GPU weight memory and `bench one-batch` batch
#                              1 and 8, input 2,048 (prefill) and output 128
#                              (decode beside the read roofline of the
#                              quantised bytes), each file with its matrices
#                              compact and (--dtype bfloat16) widened;
#                              medians of 3. `quant tests` runs the tests
#                              alone, `quant bench [TYPES]` the figures
#                              alone (TYPES: any of q4_k_m, q8_0, awq, quoted),
#                              to split the work over shorter calls;
#                              `quant kernels` BenchmarkGPUQGemv alone (the
#                              decode kernels' GB/s, integer and float).
#                              The compact runs go on the integer decode
#                              kernels with x quantised once (default),
#                              with each block quantising x
#                              (GOSLING_QGEMV_PREQ=0), and on the float
#                              ones (GOSLING_QGEMV=float)
#   scripts/gpu-e2e.sh verify  (on a 2-GPU machine) the GPU tests of the
#                              last merges in one call: device/cuda and
#                              the attention suite side by side (one GPU
#                              each) beside the engine tests of
#                              $ENGINE_RUN (GPU 0), then the engine TP
#                              tests (both GPUs), then `generate
#                              --tp-size 2` (does it exit?); every step
#                              under a timeout, counts
#                              printed, all logs in one $OUT/verify.tgz
#                              (the device tool returns at most 8 files),
#                              the compiled kernels in $OUT/nvrtc.tgz
#
# The binaries are CGO_ENABLED=0 (purego loads CUDA at run time). With this
# workplace's device tool: build here, carry only out/bundle.tar.xz, and
# run `scripts/gpu-e2e.sh unpack` first.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-run}" in
build)
	set -e
	mkdir -p out
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	go test -c -ldflags=-s -o out/engine.test ./engine
	go test -c -ldflags=-s -o out/cuda.test ./device/cuda
	go test -c -ldflags=-s -o out/attn_bench.test ./attention/gpu/gputest
	go build -ldflags=-s -o out/gosling ./cmd/gosling
	rm -rf out/shared && mkdir -p out/shared/models out/configs
	cp -r ../shared/models/stories260K ../shared/models/reference-tiny out/shared/models/
	mkdir -p out/shared/tokenizers && cp -r ../shared/tokenizers/llama3 ../shared/tokenizers/qwen3 out/shared/tokenizers/
	cp -r ../shared/configs/llama-3.1-8b ../shared/configs/qwen2.5-vl-7b ../shared/configs/qwen3-30b-a3b \
		../shared/configs/gpt-oss-20b ../shared/configs/mixtral-8x7b ../shared/configs/qwen3-32b ../shared/configs/llama-3.1-70b out/configs/
	cp scripts/sdpa-reference.py scripts/allreduce-anchor.py ../shared/bench/torch_decode_anchor.py ../shared/bench/torch_attention_anchor.py out/
	# One compressed bundle travels (the device tool carries 64 MiB); xz
	# on every core, which a single-threaded tar -J is not.
	(cd out && tar -cf - engine.test cuda.test attn_*.test gosling $(ls gosling-before 2>/dev/null) shared configs sdpa-reference.py allreduce-anchor.py \
		torch_decode_anchor.py torch_attention_anchor.py | xz -T0 -6 >bundle.tar.xz)
	;;
precompile)
	set -e
	d="$PWD/out/nvrtc-cache/gosling-cache/gosling/cuda"
	mkdir -p "$d"
	GOSLING_PRECOMPILE_DIR="$d" go test -count=1 ./attention/gpu/gputest -run TestNVRTCPrecompile -v | grep -E 'compiled|SKIP|FAIL'
	tar -cf - -C out/nvrtc-cache gosling-cache | xz -T0 -6 >out/nvrtc.txz
	echo "out/nvrtc.txz: $(ls "$d" | wc -l) kernel images (rm -rf out/nvrtc-cache drops stale ones)"
	;;
unpack)
	[ -f out/bundle.tar.xz ] && tar -xJf out/bundle.tar.xz -C out
	if [ -f out/nvrtc.txz ]; then mkdir -p /tmp/gosling-cache && tar -xJf out/nvrtc.txz -C /tmp; fi
	# NVRTC's cubins from an earlier machine (content-addressed: a changed
	# kernel compiles anew), brought back as $OUT/nvrtc.tgz by `cache`.
	if [ -f out/nvrtc.tgz ]; then mkdir -p /tmp/gosling-cache && tar -xzf out/nvrtc.tgz -C /tmp; fi
	;;
cache)
	tar -czf "${OUT:-out}/nvrtc.tgz" -C /tmp gosling-cache
	;;
run)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache # one NVRTC cache for every binary
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	(cd device/cuda && ../../out/cuda.test -test.run 'GPU' -test.v) >"$logs/cuda.log" 2>&1
	echo "device/cuda: $(grep -c '^--- PASS' "$logs/cuda.log") pass, $(grep -c '^--- FAIL' "$logs/cuda.log") fail"
	for b in native flash splitkv cudnn; do
		(cd attention/gpu/gputest && ../../../out/attn_bench.test -test.run "CUDAConformance/^$b\$" -test.v) >"$logs/attn_$b.log" 2>&1
		echo "attention/$b CUDA conformance: $(grep -c -- '--- PASS' "$logs/attn_$b.log") pass, $(grep -c -- '--- FAIL' "$logs/attn_$b.log") fail, $(grep -c -- '--- SKIP' "$logs/attn_$b.log") skip"
	done
	(cd engine && ../out/engine.test -test.run 'GPU' -test.v) >"$logs/engine.log" 2>&1
	echo "engine GPU: $(grep -c -- '--- PASS' "$logs/engine.log") pass, $(grep -c -- '--- FAIL' "$logs/engine.log") fail"
	grep -E -- '--- FAIL|Δ prompt' "$logs/engine.log" | head -40
	out/gosling generate --device cuda --model-path out/shared/models/stories260K/stories260K.gguf --input-ids 1 \
		--max-new-tokens 256 --temperature 0 --json --attention-backend flash >"$logs/generate.json" 2>"$logs/generate.err"
	python3 -c "import json;a=json.load(open('$logs/generate.json'));g=json.load(open('out/shared/models/stories260K/golden_greedy.json'));print('gosling generate --device cuda == golden:', a['output_ids']==g['output_ids'], a['usage'])"
	;;
spec)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	(cd engine && ../out/engine.test -test.run 'GPUSpeculative|GPUEagle|GPUTPSpeculative|GPUVerifyGraphs|GPUTimeSteps' -test.v) >"$logs/engine_spec.log" 2>&1
	echo "engine speculative GPU: $(grep -c -- '--- PASS' "$logs/engine_spec.log") pass, $(grep -c -- '--- FAIL' "$logs/engine_spec.log") fail, $(grep -c -- '--- SKIP' "$logs/engine_spec.log") skip"
	grep -E -- '--- FAIL|parts from' "$logs/engine_spec.log" | head -40
	echo "draft graph lines: $(grep -c 'draft graphs:' "$logs/engine_spec.log"), with eager steps: $(grep -cE 'draft graphs: .* [1-9][0-9]* eager' "$logs/engine_spec.log")"
	s=out/shared/models/stories260K/stories260K.gguf
	for w in copy prompt; do
		echo "== stories260K NGRAM, workload $w"
		out/gosling bench speculative --device cuda --model-path "$s" --attention-backend flash --speculative-algorithm NGRAM --workload "$w" --output-len 256 2>>"$logs/bench_spec.err"
	done
	echo "== stories260K STANDALONE, the target as its own draft (upper bound), workload copy"
	out/gosling bench speculative --device cuda --model-path "$s" --attention-backend flash --speculative-algorithm STANDALONE \
		--speculative-draft-model-path "$s" --speculative-num-steps 4 --speculative-eagle-topk 1 --workload copy --output-len 256 2>>"$logs/bench_spec.err"
	l8=out/configs/llama-3.1-8b
	echo "== dummy llama-3.1-8b bf16: verify steps against a decode step; STANDALONE self-drafting end to end"
	out/gosling bench speculative --device cuda --model-path $l8 --load-format dummy --dtype bfloat16 \
		--max-running-requests 16 --context-length 1024 --input-ids "$(seq -s, 1000 1031)" \
		--speculative-algorithm STANDALONE --speculative-draft-model-path $l8 \
		--verify-steps 4,8,16 --batch 1,16 --step-context 512 --step-repeat 20 \
		--workload prompt --output-len 256 2>>"$logs/bench_spec.err" | tee "$logs/bench_spec_8b.txt"
	echo "== dummy llama-3.1-8b bf16 NGRAM, workload copy"
	out/gosling bench speculative --device cuda --model-path $l8 --load-format dummy --dtype bfloat16 \
		--max-running-requests 4 --context-length 2048 --input-ids "$(seq -s, 1000 1031)" \
		--speculative-algorithm NGRAM --workload copy --output-len 256 2>>"$logs/bench_spec.err"
	echo "== dummy llama-3.1-8b bf16 bench one-batch: plain, then STANDALONE self-drafting"
	for spec in "" "--speculative-algorithm STANDALONE --speculative-draft-model-path $l8"; do
		out/gosling bench one-batch --device cuda --model-path $l8 --load-format dummy --dtype bfloat16 \
			--batch 1,16 --input-len 128 --output-len 256 $spec 2>>"$logs/bench_spec.err" | tee -a "$logs/bench_onebatch_spec.txt"
	done
	;;
moe)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
	for c in qwen3-30b-a3b gpt-oss-20b mixtral-8x7b; do
		dir=out/configs/$c
		if [ "$c" = mixtral-8x7b ] && [ "$mib" -lt 120000 ]; then
			# 93 GB of bf16 weights: on an 80 GB card, 16 of its 32 layers
			# (the same layers: the roofline counts the bytes loaded).
			dir=/tmp/mixtral-8x7b-16-layers
			mkdir -p "$dir"
			sed 's/"num_hidden_layers": 32/"num_hidden_layers": 16/' "out/configs/$c/config.json" >"$dir/config.json"
			c=mixtral-8x7b-16-layers
		fi
		m="--device cuda --model-path $dir --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 2304"
		echo "== $c decode at batch 1 and 64 (input 128, output 64), CUDA graphs"
		out/gosling bench one-batch $m --batch 1,64 --input-len 128 --output-len 64 --repeat 2 2>"$logs/moe_$c.err" | tee "$logs/moe_$c.txt"
		echo "== $c prefill 2,048, experts as grouped GEMMs (routed and sorted on the device)"
		out/gosling bench one-batch $m --batch 1 --input-len 2048 --output-len 2 2>>"$logs/moe_$c.err" | tee "$logs/moe_${c}_prefill.txt"
		echo "== $c prefill 2,048, GOSLING_MOE_PREFILL_LOOP=1 (routing read back, each expert's own GEMMs)"
		GOSLING_MOE_PREFILL_LOOP=1 out/gosling bench one-batch $m --batch 1 --input-len 2048 --output-len 2 \
			2>>"$logs/moe_$c.err" | tee "$logs/moe_${c}_prefill_loop.txt"
		if [ "${COMPARE:-0}" = 1 ]; then
			for env in GOSLING_MOE_HOST_ROUTING=1 GOSLING_MOE_UNGROUPED=1; do
				echo "== $c decode, $env"
				env "$env" out/gosling bench one-batch $m --batch 1,64 --input-len 128 --output-len 64 --repeat 2 \
					2>>"$logs/moe_$c.err" | tee "$logs/moe_${c}_${env%%=*}.txt"
			done
		fi
	done
	;;
bf16ref)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' ||
		{ echo "bf16ref needs torch and transformers (5.17 made the references) on this machine"; exit 1; }
	# shellcheck disable=SC2086 # MODELS is a list of names
	python3 scripts/bf16-reference.py --update engine/testdata/transformers_bf16.json \
		${MODELS:-qwen3_moe qwen2_moe mixtral gemma3_text phi3 gpt_oss qwen3_yarn} | tee "$logs/bf16ref.txt" || exit 1
	cp engine/testdata/transformers_bf16.json "$logs/"
	(cd engine && ../out/engine.test -test.run 'TestGPUReferenceModels|TestGPUPartialRotary' -test.v) >"$logs/engine_ref.log" 2>&1
	echo "engine reference models: $(grep -c -- '--- PASS' "$logs/engine_ref.log") pass, $(grep -c -- '--- FAIL' "$logs/engine_ref.log") fail, $(grep -c -- '--- SKIP' "$logs/engine_ref.log") skip"
	grep -E -- '--- FAIL|--- SKIP' "$logs/engine_ref.log" | head -40
	;;
compare)
	# Issue 18's end-to-end figure: out/gosling-before (an earlier build,
	# placed there by hand) against out/gosling, one after the other on the
	# same GPU: dummy llama-3.1-8b bf16, batch 1/16/64, 4,096-token prompts.
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	m="--device cuda --model-path out/configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 4224"
	for b in gosling-before gosling; do
		echo "== $b"
		out/$b bench one-batch $m --batch 1,16,64 --input-len 4096 --output-len 64 2>"$logs/onebatch_$b.err" | tee "$logs/onebatch_$b.txt"
	done
	;;
overlap)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	m="--device cuda --model-path out/configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 2048"
	pairs=${PAIRS:-3}
	rm -f "$logs"/overlap_*.json "$logs"/overlap_*.jsonl
	for i in $(seq "$pairs"); do
		order="on off"; [ $((i % 2)) -eq 0 ] && order="off on"
		for o in $order; do
			flag=; [ "$o" = off ] && flag=--disable-overlap-schedule
			out/gosling bench one-batch $m --batch 1,16,64 --input-len 512 --output-len 128 --json $flag \
				2>>"$logs/overlap_onebatch.err" | tr -d '\n' >>"$logs/overlap_onebatch_$o.json"
			echo >>"$logs/overlap_onebatch_$o.json"
			out/gosling serve $m --port 30000 $flag 2>>"$logs/overlap_serve.err" &
			pid=$!
			for _ in $(seq 300); do curl -sf http://127.0.0.1:30000/health >/dev/null && break; sleep 1; done
			out/gosling bench serving --base-url http://127.0.0.1:30000 --num-prompts 256 --random-input-len 512 \
				--random-output-len 128 --random-range-ratio 1 --max-concurrency 64 --disable-progress \
				--output-file "$logs/overlap_serving_$o.jsonl" | tee "$logs/overlap_serving_${o}_$i.txt"
			kill -INT $pid
			wait $pid
		done
	done
	python3 - "$logs" <<'PY'
import json, statistics as st, sys
logs = sys.argv[1]
def lines(p): return [json.loads(l) for l in open(p) if l.strip()]
ob = {o: lines(f"{logs}/overlap_onebatch_{o}.json") for o in ("on", "off")}
for i, r in enumerate(ob["on"][0]["results"]):
    for k in ("decode_tok_per_s", "decode_host_gap_us_per_step", "prefill_tok_per_s"):
        v = {o: st.median(x["results"][i][k] for x in ob[o]) for o in ob}
        print(f"one-batch batch {r['batch']:3d} {k:28s} overlap {v['on']:10.1f}  disabled {v['off']:10.1f}")
sv = {o: lines(f"{logs}/overlap_serving_{o}.jsonl") for o in ("on", "off")}
for k in ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms"):
    print(f"serving {k:20s} overlap {st.median(x[k] for x in sv['on']):10.2f}  disabled {st.median(x[k] for x in sv['off']):10.2f}")
PY
	;;
bench)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	m="--device cuda --model-path out/configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 4096"
	echo "== decode, CUDA graphs"; out/gosling bench one-batch $m --batch 1,16,64 --input-len 128 --output-len 64 | tee "$logs/decode_graphs.txt"
	echo "== decode, no graphs"; out/gosling bench one-batch $m --batch 1,16,64 --input-len 128 --output-len 64 --disable-cuda-graph | tee "$logs/decode_eager.txt"
	echo "== prefill 2048"; out/gosling bench one-batch $m --batch 1 --input-len 2048 --output-len 64 | tee "$logs/prefill.txt"
	echo "== attention"; (cd attention/gpu/gputest && ../../../out/attn_bench.test -test.run '^$' -test.bench 'CUDADecode|CUDAPrefill|CUDACopy' -test.benchtime 10x) | grep '^Benchmark' | tee "$logs/attention.txt"
	python3 out/sdpa-reference.py | tee "$logs/sdpa.txt"
	;;
profile)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	m="--device cuda --model-path out/configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 4224"
	echo "== decode, input 128"
	out/gosling bench one-batch $m --batch 1,16,64 --input-len 128 --output-len 64 --repeat 3 --profile-kernels 2>"$logs/profile_128.err" | tee "$logs/profile_128.txt"
	echo "== decode, input 4096, and prefill 2048"
	out/gosling bench one-batch $m --batch 64 --input-len 4096 --output-len 32 --profile-kernels 2>"$logs/profile_4k.err" | tee "$logs/profile_4k.txt"
	out/gosling bench one-batch $m --batch 1 --input-len 2048 --output-len 8 --profile-kernels 2>"$logs/profile_prefill.err" | tee "$logs/profile_prefill.txt"
	echo "== each kernel's own time, one bs1 step (ncu)"
	ncu --clock-control none --metrics gpu__time_duration.sum --csv out/gosling bench one-batch $m --disable-cuda-graph \
		--batch 1 --input-len 128 --output-len 6 >"$logs/ncu_step.csv" 2>"$logs/ncu_step.err" &&
		python3 scripts/ncu-step.py "$logs/ncu_step.csv" | tee "$logs/ncu_step.txt"
	echo "== PyTorch anchor"
	python3 out/torch_decode_anchor.py out/configs/llama-3.1-8b/config.json 2>"$logs/anchor.err" | tee "$logs/anchor.txt"
	;;
tp)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off (the device tool's notes say why)
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then echo "tp: needs 2 GPUs"; exit 1; fi
	# TP_SKIP_AR=1 skips the all-reduce figures; TP_SKIP_TESTS (a regex)
	# skips engine TP tests already run.
	if [ -z "$TP_SKIP_AR" ]; then
	echo "== all-reduce bus bandwidth, 2 GPUs"
	out/gosling bench allreduce --ngpus 2 --min-bytes 1M --max-bytes 1G 2>&1 | tee "$logs/allreduce.txt"
	echo "== custom all-reduce (one-shot, two-shot) beside NCCL, float32, 2 GPUs"
	out/gosling bench allreduce --ngpus 2 --custom --graph --dtype float32 --min-bytes 4K --max-bytes 4M --iters 200 --warmup 20 2>&1 | tee "$logs/allreduce_custom.txt"
	python3 out/allreduce-anchor.py 2 2>&1 | tee "$logs/allreduce_torch.txt" | tail -12
	(cd device/cuda && ../../out/cuda.test -test.run 'TestGPUP2PAllReduce' -test.v) 2>&1 | tee "$logs/p2p_allreduce.log" | grep -E -- '^(---|ok|FAIL|PASS)|p2p'
	fi
	(cd engine && timeout ${TP_TEST_TIMEOUT:-900} ../out/engine.test -test.run 'GPUTP' -test.skip "${TP_SKIP_TESTS:-^$}" -test.v) >"$logs/engine_tp.log" 2>&1
	echo "engine TP tests: $(grep -c -- '--- PASS' "$logs/engine_tp.log") pass, $(grep -c -- '--- FAIL' "$logs/engine_tp.log") fail, $(grep -c -- '--- SKIP' "$logs/engine_tp.log") skip"
	grep -E -- '--- FAIL|Δ prompt logprob\| TP|panic' "$logs/engine_tp.log" | head -60
	out/gosling generate --device cuda --tp-size 2 --model-path out/shared/models/stories260K/stories260K.gguf --input-ids 1 \
		--max-new-tokens 256 --temperature 0 --json >"$logs/generate_tp2.json" 2>"$logs/generate_tp2.err"
	python3 -c "import json;a=json.load(open('$logs/generate_tp2.json'));g=json.load(open('out/shared/models/stories260K/golden_greedy.json'));print('gosling generate --device cuda --tp-size 2 == golden:', a['output_ids']==g['output_ids'], a['usage'])" \
		|| tail -20 "$logs/generate_tp2.err"
	# Across processes: node 0 on GPU 0, node 1 on GPU 1, NCCL forced onto
	# its network transport, against --tp-size 2 in one process.
	ref=out/shared/models/reference-tiny/llama_gqa
	ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$ref/reference.json'))['input_ids'])))")
	g="generate --device cuda --dtype float32 --tp-size 2 --model-path $ref --input-ids $ids --max-new-tokens 16 --temperature 0 --ignore-eos --json --prompt-logprobs"
	out/gosling $g >"$logs/ref_tp2.json" 2>"$logs/ref_tp2.err" || tail -20 "$logs/ref_tp2.err"
	addr=127.0.0.1:29533
	NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CUDA_VISIBLE_DEVICES=1 out/gosling $g --nnodes 2 --node-rank 1 --dist-init-addr $addr --dist-timeout 120 2>"$logs/node1.err" &
	NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CUDA_VISIBLE_DEVICES=0 out/gosling $g --nnodes 2 --node-rank 0 --dist-init-addr $addr --dist-timeout 120 >"$logs/ref_nodes.json" 2>"$logs/node0.err" \
		|| tail -20 "$logs/node0.err"
	wait || tail -20 "$logs/node1.err"
	python3 -c "
import json
a, b = json.load(open('$logs/ref_tp2.json')), json.load(open('$logs/ref_nodes.json'))
d = max(abs(x - y) for x, y in zip(a['prompt_logprobs'][1:], b['prompt_logprobs'][1:]))
print('--nnodes 2 (two processes) vs --tp-size 2: max |Δ prompt logprob| %.2e, greedy identical: %s' % (d, a['output_ids'] == b['output_ids']))" \
		|| echo "--nnodes 2: no comparison (see $logs/node0.err, $logs/node1.err)"
	m="--device cuda --model-path out/configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 4096"
	for run in tp1 tp2 tp2_eager tp2_custom_ar; do
		flags="--tp-size ${run:2:1}"
		[ "$run" = tp2_eager ] && flags="$flags --disable-cuda-graph"
		# tp2 and tp2_eager: NCCL for every all-reduce, the baseline.
		[ "$run" = tp2 ] || [ "$run" = tp2_eager ] && flags="$flags --disable-custom-all-reduce"
		[ "$run" = tp2_custom_ar ] && flags="$flags --enable-custom-all-reduce"
		echo "== decode $run ($flags)"
		out/gosling bench one-batch $m $flags --batch 1,16,64 --input-len 128 --output-len 64 --repeat "${TP_REPEAT:-1}" --json >"$logs/decode_$run.json" 2>"$logs/decode_$run.err" \
			|| tail -20 "$logs/decode_$run.err"
	done
	for tp in 1 2; do
		echo "== prefill 2048, TP=$tp"
		out/gosling bench one-batch $m --tp-size $tp --batch 1 --input-len 2048 --output-len 16 --json >"$logs/prefill_tp$tp.json" 2>"$logs/prefill_tp$tp.err" \
			|| tail -20 "$logs/prefill_tp$tp.err"
	done
	python3 - "$logs" <<'PY'
import json, os, sys
logs = sys.argv[1]
def load(name):
    p = os.path.join(logs, name + ".json")
    try:
        return json.load(open(p))
    except Exception as e:
        print("%s: no result (%s)" % (name, e)); return None
runs = {r: load("decode_" + r) for r in ("tp1", "tp2", "tp2_eager", "tp2_custom_ar")}
print("dummy llama-3.1-8b bf16, decode (input 128, output 64): tok/s (ms/step)")
print("%-14s %s" % ("run", "".join("%22s" % ("batch %d" % b) for b in (1, 16, 64))) + "   decode steps replayed/captured/eager by rank")
for name, rep in runs.items():
    if rep is None: continue
    cells = "".join("%22s" % ("%.1f (%.2f)" % (x["decode_tok_per_s"], x["decode_ms_per_step"])) for x in rep["results"])
    g = rep.get("rank_graph_steps") or [rep["decode_graph_steps"]]
    print("%-14s %s   %s" % (name, cells, "  ".join("%d/%d/%d" % (c["replays"], c["captures"], c["eager"]) for c in g)))
one, two = runs["tp1"], runs["tp2"]
if one and two:
    print("TP=2 / TP=1 decode (graphs both):", "  ".join("batch %d %.2fx" % (a["batch"], b["decode_tok_per_s"] / a["decode_tok_per_s"]) for a, b in zip(one["results"], two["results"])))
p1, p2 = load("prefill_tp1"), load("prefill_tp2")
if p1 and p2:
    a, b = p1["results"][0]["prefill_tok_per_s"], p2["results"][0]["prefill_tok_per_s"]
    print("prefill 2048: TP=1 %.0f tok/s, TP=2 %.0f tok/s (%.2fx)" % (a, b, b / a))
PY
	# Models that need the second GPU: qwen3-32b (65 GB of bf16, on one
	# card only with a small KV cache) and llama-3.1-70b in FP8 (70 GB).
	[ -n "${TP_SKIP_LARGE:-}" ] && exit 0
	q="--device cuda --model-path out/configs/qwen3-32b --load-format dummy --dtype bfloat16 --max-running-requests 64 --context-length 1024"
	for tp in 1 2; do
		echo "== dummy qwen3-32b bf16, TP=$tp, decode (input 128, output 64)"
		timeout 240 out/gosling bench one-batch $q --tp-size $tp --batch 1,16,64 --input-len 128 --output-len 64 --repeat "${TP_REPEAT:-1}" \
			2>"$logs/qwen3_32b_tp$tp.err" | tee "$logs/qwen3_32b_tp$tp.txt" || tail -5 "$logs/qwen3_32b_tp$tp.err"
		grep -o 'device_weight_bytes=[0-9]*' "$logs/qwen3_32b_tp$tp.err" | head -1
	done
	echo "== dummy llama-3.1-70b, --quantization fp8, TP=2"
	timeout 300 out/gosling bench one-batch --device cuda --model-path out/configs/llama-3.1-70b --load-format dummy --dtype bfloat16 \
		--quantization fp8 --tp-size 2 --max-running-requests 64 --context-length 1024 --batch 1,16,64 --input-len 128 --output-len 64 \
		2>"$logs/llama70b_fp8_tp2.err" | tee "$logs/llama70b_fp8_tp2.txt" || tail -5 "$logs/llama70b_fp8_tp2.err"
	grep -o 'device_weight_bytes=[0-9]*' "$logs/llama70b_fp8_tp2.err" | head -1
	;;
quant)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	if [ "${2:-all}" != bench ] && [ "${2:-all}" != kernels ]; then
		(cd device/cuda && ../../out/cuda.test -test.run 'TestGPUQuantOps|TestGPUQGemvPreq|TestGPUQGemvResources|TestGPUModelOpsMoE|TestKernelDeclaration' -test.v) >"$logs/quant_cuda.log" 2>&1
		echo "device/cuda quant: $(grep -c -- '--- PASS' "$logs/quant_cuda.log") pass, $(grep -c -- '--- FAIL' "$logs/quant_cuda.log") fail"
		grep -E -- '--- FAIL|worst|panic' "$logs/quant_cuda.log" | sort | uniq -c | sort -rn | head -20
		grep -E -- 'registers' "$logs/quant_cuda.log"
		(cd engine && ../out/engine.test -test.run 'TestGPUQuantGGUF|TestGPUQuant4' -test.v) >"$logs/quant_engine.log" 2>&1
		echo "engine quant: $(grep -c -- '--- PASS' "$logs/quant_engine.log") pass, $(grep -c -- '--- FAIL' "$logs/quant_engine.log") fail"
		grep -E -- '--- FAIL|GPU weights|Δ prompt|greedy|divergence|panic' "$logs/quant_engine.log" | head -40
	fi
	[ "${2:-all}" = tests ] && exit 0
	if [ "${2:-all}" = kernels ]; then
		# The decode kernels alone: GB/s of the quantised bytes, integer and float.
		(cd device/cuda && ../../out/cuda.test -test.run '^$' -test.bench 'BenchmarkGPUQGemv|BenchmarkGPUCopyDtoD' -test.benchtime 200x) |
			tee "$logs/quant_kernels.txt"
		exit 0
	fi
	for q in ${3:-q4_k_m q8_0 awq}; do
		f=/tmp/l8b-$q.gguf fmt="--format gguf --dtype $q"
		if [ $q = awq ]; then
			f=/tmp/l8b-awq fmt="--format hf --dtype awq4_g128"
		fi
		if [ ! -e $f ]; then
			t0=$SECONDS
			out/gosling model random --shape llama-3.1-8b $fmt --out $f
			echo "made $f in $((SECONDS - t0)) s"
		fi
		# d:kern:preq — GOSLING_QGEMV_PREQ=0 is the integer kernels with
		# each block quantising x (before issue 24's qquant_x).
		for run in auto:int:1 auto:int:0 auto:float:1 bfloat16:int:1; do
			d=${run%%:*} kern=${run#*:} preq=${run##*:}
			kern=${kern%:*}
			echo "== llama-3.1-8b $q, --dtype $d, GOSLING_QGEMV=$kern GOSLING_QGEMV_PREQ=$preq"
			GOSLING_QGEMV=$kern GOSLING_QGEMV_PREQ=$preq out/gosling bench one-batch --device cuda --model-path $f --dtype $d --batch 1,8 \
				--input-len 2048 --output-len 128 --repeat 3 2>"$logs/quant_${q}_${d}_${kern}_$preq.err" |
				tee "$logs/quant_${q}_${d}_${kern}_$preq.txt"
			grep -o 'device_weight_bytes=[0-9]*' "$logs/quant_${q}_${d}_${kern}_$preq.err" | head -1
		done
	done
	;;
vision)
	logs=${OUT:-out/logs}
	mkdir -p "$logs"
	export XDG_CACHE_HOME=/tmp/gosling-cache
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
	m="--device cuda --model-path out/configs/qwen2.5-vl-7b --load-format dummy --dtype bfloat16"
	for size in 448x448 1280x720; do
		echo "== image $size, batch 1 and 8"
		out/gosling bench one-batch $m --image-size $size --batch 1,8 --input-len 64 --output-len 32 --repeat 3 \
			2>"$logs/vision_$size.err" | tee "$logs/vision_$size.txt" || tail -20 "$logs/vision_$size.err"
		out/gosling bench one-batch $m --image-size $size --batch 1,8 --input-len 64 --output-len 32 --repeat 3 --json \
			>"$logs/vision_$size.json" 2>>"$logs/vision_$size.err"
	done
	;;
verify)
	logs=${OUT:-out/logs}
	mkdir -p "$logs/verify"
	v=$logs/verify
	export XDG_CACHE_HOME=/tmp/gosling-cache NCCL_NVLS_ENABLE=0
	[ -e ../shared ] || ln -s "$PWD/out/shared" ../shared
	nvidia-smi --query-gpu=index,name --format=csv,noheader | tee "$v/gpu.txt"
	t0=$(date +%s)
	count() { echo "$(grep -c -- '--- PASS' "$1") pass, $(grep -c -- '--- FAIL' "$1") fail, exit $(tail -1 "$1")"; }
	# Three suites side by side (one GPU holds two), then the TP tests on both
	# GPUs: the whole call stays under the device tool's 600 s.
	(cd device/cuda && CUDA_VISIBLE_DEVICES=0 timeout 280 ../../out/cuda.test -test.run 'GPU|Kernel' -test.skip P2P -test.v >"$v/cuda.log" 2>&1; echo $? >>"$v/cuda.log") &
	(cd attention/gpu/gputest && CUDA_VISIBLE_DEVICES=1 timeout 280 ../../../out/attn_bench.test -test.run TestCUDA -test.v >"$v/attn.log" 2>&1; echo $? >>"$v/attn.log") &
	(cd engine && CUDA_VISIBLE_DEVICES=0 timeout 280 ../out/engine.test -test.run "${ENGINE_RUN:-GPU}" -test.skip TP -test.v >"$v/engine.log" 2>&1; echo $? >>"$v/engine.log") &
	wait
	echo "[$(( $(date +%s) - t0 ))s] device/cuda: $(count "$v/cuda.log"); attention: $(count "$v/attn.log"); engine: $(count "$v/engine.log")"
	(cd engine && timeout 180 ../out/engine.test -test.run GPUTP -test.v >"$v/tp.log" 2>&1; echo $? >>"$v/tp.log")
	echo "[$(( $(date +%s) - t0 ))s] engine TP: $(count "$v/tp.log")"
	grep -hE -- '^\s*--- FAIL' "$v"/*.log | head -30
	timeout 60 out/gosling generate --device cuda --tp-size 2 --model-path out/shared/models/stories260K/stories260K.gguf --input-ids 1 \
		--max-new-tokens 256 --temperature 0 --json >"$v/generate_tp2.json" 2>"$v/generate_tp2.err"
	rc=$?
	echo "[$(( $(date +%s) - t0 ))s] generate --tp-size 2: exit $rc (124: it did not exit)"
	tar czf "$logs/verify.tgz" -C "$logs" verify && rm -rf "$v"
	tar -czf "$logs/nvrtc.tgz" -C /tmp gosling-cache # carry it as out/nvrtc.tgz next time
	;;
esac
