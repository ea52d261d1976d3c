"""Compare the kernels timed by fidelity.py with twill's predictions; print a Markdown table.

    python bench/gpu/fidelity_report.py [--results bench/results/h100] [--arch h100] [--write-band archs/fidelity.json]

Runs on the CPU. For each kernel it solves the built-in program that models it (``gemm`` with the
kernel's tiles, ``fa_fwd -p subtiles=2`` for attention), simulates the schedule, and estimates the
whole kernel (``twill.estimate``) at the arch's clock and at the SM clock nvidia-smi sampled while the
kernel ran. It also derives the measured steady-state cycles per iteration from two runs that differ
only in the loop's trip count (K for the GEMM, the key length for attention), which removes the
prologue, the epilogue and the last wave from the comparison with the II. cuBLAS's tiles are not
known; its rows use the ``gemm`` program at 128x256x64 (cuBLAS's usual Hopper tile for these sizes)
and say so. ``--write-band`` records, per program, the range of measured / predicted kernel time over
the kernels that have the program's structure (Triton's TMA GEMM and cuBLAS for ``gemm``, cuDNN for
``fa_fwd``; FlashAttention-2 uses mma.sync without TMA or warp specialisation and is left out), which
``twill estimate`` prints as the prediction's error band.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from pathlib import Path

from twill.arch.registry import get_arch
from twill.estimate import estimate_fa_forward, estimate_gemm
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.schedule import Schedule
from twill.sim import simulate
from twill.solver import SolveOptions, solve
from twill.validate import problem_for

ROOT = Path(__file__).resolve().parents[2]


def _solve(arch, program: str, time_limit: float, **params):
    problem = build_problem(load_program(program, arch, params), arch)
    sched = solve(problem, SolveOptions(time_limit=time_limit))
    return sched, simulate(problem, sched, iterations=32)


def _read(path: str):
    """A schedule written by ``twill solve --out``, and its simulation."""
    sched = Schedule.read(path)
    return sched, simulate(problem_for(sched), sched, iterations=32)


def _cycles(rec: dict) -> float:
    """Measured kernel time in SM cycles at the clock sampled during the run."""
    return rec["ms"] * 1e-3 * rec["clocks"]["sm_clock_mhz_median"] * 1e6


def _pct(pred: float, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.0f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "bench" / "results" / "h100"))
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--fa-schedule", help="an fa_fwd -p subtiles=2 schedule from `twill solve --out` (else solved "
                    "here within --time-limit)")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--write-band", metavar="JSON", help="merge this arch's error band into JSON (archs/fidelity.json)")
    args = ap.parse_args(argv)
    arch = get_arch(args.arch)
    sms = int(arch.chip["sms"].value)
    clock = float(arch.chip["clock_mhz"].value)
    records = [r for r in json.loads((Path(args.results) / "fidelity.json").read_text())["records"] if r.get("ok")]

    rows, slopes, parts = [], [], []
    steady: dict[tuple, float] = {}  # (kernel, block_n) -> measured cycles per iteration at the clock seen
    ratios: dict[str, list[tuple[str, float]]] = {"gemm": [], "fa_fwd": []}
    solved: dict[tuple, tuple] = {}
    for r in records:
        if r["kernel"] in ("triton_gemm_tma", "cublas_matmul"):
            bm, bn, bk = (r["block_m"], r["block_n"], r["block_k"]) if "block_m" in r else (128, 256, 64)
            key = ("gemm", bm, bn, bk)
            if key not in solved:
                solved[key] = _solve(arch, "gemm", args.time_limit, block_m=bm, block_n=bn, block_k=bk)
            sched, sim = solved[key]
            e = estimate_gemm(arch, sched.ii, m=r["m"], n=r["n"], k=r["k"], block_m=bm,
                              block_n=bn, block_k=bk, prologue_cycles=max(0, sched.length - sched.ii))
            name = (f"Triton GEMM {bm}x{bn}x{bk}, {r['num_stages']} stages" if r["kernel"] == "triton_gemm_tma"
                    else f"cuBLAS (modelled as gemm {bm}x{bn}x{bk})")
            shape = f"{r['m']}x{r['n']}x{r['k']}"
            ratios["gemm"].append((f"{name} {shape}", r["ms"] / (e.seconds * 1e3)))
        elif r["kernel"].startswith("sdpa_") and r["seqlen"] == r.get("kv_len", r["seqlen"]):
            key = ("fa_fwd",)
            if key not in solved:
                solved[key] = (_read(args.fa_schedule) if args.fa_schedule
                               else _solve(arch, "fa_fwd", args.time_limit, subtiles=2))
            sched, sim = solved[key]
            e = estimate_fa_forward(arch, sched.ii, batch=r["batch"], heads=r["heads"], seqlen=r["seqlen"],
                                    head_dim=r["head_dim"], block_m=128, block_n=128,
                                    prologue_cycles=max(0, sched.length - sched.ii))
            backend = {"sdpa_flash": "FlashAttention-2 (PyTorch flash)", "sdpa_cudnn": "cuDNN"}[r["kernel"]]
            name = f"SDPA forward, {backend}"
            shape = f"B{r['batch']} H{r['heads']} S{r['seqlen']} D{r['head_dim']}"
            if r["kernel"] == "sdpa_cudnn":
                ratios["fa_fwd"].append((f"{name} {shape}", r["ms"] / (e.seconds * 1e3)))
        else:
            continue
        sampled = r["clocks"]["sm_clock_mhz_median"]
        at_sampled = e.seconds * clock / sampled
        rows.append([name, shape, f"{r['ms']:.3f}", f"{r['tflops']:.0f}", f"{sched.ii}", f"{sim.achieved_ii:.0f}",
                     f"{e.seconds * 1e3:.3f}", _pct(e.seconds * 1e3, r["ms"]), f"{sampled:.0f}",
                     f"{at_sampled * 1e3:.3f}", _pct(at_sampled * 1e3, r["ms"])])
        parts.append((r, e, sched.ii))

    # steady state: the same kernel at two trip counts
    def pair(kind: str, match, vary: str) -> None:
        group = [r for r in records if r["kernel"] == kind and match(r)]
        group.sort(key=lambda r: r[vary])
        if len(group) < 2:
            return
        lo, hi = group[0], group[-1]
        if kind == "triton_gemm_tma":
            ctas, d_iters = hi["ctas"], (hi["k"] - lo["k"]) // hi["block_k"]
            sched = solved[("gemm", hi["block_m"], hi["block_n"], hi["block_k"])][0]
            label = f"Triton GEMM {hi['block_m']}x{hi['block_n']}x{hi['block_k']}, M=N={hi['m']}, K {lo['k']} -> {hi['k']}"
        elif kind == "cublas_matmul":  # tiles unknown: counted in 128x256x64 tiles, as modelled
            ctas, d_iters = math.ceil(hi["m"] / 128) * math.ceil(hi["n"] / 256), (hi["k"] - lo["k"]) // 64
            sched = solved[("gemm", 128, 256, 64)][0]
            label = f"cuBLAS (as 128x256x64 tiles), M=N={hi['m']}, K {lo['k']} -> {hi['k']}"
        else:
            ctas, d_iters = hi["batch"] * hi["heads"] * math.ceil(hi["seqlen"] / 128), (hi["kv_len"] - lo["kv_len"]) // 128
            sched = solved[("fa_fwd",)][0]
            label = f"SDPA {kind[5:]}, B2 H16 S_q {hi['seqlen']}, S_kv {lo['kv_len']} -> {hi['kv_len']} (per 128x128 tile)"
        per_sm = ctas / sms * d_iters
        measured = (_cycles(hi) - _cycles(lo)) / per_sm
        steady[(kind, hi.get("block_n", 256))] = measured
        fixed = (hi["ms"] - lo["ms"]) * 1e-3 * clock * 1e6 / per_sm
        slopes.append([label, f"{measured:.0f}", f"{fixed:.0f}", f"{sched.ii}", _pct(sched.ii, measured),
                       _pct(sched.ii, fixed)])

    for bn in (256, 128):
        pair("triton_gemm_tma", lambda r, bn=bn: r["m"] == 8192 and r["block_n"] == bn, "k")
    pair("cublas_matmul", lambda r: r["m"] == 8192, "k")
    for kind in ("sdpa_cudnn", "sdpa_flash"):
        pair(kind, lambda r: r["seqlen"] == 8192, "kv_len")

    head = ["kernel", "shape", "measured ms", "TFLOP/s", "twill II", "simulated cycles/iter",
            f"twill estimate ms ({clock:.0f} MHz)", "error", "SM MHz seen", "estimate ms at MHz seen", "error"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    head = ["steady state (two trip counts)", "measured cycles/iteration (MHz seen)",
            f"measured cycles/iteration ({clock:.0f} MHz)", "twill II", "error (MHz seen)", f"error ({clock:.0f} MHz)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in slopes:
        print("| " + " | ".join(row) + " |")
    # Where each kernel's time goes, as factors of measured / predicted time: the clock (arch clock / clock
    # seen), the loop (measured steady-state cycles per iteration / II) and what lies outside the loop
    # (measured cycles / (waves x iterations x steady-state cycles): prologue, epilogue, tail, launch).
    print()
    head = ["kernel", "shape", "measured / predicted time", "clock", "loop (steady state / II)",
            "outside the loop"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r, e, ii in parts:
        key = ("triton_gemm_tma", r["block_n"]) if r["kernel"] == "triton_gemm_tma" else (r["kernel"], 256)
        ss = steady.get(key)
        if ss is None:
            continue
        seen = r["clocks"]["sm_clock_mhz_median"]
        f_clock = clock / seen
        f_loop = ss / ii
        f_out = _cycles(r) / (e.waves * e.iterations_per_cta * ss)
        name = {"triton_gemm_tma": f"Triton GEMM 128x{r.get('block_n')}x64", "cublas_matmul": "cuBLAS",
                "sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA FlashAttention-2"}[r["kernel"]]
        shape = (f"{r['m']}x{r['n']}x{r['k']}" if "m" in r else f"S{r['seqlen']}")
        print(f"| {name} | {shape} | {r['ms'] / (e.seconds * 1e3):.2f} | {f_clock:.2f} | {f_loop:.2f} | {f_out:.2f} |")
    if args.write_band:
        _write_band(Path(args.write_band), arch, args.results, clock, ratios, records)
    return 0


def _write_band(path: Path, arch, results: str, clock: float, ratios: dict, records: list[dict]) -> None:
    """Merge {arch: {program: band}} into ``path``: measured / predicted kernel time, min and max."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    doc = json.loads((Path(results) / "fidelity.json").read_text())
    device = doc.get("device")
    gpu = device.get("name") if isinstance(device, dict) else device
    entry = {"gpu": gpu or arch.name, "date": str(doc.get("date", ""))[:10] or dt.date.today().isoformat(),
             "clock_mhz": clock,
             "source": f"bench/gpu/fidelity_report.py --results {results} --arch {arch.name} (docs/benchmarks.md, "
                       "fidelity tables): measured kernel time / twill estimate at the arch clock"}
    for program, pairs in ratios.items():
        if pairs:
            vals = [v for _, v in pairs]
            entry[program] = {"measured_over_predicted": {"min": round(min(vals), 3), "max": round(max(vals), 3)},
                              "kernels": {k: round(v, 3) for k, v in pairs}}
    data[arch.name] = entry
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
