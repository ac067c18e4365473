"""PyTorch peer for bench/gpu/run.sh: torch.nn.functional.scaled_dot_product_attention on the GPU
in fp32, fp16 and bf16 (tensors of that dtype), same shapes as cuda_bench.cpp. CSV:
dtype,B,H,S,D,causal,ms (times only: run.sh compares times, and GFLOP/s are attngen_cuda_bench's,
counted by bench/flops.h)."""
import sys

import torch
import torch.nn.functional as F

SHAPES = [(4, 12, 512, 64), (8, 12, 197, 64), (1, 16, 2048, 64), (1, 8, 8192, 64)]
# Named as in attngen's variant model (and cuda_bench.cpp's CSV), for run.sh's join.
DTYPES = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]


def time_ms(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return sorted(samples)[len(samples) // 2]


def main():
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as attngen computes
    print("dtype,B,H,S,D,causal,ms")
    for name, dtype in DTYPES:
        for causal in (0, 1):
            for b, h, s, d in SHAPES:
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                fn()
                torch.cuda.synchronize()
                # Each timing covers about 50 ms of calls (at least 3), from one more warm call's
                # time, as cuda_bench.cpp's.
                warm_ms = time_ms(fn, 1)
                ms = time_ms(fn, max(3, int(50.0 / max(warm_ms, 1e-3))))
                print(f"{name},{b},{h},{s},{d},{causal},{ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
