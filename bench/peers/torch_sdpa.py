"""Peer: torch.nn.functional.scaled_dot_product_attention, fp32 on the CPU, inference.

    python3 bench/peers/torch_sdpa.py --threads 2 [--build build/release] bench/shapes/*.txt

Prints one JSON line per shape (see common.py); Q, K, V are [B, H, S, D] contiguous, PyTorch's
own layout, causal as is_causal=True (Sq = Skv, so the alignment question does not arise). The
shapes and their FLOPs come from the build's attngen_bench (common.describe()).
"""
import common

PEER = "torch_sdpa"


def main():
    args, described = common.arguments(__doc__)
    shapes = described["shapes"]
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        for shape in shapes:
            common.emit(PEER, shape["name"], error=f"torch not installed: {e}")
        return
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for shape in shapes:
            size = (shape["b"], shape["h"], shape["s"], shape["d"])
            q, k, v = (torch.rand(size, generator=generator, dtype=torch.float32) * 2 - 1 for _ in range(3))
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"])
            ms = common.median_ms(run, args.min_time)
            common.emit(PEER, shape["name"], ms, shape["flops"],
                        threads=torch.get_num_threads(), version=torch.__version__)


if __name__ == "__main__":
    main()
