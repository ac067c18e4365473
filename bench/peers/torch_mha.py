"""Peer: torch.nn.MultiheadAttention(768, 12, batch_first=True) in inference on x [4, 512, 768],
self-attention, fp32 on the CPU (eval(), no_grad(), need_weights=False: PyTorch's fast path).

    python3 bench/peers/torch_mha.py --threads 2 [--build build/release]

Prints one JSON line (see common.py), shape "mha_layer"; the layer's sizes and FLOPs (the four
projections and attention, as attngen's mha benchmark counts them) come from the build's
attngen_bench (common.describe()).
"""
import common

PEER = "torch_mha"


def main():
    args, described = common.arguments(__doc__, shapes=False)
    layer = described["mha_layer"]
    try:
        import torch
    except ImportError as e:
        common.emit(PEER, layer["name"], error=f"torch not installed: {e}")
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(layer["e"], layer["h"], batch_first=True).eval()
    x = torch.rand(layer["b"], layer["s"], layer["e"]) * 2 - 1
    with torch.no_grad():
        ms = common.median_ms(lambda: mha(x, x, x, need_weights=False), args.min_time)
    common.emit(PEER, layer["name"], ms, layer["flops"],
                threads=torch.get_num_threads(), version=torch.__version__)


if __name__ == "__main__":
    main()
