"""Launch one generated FlashAttention-forward kernel twice, checked, for Nsight Compute to profile.

    ncu --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters --section SpeedOfLight -o REPORT \\
        python bench/gpu/ncu_fa.py KERNEL.py [--shape 1,32,8192]

The first launch compiles and warms up, the second is the one profiled. The output of the second is
compared with torch's SDPA in fp32 (relative L2 at most 4e-3 in fp16, as bench/gpu/codegen_fa.py
checks), so a profile of a wrong kernel is never kept: the script exits 1 and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def load(path: Path):
    """The kernel module written by ``twill codegen`` (it defines ``launch`` and ``PARAMS``)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--shape", default="1,32,8192", help="B,H,S (head dim from the kernel)")
    args = ap.parse_args(argv)
    mod = load(args.kernel)
    b, h, s = (int(x) for x in args.shape.split(","))
    d = mod.PARAMS["head_dim"]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[mod.PARAMS["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(21)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    scale = d ** -0.5
    for _ in range(2):
        mod.launch(q, k, v, o, scale)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q[:, :2].float(), k[:, :2].float(), v[:, :2].float())
    err = float((o[:, :2].float() - ref).norm() / ref.norm())
    print(f"{args.kernel.name}: relative L2 error {err:.2e} on heads 0-1 of {args.shape}", flush=True)
    return 0 if err <= 4e-3 and torch.isfinite(o).all() else 1


if __name__ == "__main__":
    sys.exit(main())
