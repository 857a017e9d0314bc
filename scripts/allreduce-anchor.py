"""PyTorch's NCCL all-reduce over this machine's GPUs: the anchor that
`gosling bench allreduce` is compared with in the same command.

    python3 scripts/allreduce-anchor.py [ngpus]

Prints one line per message size: bytes, mean time, algorithm and bus
bandwidth (NCCL's definition: 2(n-1)/n of the algorithm bandwidth), bf16,
5 warm-ups and 20 timed all-reduces per size, 1 KiB to 1 GiB.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, init_method="tcp://127.0.0.1:29511")
    size = 1024
    while size <= 1 << 30:
        x = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        sec = start.elapsed_time(end) / 1e3 / 20
        if rank == 0:
            alg = size / sec / 1e9
            print(f"torch allreduce {size} bytes {sec * 1e6:.1f} us alg {alg:.1f} GB/s bus {alg * 2 * (n - 1) / n:.1f} GB/s", flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
    mp.spawn(run, args=(n,), nprocs=n)
