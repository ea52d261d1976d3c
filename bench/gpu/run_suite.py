"""Build, check and run the Hopper microbenchmarks; write one JSON file per benchmark.

    python bench/gpu/run_suite.py --out DIR [--only wgmma,tma] [--nvcc nvcc]

Each benchmark is a CUDA C++ program in this folder (wgmma.cu, tma.cu, tma_loaded.cu, pipes.cu, sync.cu,
smem.cu, fa_consumer.cu) built for
sm_90a. Every program checks its own results against a host reference and marks a measurement
``"ok": false`` (with no time) when the check fails. This driver adds what the programs cannot see:
the GPU's name, driver and clocks from nvidia-smi before and after, the date, the build command and
the ptxas report, and the SASS instruction counts of every kernel (a benchmark whose kernels lack the
instructions it means to time, or that ptxas serialised, is marked failed here).

Output: DIR/{wgmma,tma,pipes,sync,smem,tma_loaded,fa_consumer}.json, the input of ``twill calibrate --from-results DIR``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
BENCHES = ("wgmma", "tma", "pipes", "sync", "smem", "tma_loaded", "fa_consumer", "wgmma_queue")
ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]
NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v", *ARCH_FLAGS]

METHOD = {
    "wgmma": "CUDA C++ with inline PTX (wgmma.mma_async, SMEM descriptors without swizzle); one CTA per SM "
             "(120 KiB of dynamic shared memory keeps a second CTA off), timed with clock64 on each SM. "
             "latency: one wgmma, commit, wait_group 0, repeated; throughput: groups of 8 back-to-back wgmmas "
             "into one accumulator with one group in flight (wait_group 1). D = 8*A*B with A, B small multiples "
             "of 1/8 (exact in fp16, bf16 and e4m3), compared with a host matmul. Median over 3 launches x all SMs.",
    "tma": "cp.async.bulk.tensor.2d with an mbarrier (complete_tx), tensor maps from cuTensorMapEncodeTiled "
           "(uint16 elements, 8 KiB rows). latency: one CTA, one load in flight, clock64 from issue to the "
           "phase completing, 256 samples each with the raw cycles kept; the waiting thread uses try_wait with "
           "CUTLASS's suspend-time hint (records with suspend_hint_ns = 10000000), which resumes it when the phase "
           "completes; records without the hint show the ~180-220-cycle poll grid of the first runs; L2: the tile was loaded once before; HBM: L2 flushed with a 256 MiB memset, each "
           "tile touched once. throughput: one thread keeps 192 KiB of tiles in flight; 1 CTA or one CTA per SM; "
           "L2 = an 8 MiB region, every SM on distinct tiles (staggered) or on the same tiles at once (lockstep); "
           "HBM = a 2 GiB tensor streamed once. Tiles are summed and compared with the hash that filled them.",
    "tma_loaded": "TMA latency under load: one CTA per SM runs the loads of the first two waves of an 8192^3 fp16 "
                  "GEMM (128 x 64 A tiles, block_n x 64 B tiles, 128B swizzle, raster order, so A panels are shared "
                  "along a tile row and B panels along a tile column), a ring of `depth` slots; a consumer thread "
                  "holds each slot for the MMA's pace after both tiles arrived; observer threads wait on each tile's "
                  "mbarrier with try_wait's suspend hint and record clock64; latency = completion - issue over every "
                  "CTA and step of two launches after a warm-up launch; one CTA alone as the unloaded reference. "
                  "Every slot's last tiles are summed and compared with the hash that filled them.",
    "pipes": "1024 threads per SM, 8 independent loop-carried chains per thread and op kind (x <- ex2(-x), "
             "x <- fma(x, a, b), x <- max(x, y), x <- bits(cvt.rn.f16x2.f32(c, x))), inline PTX; pairs issue the "
             "same counts of two kinds together. Latency: one warp, one chain. Final values recomputed on the host.",
    "smem": "shared-memory bandwidth per SM: 4..32 warps of one CTA per SM issue back-to-back ld.shared.v4, "
            "st.shared.v4, ldmatrix.x4 or stmatrix.x4 (512 bytes per warp instruction, no bank conflicts); and "
            "12 warps of ld.shared.v4 / ldmatrix.x4 while warpgroup 0 runs wgmma m64n64k16 SS fp16 (128 B/clk of "
            "SMEM operands at full rate), each rate with and without the other. Loaded words summed and compared "
            "with the host; stored images compared word by word; wgmma accumulators (A = B = 1) compared with 16 x "
            "the count.",
    "sync": "mbarrier ping-pong between two warpgroups (one arrival per warp after __syncwarp, 128 waiters) and "
            "between two threads; wait on a completed phase; bar.sync with 256/384 threads and a bar.arrive / "
            "bar.sync ping-pong; register -> SMEM -> register hand-off through full/empty mbarriers for 0..32 KiB; "
            "setmaxnreg dec 24 / inc 240 (FA3) and a dec/inc loop. Waits poll with try_wait, test_wait, or try_wait "
            "with CUTLASS's suspend hint (records' \"poll\"; one wait loop per kernel, a template argument). Tokens "
            "and data sums are checked.",
    "fa_consumer": "the register work of a FlashAttention-forward consumer warpgroup (64 x 128 S and O tiles in wgmma "
                   "accumulator layout, one warp per SM sub-partition), one CTA per SM. steps: one warpgroup runs 512 "
                   "rounds of one softmax step (ex2 = FFMA + MUFU.EX2 per element; row max = two 32-deep FMNMX chains, "
                   "2 shuffle stages, the running max; row sum = two 32-deep FADD chains, 2 shuffle stages, l*alpha + "
                   "sum; rescale = 64 FMUL; cast = 32 F2FP packs) alone, beside a second warpgroup streaming 8 RS "
                   "(P.V) + 8 SS (Q.K^T) wgmma m64n128k16 per commit group (or 16 SS), paired with a second "
                   "warpgroup running the same step, and (ex2, row max, row sum) with the step's own warpgroup "
                   "keeping one commit group of 8 SS or 8 RS wgmma m64n128k16 of its own in flight through each "
                   "round (issued before it, wait_group 1 after it; alone or beside the streaming warpgroup), the "
                   "step's cycles then read between the commit and the wait and the issue's from fence to commit; "
                   "cycles per round by clock64 between named barriers of the warpgroup. consumer loop: twill's fa_opt consumer (alpha, rescale, cast, [turn: bar.sync], P.V RS + "
                   "Q.K^T SS issue, [bar.arrive], row sum, wait_group 0, row max, running max, exp) over 256 KV steps "
                   "with K and V resident in SMEM, one warpgroup alone or two taking turns; optional clock stamps "
                   "(32-bit clock) split each step. Checks: every step's final values replayed on the host (bit-exact, "
                   "ex2 within 1e-4), the partner's accumulators against the host's Q.K^T and P.V, the loop's O / l "
                   "against fp64 attention within 4e-3 relative L2 per row.",
    "wgmma_queue": "one warpgroup issues one commit group of C wgmma m64n128k16 fp16 (C = 1..16, SS or RS) with the "
                   "tensor core idle (its previous group retired 1000 cycles before), clock64 from wgmma.fence to the "
                   "commit (issue) and to wait_group 0 returning (done), 256 rounds per CTA, one CTA per SM, median "
                   "over CTAs of 3 launches; alone or beside a second warpgroup streaming groups of 8 SS wgmmas. "
                   "Checks: C*A*B and the partner's 8*A*B against a host matmul (exact inputs).",
}

# What each benchmark's SASS must contain (kernel-name fragment -> opcode regex) and must not.
SASS_REQUIRED = {
    "wgmma": [("wgmma_kernel", r"\b[HQ]GMMA\.64x(64|128|256)x(16|32)")],
    "tma": [("tma_throughput_kernel", r"\bUTMALDG\b"), ("tma_latency_kernel", r"\bUTMALDG\b")],
    "tma_loaded": [("tma_loaded_kernel", r"\bUTMALDG\b")],
    "wgmma_queue": [("queue_kernel", r"\bHGMMA\.64x128x16")],
    "pipes": [("pipe_kernelILi1E", r"\bMUFU\.EX2\b"), ("pipe_kernelILi2E", r"\bFFMA\b"),
              ("pipe_kernelILi3E", r"\bFMNMX\b"), ("pipe_kernelILi4E", r"\bF2FP\.F16\.F32\.PACK_AB\b"),
              ("pipe_kernelILi5E", r"\bF2FP\.BF16\.F32\.PACK_AB\b")],
    "smem": [("smem_kernelILb0", r"\bLDSM\b"), ("smem_kernelILb0", r"\bSTSM\b"), ("smem_kernelILb1", r"\bHGMMA\.64x64x16")],
    "sync": [("mbar_pingpong_kernel", r"\bSYNCS\."), ("named_barrier_kernel", r"\bBAR\.(SYNC|ARV)"),
             ("setmaxnreg_kernel", r"\bUSETMAXREG\b")],
    "fa_consumer": [("wg_pipe_kernelILi0E", r"\bMUFU\.EX2\b"), ("wg_pipe_kernelILi1E", r"\bFMNMX\b"),
                    ("wg_pipe_kernelILi2E", r"\bFADD\b"), ("wg_pipe_kernelILi3E", r"\bFMUL\b"),
                    ("wg_pipe_kernelILi4E", r"\bF2FP\.F16\.F32\.PACK_AB\b"),
                    ("wg_pipe_kernelILi0ELi1E", r"\bHGMMA\.64x128x16"),
                    ("fa_loop_kernel", r"\bHGMMA\.64x128x16"), ("fa_loop_kernelILb1E", r"\bBAR\.ARV\b")],
}
# ptxas says so when it serialises wgmma or ignores setmaxnreg; either makes the timing meaningless.
PTXAS_FATAL = re.compile(r"(wgmma[^\n]*serializ|serializ[^\n]*wgmma|C7508|setmaxnreg[^\n]*ignored)", re.I)
# A dead wgmma that ptxas kept only for its commit group: an m64n8 dummy writing RZ.
SASS_DUMMY_GMMA = re.compile(r"GMMA\.64x8x16[^;]*RZ, gdesc\[URZ\]")


def log(msg: str) -> None:
    print(msg, flush=True)


def _sources_hash(bench: str, nvcc: str) -> str:
    h = hashlib.sha256()
    for name in (f"{bench}.cu", "common.cuh", "tma_common.cuh", "gen_wgmma.py", "run_suite.py"):
        h.update((HERE / name).read_bytes())
    h.update(" ".join([nvcc, *NVCC_FLAGS]).encode())
    return h.hexdigest()


def build(bench: str, nvcc: str) -> tuple[Path, str]:
    """Compile one benchmark unless an identical build is already in build/; return (binary, ptxas log)."""
    BUILD.mkdir(exist_ok=True)
    if bench in ("wgmma", "smem", "fa_consumer", "wgmma_queue"):
        sys.path.insert(0, str(HERE))
        import gen_wgmma  # the generator lives beside this script

        gen_wgmma.write(BUILD / "wgmma_ops.cuh")
    binary, stamp, logfile = BUILD / bench, BUILD / f"{bench}.hash", BUILD / f"{bench}.ptxas.txt"
    digest = _sources_hash(bench, nvcc)
    if binary.is_file() and stamp.is_file() and stamp.read_text() == digest and logfile.is_file():
        log(f"[{bench}] build up to date")
        return binary, logfile.read_text()
    cmd = [nvcc, *NVCC_FLAGS, f"-I{BUILD}", "-o", str(binary), str(HERE / f"{bench}.cu")]
    log(f"[{bench}] {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{bench}: nvcc failed:\n{proc.stderr[-4000:]}")
    logfile.write_text(proc.stderr)
    stamp.write_text(digest)
    return binary, proc.stderr


def sass_counts(binary: Path) -> dict[str, dict[str, int]] | None:
    """Opcode counts per kernel from cuobjdump, or None where cuobjdump is missing."""
    tool = shutil.which("cuobjdump")
    if not tool:
        return None
    proc = subprocess.run([tool, "-sass", str(binary)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    counts: dict[str, dict[str, int]] = {}
    current = None
    for line in proc.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = counts.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", line)
        if m and current is not None:
            op = m.group(1)
            if SASS_DUMMY_GMMA.search(line):
                op = "DUMMY_GMMA"
            current[op] = current.get(op, 0) + 1
    return counts


def sass_problems(bench: str, counts: dict[str, dict[str, int]] | None) -> list[str]:
    if counts is None:
        return []
    problems = []
    for fragment, pattern in SASS_REQUIRED.get(bench, []):
        kernels = {k: v for k, v in counts.items() if fragment in k}
        if not kernels:
            problems.append(f"no kernel matching {fragment!r} in the SASS")
        for name, ops in kernels.items():
            if not any(re.search(pattern, op) for op in ops):
                problems.append(f"{name}: no instruction matching {pattern!r}")
            if ops.get("DUMMY_GMMA"):
                problems.append(f"{name}: ptxas replaced dead wgmmas by dummies")
    return problems


def registers(ptxas: str) -> dict[str, int]:
    """Registers per thread of each kernel, from ``ptxas -v``."""
    out: dict[str, int] = {}
    current = None
    for line in ptxas.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            out[current] = int(m.group(1))
            current = None
    return out


def nvidia_smi() -> dict[str, str] | None:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return None
    fields = ["name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "power.draw", "power.limit", "temperature.gpu", "pstate"]
    proc = subprocess.run([tool, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()}
    values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(fields, values, strict=False))


def clock_report() -> str | None:
    """nvidia-smi's clock and performance report (application and boost clocks, throttle reasons)."""
    tool = shutil.which("nvidia-smi")
    if not tool:
        return None
    proc = subprocess.run([tool, "-q", "-d", "CLOCK,PERFORMANCE"], capture_output=True, text=True)
    return proc.stdout[-6000:] if proc.returncode == 0 else proc.stderr.strip()


def run_bench(bench: str, nvcc: str, out: Path, timeout: float) -> dict:
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        binary, ptxas = build(bench, nvcc)
    except RuntimeError as err:
        log(str(err))
        return {"bench": bench, "ok": False, "error": str(err), "date": started}
    fatal = sorted({m.group(0) for m in PTXAS_FATAL.finditer(ptxas)})
    counts = sass_counts(binary)
    problems = sass_problems(bench, counts) + [f"ptxas: {w}" for w in fatal]
    raw = out / f"{bench}.raw.json"
    smi_before = nvidia_smi()
    log(f"[{bench}] running {binary}")
    try:
        proc = subprocess.run([str(binary), str(raw)], capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        rc, stdout, stderr = -1, (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (
            err.stdout or ""), f"timed out after {timeout:.0f} s"
    smi_after = nvidia_smi()
    doc: dict = {"bench": bench, "records": []}
    if raw.is_file():
        doc = json.loads(raw.read_text())
        raw.unlink()
    if problems:
        for r in doc.get("records", []):
            r["ok"] = False
            r["rejected_by_driver"] = problems
    doc.update({
        "ok": rc == 0 and not problems and all(r.get("ok", False) for r in doc.get("records", [])),
        "exit_code": rc,
        "stderr_tail": stderr[-2000:],
        "date": started,
        "method": METHOD[bench],
        "build": {"command": " ".join([nvcc, *NVCC_FLAGS]), "ptxas_fatal": fatal, "ptxas_registers": registers(ptxas)},
        "sass_opcode_counts": counts,
        "sass_problems": problems,
        "nvidia_smi": {"before": smi_before, "after": smi_after, "clock_report": clock_report()},
    })
    (out / f"{bench}.json").write_text(json.dumps(doc, indent=1) + "\n")
    if rc != 0:
        log(f"[{bench}] exit {rc}: {stderr[-1500:]}")
    bad = [r for r in doc.get("records", []) if not r.get("ok", False)]
    log(f"[{bench}] {len(doc.get('records', []))} records, {len(bad)} failed checks; wrote {out / (bench + '.json')}")
    if stdout and rc != 0:
        log(stdout[-1500:])
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the results (created)")
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ",".join(BENCHES))
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per benchmark program")
    ap.add_argument("--build-only", action="store_true", help="compile (and check SASS) without running")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        ap.error(f"unknown benchmarks {unknown}; choose from {', '.join(BENCHES)}")
    if args.build_only:
        for b in names:
            binary, ptxas = build(b, args.nvcc)
            problems = sass_problems(b, sass_counts(binary)) + [m.group(0) for m in PTXAS_FATAL.finditer(ptxas)]
            log(f"[{b}] built; problems: {problems or 'none'}")
        return 0
    ok = True
    for b in names:
        ok = run_bench(b, args.nvcc, out, args.timeout).get("ok", False) and ok
    log("all benchmarks passed their checks" if ok else "some benchmarks failed their checks (see the JSON)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
