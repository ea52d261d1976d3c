"""Variants of one FlashAttention-forward kernel timed at one shape, interleaved with cuDNN, repeated.

    python bench/gpu/codegen_fa_ablate.py --kernels K1.py K2.py ... --out DIR [--shape 4,32,16384] [--repeats 3]
        [--kernel-checks]

For lowering ablations (one schedule, several ways to emit it) where the differences are a few percent:
each kernel runs in its own process (bench/gpu/harness_common.child), is checked first as in
codegen_fa.py (NaN-prefilled output, every element finite, fp32 softmax reference on every head of
three small shapes: one KV block, an odd trip count, mixed batch and heads; with --kernel-checks also
the shapes codegen_fa.py draws from the kernel's own facts: two KV blocks, a trip count below the stage
count, one no ring depth divides, 2x4x1024; then on the timed shape's own inputs against the fp32 reference on its four corner heads and every head against cuDNN), and
only then timed ``--repeats`` times (do_bench medians with the SM clock sampled). cuDNN's SDPA is
timed in its own process before the first kernel, between kernels and after the last, so a drift of
the clock over the run shows in the baseline too. Output: DIR/codegen_fa_ablate.json and one line
per kernel (median TFLOP/s, spread, cycles per KV iteration at the sampled clock).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from harness_common import child, device_info, log, respond  # noqa: E402

SMALL = ((1, 2, 128, "one KV block"), (1, 2, 384, "trip count 3"), (2, 3, 640, "mixed batch and heads"))


def _times(run, tensors, shape, repeats: int) -> list[dict]:
    from codegen_fa import time_it

    return [time_it(run, tensors, shape) for _ in range(repeats)]


def small_shapes(mod, kernel_checks: bool) -> list[tuple[int, int, int, str]]:
    """SMALL, and with ``kernel_checks`` the check shapes of codegen_fa.py for this kernel (no shape twice)."""
    from codegen_fa import check_shapes

    out = list(SMALL)
    if kernel_checks:
        seen = {(b, h, s) for b, h, s, _ in out}
        out += [x for x in check_shapes(mod.PARAMS, mod.STAGES, mod.RINGS) if x[:3] not in seen]
    return out


def run_kernel(path: Path, shape: tuple[int, int, int], repeats: int, kernel_checks: bool = False) -> dict:
    import torch
    from codegen_fa import check, describe, kv_cycles, load

    mod = load(path)
    params, dtype, d = mod.PARAMS, mod.PARAMS["dtype"], mod.PARAMS["head_dim"]
    rec: dict = {"kernel": path.stem, "schedule": mod.SCHEDULE, "checks": [], "timings": []}

    def run(q, k, v, o, sm_scale):
        mod.launch(q, k, v, o, sm_scale)
        return o

    ok = True
    for b, h, s, why in small_shapes(mod, kernel_checks):
        c, _ = check(run, (b, h, s, d), dtype, every_head=True, against_cudnn=False)
        c["why"] = why
        ok &= c["ok"]
        rec["checks"].append(c)
        log(f"  {path.stem}: check {b}x{h}x{s}x{d} ({why}): {describe(c)}")
    full = (*shape, d)
    c, tensors = check(run, full, dtype, every_head=False, against_cudnn=True)
    ok &= c["ok"]
    rec["checks"].append(c)
    log(f"  {path.stem}: check {'x'.join(map(str, full))}: {describe(c)}")
    rec["ok"] = ok
    if ok:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for t in _times(run, tensors, full, repeats):
            t.update(kv_cycles(t, full, params, sms, mod.SCHEDULE["ii"]))
            rec["timings"].append(t)
    return rec


def run_cudnn(shape: tuple[int, int, int], dtype: str, repeats: int) -> dict:
    from codegen_fa import check, sdpa

    def run(q, k, v, o, sm_scale):
        return sdpa(q, k, v, sm_scale, "cudnn")

    full = (*shape, 128)
    c, tensors = check(run, full, dtype, every_head=False, against_cudnn=False)
    rec = {"kernel": "sdpa_cudnn", "dtype": dtype, "check": c, "ok": c["ok"], "timings": []}
    if c["ok"]:
        rec["timings"] = _times(run, tensors, full, repeats)
    return rec


def summary(rec: dict) -> str:
    tf = [t["tflops"] for t in rec.get("timings", [])]
    if not tf:
        return f"{rec['kernel']}: not timed ({'check failed' if not rec.get('ok') else rec.get('error', '?')})"
    cyc = [t.get("cycles_per_iteration") for t in rec["timings"] if t.get("cycles_per_iteration")]
    mhz = [t["clocks"].get("sm_clock_mhz_median") for t in rec["timings"]]
    return (f"{rec['kernel']}: {statistics.median(tf):.1f} TFLOP/s (runs {', '.join(f'{x:.1f}' for x in tf)}), "
            + (f"{statistics.median(cyc):.0f} cycles/KV iter, " if cyc else "") + f"SM MHz {mhz}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="*", default=[])
    ap.add_argument("--out")
    ap.add_argument("--shape", default="4,32,16384", help="B,H,S (head_dim from the kernel)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--kernel-checks", action="store_true",
                    help="also check the kernel on codegen_fa.py's shapes (two KV blocks, odd trip count, 2x4x1024)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--cudnn", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.one:
        return respond(lambda: run_kernel(Path(args.one), shape, args.repeats, args.kernel_checks))
    if args.cudnn:
        return respond(lambda: run_cudnn(shape, args.cudnn, args.repeats))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dtypes = []
    for k in args.kernels:
        text = Path(k).read_text(encoding="utf-8")
        dtypes.append("bf16" if "'dtype': 'bf16'" in text else "fp16")
    doc = {"bench": "codegen_fa_ablate", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "device": device_info(), "shape": shape, "repeats": args.repeats, "method": __doc__.strip().splitlines()[0],
           "runs": []}
    common = ["--shape", args.shape, "--repeats", str(args.repeats)]
    for i, k in enumerate(args.kernels):
        for dtype in sorted(set(dtypes)) if i == 0 else []:
            doc["runs"].append(child(__file__, ["--cudnn", dtype, *common], args.timeout))
            log(summary(doc["runs"][-1]))
        rec = child(__file__, ["--one", k, *common, *(["--kernel-checks"] if args.kernel_checks else [])],
                    args.timeout)
        rec.setdefault("kernel", Path(k).stem)
        doc["runs"].append(rec)
        log(summary(rec))
        if i % 3 == 2 or i == len(args.kernels) - 1:
            doc["runs"].append(child(__file__, ["--cudnn", dtypes[i], *common], args.timeout))
            log(summary(doc["runs"][-1]))
    (out / "codegen_fa_ablate.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    log("---- summary ----")
    for r in doc["runs"]:
        log(summary(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
