"""Run FlashAttention kernels with and without clock stamps, check both, and write the stamps (issue 21, session 70).

    python bench/gpu/stamp_fa.py KERNEL.py:STAMPED.py [...] --out DIR [--shape 1,32,8192]

For each pair (a `twill codegen` kernel and its copy from `bench/gpu/stamp_kernel.py`): each kernel runs on
NaN-prefilled output and is compared with torch's SDPA in fp32 on heads 0-1 (relative L2 at most 4e-3, every
element finite, as bench/gpu/ncu_fa.py checks); a kernel that fails reports nothing. Then both are timed (CUDA
events, median of 20 launches after 3 warm-ups) and the stamped kernel runs once more with a zeroed buffer, whose
stamps of CTA (0, 0) are written to DIR/stamps_<name>.json: per group, per trip, per point, the clock of each of
its 4 warps (lane 0). The stamped kernel's cycles per KV step are the median difference of consecutive loop tops;
the unstamped kernel's are that times the ratio of their times (both ran on the same GPU at the same shape).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ncu_fa import load  # noqa: E402
from stamp_kernel import GROUPS, POINTS, THREADS, TRIPS  # noqa: E402


def _check(mod, q, k, v, torch) -> float | None:
    """Relative L2 error on heads 0-1 of one NaN-prefilled launch, None if it fails."""
    o = torch.full_like(q, float("nan"))
    mod.launch(q, k, v, o, q.shape[-1] ** -0.5)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q[:, :2].float(), k[:, :2].float(), v[:, :2].float())
    err = float((o[:, :2].float() - ref).norm() / ref.norm())
    return err if err <= 4e-3 and bool(torch.isfinite(o).all()) else None


def _time(mod, q, k, v, torch) -> float:
    o = torch.empty_like(q)
    for _ in range(3):
        mod.launch(q, k, v, o, q.shape[-1] ** -0.5)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        mod.launch(q, k, v, o, q.shape[-1] ** -0.5)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def run_pair(plain: Path, stamped: Path, shape: tuple[int, int, int], torch) -> dict:
    base, marked = load(plain), load(stamped)
    b, h, s = shape
    d = base.PARAMS["head_dim"]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[base.PARAMS["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(21)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    buf = torch.zeros(GROUPS * TRIPS * POINTS * THREADS, dtype=torch.int32, device="cuda")
    marked.STAMPS = buf
    out = {"kernel": str(plain), "stamped": str(stamped), "shape": list(shape),
           "device": torch.cuda.get_device_name()}
    errs = {"plain": _check(base, q, k, v, torch), "stamped": _check(marked, q, k, v, torch)}
    out["rel_l2"] = errs
    if None in errs.values():
        out["ok"] = False
        return out
    out["ms"] = {"plain": _time(base, q, k, v, torch), "stamped": _time(marked, q, k, v, torch)}
    buf.zero_()
    o = torch.empty_like(q)
    marked.launch(q, k, v, o, d ** -0.5)
    torch.cuda.synchronize()
    stamps = buf.view(GROUPS, TRIPS, POINTS, THREADS)[:, :, :, ::32].cpu()  # lane 0 of each warp
    groups = {g: stamps[g].tolist() for g in range(GROUPS) if bool(stamps[g].any())}
    trips = min(s // base.PARAMS["block_n"], TRIPS)
    steps = [(groups[g][t + 1][0][0] - groups[g][t][0][0]) % 2**32 for g in groups for t in range(4, trips - 2)]
    out["stamped_cycles_per_step"] = statistics.median(steps)
    out["plain_cycles_per_step"] = out["stamped_cycles_per_step"] * out["ms"]["plain"] / out["ms"]["stamped"]
    out["stamps"] = groups
    out["ok"] = True
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", help="KERNEL.py:STAMPED.py")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape", default="1,32,8192", help="B,H,S (head dim from the kernel)")
    args = ap.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for pair in args.pairs:
        plain, stamped = (Path(x) for x in pair.split(":"))
        try:
            rec = run_pair(plain, stamped, shape, torch)
        except Exception as err:  # noqa: BLE001 - one kernel's failure must not lose the others' records
            rec = {"kernel": str(plain), "ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
        failed += not rec["ok"]
        (args.out / f"stamps_{plain.stem}.json").write_text(json.dumps(rec), encoding="utf-8")
        summary = {k: rec.get(k) for k in ("ok", "rel_l2", "ms", "stamped_cycles_per_step", "plain_cycles_per_step",
                                           "error")}
        print(f"{plain.stem}: {summary}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
