"""Time real kernels whose structure twill's built-in programs model, for the fidelity check.

    python bench/gpu/fidelity.py --out DIR

* a Triton GEMM with TMA tensor descriptors and known tiles (BLOCK_M x BLOCK_N x BLOCK_K, num_stages),
  the structure of twill's ``gemm`` program, at 4096^3 and 8192^3 (fp16 in, fp32 accumulate);
* PyTorch's scaled_dot_product_attention forward with the FlashAttention and cuDNN backends,
  B=2, H=16, D=128, S = 4096 and 8192, fp16, not causal (twill's ``fa_fwd``);
* cuBLAS (torch.matmul) as a reference point.

Each kernel's output is checked (GEMM against an fp32 matmul, attention against an fp32 softmax on two
heads) and poisoned with NaN before the run; a kernel that fails its check is reported with no time.
Times are medians of triton.testing.do_bench (L2 flushed between runs); nvidia-smi samples the SM clock
every 50 ms while each kernel is timed. Output: DIR/fidelity.json. twill's predictions are computed on
the CPU from this file (docs/benchmarks.md, "H100 calibration").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import shutil
import statistics
import subprocess
import sys
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl


def log(msg: str) -> None:
    print(msg, flush=True)


class ClockSampler:
    """nvidia-smi polling the SM clock and power while a kernel is being timed."""

    def __init__(self) -> None:
        self.proc = None
        self.samples: list[tuple[float, float]] = []

    def __enter__(self) -> ClockSampler:
        tool = shutil.which("nvidia-smi")
        if tool:
            self.proc = subprocess.Popen(
                [tool, "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            with contextlib.suppress(ValueError, IndexError):
                self.samples.append((float(parts[0]), float(parts[1])))

    def summary(self) -> dict:
        if not self.samples:
            return {"n": 0}
        mhz = [s[0] for s in self.samples]
        watts = [s[1] for s in self.samples]
        return {"n": len(mhz), "sm_clock_mhz_median": statistics.median(mhz), "sm_clock_mhz_min": min(mhz),
                "sm_clock_mhz_max": max(mhz), "power_w_median": statistics.median(watts)}


def bench(fn, warmup_ms: int = 100, rep_ms: int = 600) -> tuple[float, dict]:
    """Median milliseconds of ``fn`` and the clocks seen meanwhile."""
    fn()
    torch.cuda.synchronize()
    with ClockSampler() as clocks:
        ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    return float(ms), clocks.summary()


# ---- GEMM -----------------------------------------------------------------------------------------
@triton.jit
def _gemm_tma_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_STAGES: tl.constexpr):
    """C = A @ B^T, A (M x K) and B (N x K) K-major, loaded with TMA; grouped tile order for L2 reuse."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.float16))


def gemm_case(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, stages: int, warps: int) -> dict:
    from triton.tools.tensor_descriptor import TensorDescriptor

    torch.manual_seed(m + block_n)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b, [block_n, block_k])
    c_desc = TensorDescriptor.from_tensor(c, [block_m, block_n])
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)

    def run():
        return _gemm_tma_kernel[grid](a_desc, b_desc, c_desc, m, n, k, BLOCK_M=block_m, BLOCK_N=block_n,
                                      BLOCK_K=block_k, GROUP_M=8, NUM_STAGES=stages, num_warps=warps)

    compiled = run()
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    rel = float((c.float() - ref).norm() / ref.norm())
    ok = bool(torch.isfinite(c).all()) and rel < 1e-2
    ptx = compiled.asm.get("ptx", "")
    rec = {"kernel": "triton_gemm_tma", "m": m, "n": n, "k": k, "block_m": block_m, "block_n": block_n,
           "block_k": block_k, "num_stages": stages, "num_warps": warps, "ctas": grid[0],
           "iterations_per_cta": math.ceil(k / block_k), "rel_err": rel, "ok": ok,
           "uses_wgmma": "wgmma.mma_async" in ptx, "uses_tma": "cp.async.bulk.tensor" in ptx,
           "registers": getattr(compiled, "n_regs", None), "shared_bytes": compiled.metadata.shared}
    if ok:
        ms, clocks = bench(run)
        rec.update(ms=ms, tflops=2.0 * m * n * k / (ms * 1e-3) / 1e12, clocks=clocks)
    return rec


def cublas_case(m: int, n: int, k: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = a @ b.T
    ref = a.float() @ b.float().T
    rel = float((c.float() - ref).norm() / ref.norm())
    rec = {"kernel": "cublas_matmul", "m": m, "n": n, "k": k, "rel_err": rel, "ok": rel < 1e-2}
    if rec["ok"]:
        ms, clocks = bench(lambda: a @ b.T)
        rec.update(ms=ms, tflops=2.0 * m * n * k / (ms * 1e-3) / 1e12, clocks=clocks)
    return rec


# ---- attention ------------------------------------------------------------------------------------
def attention_case(backend_name: str, batch: int, heads: int, seqlen: int, head_dim: int, kv_len: int = 0) -> dict:
    """Forward attention of ``seqlen`` queries over ``kv_len`` keys (default: ``seqlen``)."""
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]
    torch.manual_seed(seqlen)
    kv_len = kv_len or seqlen
    q = torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, heads, kv_len, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    rec = {"kernel": f"sdpa_{backend_name}", "batch": batch, "heads": heads, "seqlen": seqlen, "kv_len": kv_len,
           "head_dim": head_dim, "causal": False}
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        # fp32 reference on two heads of batch 0
        worst = 0.0
        for h in range(2):
            qh, kh, vh = q[0, h].float(), k[0, h].float(), v[0, h].float()
            p = torch.softmax(qh @ kh.T / math.sqrt(head_dim), dim=-1)
            ref = p @ vh
            worst = max(worst, float((out[0, h].float() - ref).norm() / ref.norm()))
        rec.update(rel_err=worst, ok=bool(torch.isfinite(out).all()) and worst < 2e-2)
        if rec["ok"]:
            ms, clocks = bench(lambda: F.scaled_dot_product_attention(q, k, v))
            flops = 4.0 * batch * heads * seqlen * kv_len * head_dim
            rec.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12, clocks=clocks)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    # (m, n, k): two cubes, and 8192 x 8192 x 4096 so that the K slope gives the steady-state cost per
    # K step without the prologue, epilogue and wave tail.
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 4096)):
        cases.append(("gemm", lambda m=m, n=n, k=k: gemm_case(m, n, k, 128, 256, 64, 3, 8)))
        cases.append(("gemm", lambda m=m, n=n, k=k: gemm_case(m, n, k, 128, 128, 64, 4, 4)))
        cases.append(("cublas", lambda m=m, n=n, k=k: cublas_case(m, n, k)))
    # Square attention at two sizes, and 8192 queries over 4096 keys for the slope per KV block.
    for seqlen, kv_len in ((4096, 4096), (8192, 8192), (8192, 4096)):
        for backend in ("flash", "cudnn"):
            cases.append(("attention", lambda b=backend, s=seqlen, kv=kv_len: attention_case(b, 2, 16, s, 128, kv)))
    records = []
    for name, fn in cases:
        try:
            rec = fn()
        except Exception as err:  # one broken case must not lose the others
            rec = {"kernel": name, "ok": False, "error": f"{type(err).__name__}: {err}",
                   "traceback": traceback.format_exc()[-3000:]}
        log(json.dumps({k: v for k, v in rec.items() if k != "traceback"}))
        records.append(rec)
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    doc = {
        "bench": "fidelity",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": {"name": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                   "triton": triton.__version__, "cudnn": torch.backends.cudnn.version()},
        "method": "triton.testing.do_bench median (warmup 100 ms, rep 600 ms, L2 flushed between runs); "
                  "outputs NaN-poisoned and checked against fp32 references before timing; nvidia-smi -lms 50 "
                  "samples the SM clock during each timing.",
        "records": records,
    }
    (out / "fidelity.json").write_text(json.dumps(doc, indent=1) + "\n")
    ok = all(r.get("ok") for r in records)
    log(f"wrote {out / 'fidelity.json'}: {sum(bool(r.get('ok')) for r in records)}/{len(records)} cases passed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
