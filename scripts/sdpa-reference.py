# PyTorch's own attention on the same GPU, for comparison with gosling's CUDA
# backends (issue 7): scaled_dot_product_attention with the FLASH_ATTENTION and
# CUDNN_ATTENTION backends, bf16, 32 query heads, 8 KV heads (GQA), head dim 128.
# Prefill: causal, one sequence, TFLOP/s (the causal half counted once).
# Decode: one query per sequence over a contiguous KV of `ctx` tokens, GB/s of KV read.
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
H, KV, D = 32, 8, 128
dev = "cuda"

def bench(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / iters

for name, be in [("FLASH_ATTENTION", SDPBackend.FLASH_ATTENTION), ("CUDNN_ATTENTION", SDPBackend.CUDNN_ATTENTION)]:
    for n in [1024, 4096, 16384]:
        q = torch.randn(1, H, n, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, KV, n, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, KV, n, D, device=dev, dtype=torch.bfloat16)
        try:
            with sdpa_kernel(be):
                t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), 20)
            flops = 4 * n * (n + 1) / 2 * H * D
            print(f"sdpa {name:16s} prefill 1x{n:<6d} {flops / t / 1e12:8.1f} TFLOP/s", flush=True)
        except Exception as ex:
            print(f"sdpa {name:16s} prefill 1x{n:<6d} unavailable: {str(ex).splitlines()[0][:80]}", flush=True)
    for b in [1, 16, 64]:
        for ctx in [4096, 32768]:
            q = torch.randn(b, H, 1, D, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, KV, ctx, D, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, KV, ctx, D, device=dev, dtype=torch.bfloat16)
            try:
                with sdpa_kernel(be):
                    t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True), 50)
                print(f"sdpa {name:16s} decode bs{b:<3d} ctx{ctx:<6d} {2 * b * ctx * KV * D * 2 / t / 1e9:8.0f} GB/s", flush=True)
            except Exception as ex:
                print(f"sdpa {name:16s} decode bs{b:<3d} ctx{ctx:<6d} unavailable: {str(ex).splitlines()[0][:80]}", flush=True)
            del q, k, v
