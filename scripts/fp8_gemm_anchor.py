#!/usr/bin/env python3
"""PyTorch's FP8 GEMMs at a 2,048-token prefill's llama-3.1-8b shapes.

torch._scaled_mm with one scale per row of x and per output channel of w
(rowwise, what --quantization fp8 uses) and with scalar scales, beside
torch.mm in bf16; TFLOP/s from CUDA events over graph-free loops. This is
the peer for BenchmarkGPUPrefillFP8 (device/cuda), run in the same command.
"""
import torch

SHAPES = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gateup", 28672, 4096), ("down", 4096, 14336)]
M = 2048


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps / 1e3


def main():
    dev = "cuda"
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for name, n, k in SHAPES:
        x = torch.randn(M, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sx = torch.rand(M, 1, device=dev, dtype=torch.float32) + 0.5
        sw = torch.rand(1, n, device=dev, dtype=torch.float32) + 0.5
        one = torch.ones((), device=dev, dtype=torch.float32)
        flops = 2.0 * M * n * k
        res = {"bf16 mm": timed(lambda: torch.mm(x, w.t()))}
        res["fp8 rowwise->bf16"] = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16))
        res["fp8 scalar->bf16"] = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        try:
            res["fp8 scalar->f32"] = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.float32))
        except RuntimeError as err:
            print("  f32 out:", str(err).splitlines()[0])
        for what, sec in res.items():
            print("%-7s %-18s %8.1f us %7.0f TFLOP/s" % (name, what, sec * 1e6, flops / sec / 1e12))


if __name__ == "__main__":
    main()
