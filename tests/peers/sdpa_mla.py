"""sdpa_mla.py: PyTorch's scaled_dot_product_attention at the MLA attention shapes, as the peer of
`clmoe-bench mla` (test-only; run on a CUDA machine with torch installed).

q, k: [B, H, T, Dn + Dr], v: [B, H, T, Dv], bf16, causal; forward and forward + backward
(autograd, dO random) timed with CUDA events, median of --reps after 3 warm-ups. FLOPs count
unmasked pairs as clmoe-bench does: forward 2 B H (Dqk + Dv) T (T + 1) / 2, forward +
backward 3.5x that. One JSON line per shape on stdout.

  python3 sdpa_mla.py --shapes 8:8192 --batch 2 [--Dn 128 --Dr 64 --Dv 128 --reps 20]
"""
import argparse
import json

import torch
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="8:8192", help="H:T pairs, comma-separated")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--Dn", type=int, default=128)
    ap.add_argument("--Dr", type=int, default=64)
    ap.add_argument("--Dv", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    for pair in args.shapes.split(","):
        H, T = (int(x) for x in pair.split(":"))
        B, dqk, dv = args.batch, args.Dn + args.Dr, args.Dv
        q = torch.randn(B, H, T, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, H, T, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, H, T, dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(B, H, T, dv, device=dev, dtype=torch.bfloat16)

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(do)

        flops = 2.0 * B * H * (dqk + dv) * T * (T + 1) / 2
        tf = timed(fwd, args.reps)
        tb = timed(fwd_bwd, args.reps)
        print(json.dumps({"peer": "torch sdpa", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                          "B": B, "H": H, "T": T, "Dqk": dqk, "Dv": dv, "causal": True,
                          "fwd_ms": round(tf, 4), "fwd_bwd_ms": round(tb, 4), "bwd_ms": round(tb - tf, 4),
                          "fwd_tflops": round(flops / tf * 1e-9, 1),
                          "fwd_bwd_tflops": round(3.5 * flops / tb * 1e-9, 1)}), flush=True)


if __name__ == "__main__":
    main()
