"""Whole-kernel estimates: from cycles per loop iteration of one CTA to seconds and TFLOP/s.

A schedule's II is the cost of one iteration of one CTA's inner loop. The kernel runs ``ctas``
CTAs, one per SM at a time, in ``waves = ceil(ctas / sms)`` waves, each CTA running its loop
``iterations_per_cta`` times after a ``prologue_cycles`` start-up (pipeline fill, epilogue). So

    seconds = waves * (iterations_per_cta * cycles_per_iteration + prologue_cycles) / clock

This is a first-order model: one CTA per SM, every CTA of a wave equally long, no tail effects
beyond wave quantisation, clock at the arch's quoted frequency. It is a prediction, not a peak: real
kernels of the same structure have run longer than it, and ``fidelity_band`` reads by how much from
``archs/fidelity.json`` (measured / predicted kernel time on the arch's GPU, written by
``bench/gpu/fidelity_report.py --write-band`` from the fidelity table of docs/benchmarks.md). The
estimate carries that band, and ``lines()`` prints the range of time and TFLOP/s it implies.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from twill.arch.model import Arch
from twill.errors import UsageError

__all__ = ["Estimate", "Band", "fidelity_band", "with_band", "estimate_fa_forward", "estimate_fa_backward",
           "estimate_gemm", "causal_iterations"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    """Measured / predicted kernel time over the kernels of one structure on one GPU (the fidelity table)."""

    low: float
    high: float
    kernels: int
    gpu: str
    program: str
    source: str


def fidelity_band(arch_name: str, program: str, path=None) -> Band | None:
    """The error band of ``program``'s estimate on ``arch_name`` from ``archs/fidelity.json``, or None
    when no kernel of that structure was measured on that arch's GPU."""
    if path is None:
        from twill.arch.registry import archs_dir

        path = archs_dir() / "fidelity.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = data.get(arch_name, {})
    band = entry.get(program)
    if not band:
        return None
    r = band["measured_over_predicted"]
    return Band(low=float(r["min"]), high=float(r["max"]), kernels=len(band.get("kernels", {})),
                gpu=str(entry.get("gpu", arch_name)), program=program, source=str(entry.get("source", "")))


def with_band(e: Estimate, program: str, path=None) -> Estimate:
    """``e`` with the fidelity band of ``program`` on ``e``'s arch attached (unchanged if there is none)."""
    band = fidelity_band(e.arch, program, path)
    return replace(e, band=band) if band else e


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """The estimate and the numbers it came from, so a reader can redo the arithmetic."""

    kernel: str
    arch: str
    sms: int
    clock_mhz: float
    flops: float
    ctas: int
    waves: int
    iterations_per_cta: int
    cycles_per_iteration: int
    prologue_cycles: int
    cycles_per_cta: int
    seconds: float
    tflops: float
    peak_tflops: float
    fraction_of_peak: float
    band: Band | None = None

    def lines(self) -> list[str]:
        """A readable summary, one fact per line."""
        last = self.ctas - (self.waves - 1) * self.sms
        return [
            f"{self.kernel} on {self.arch}: twill's prediction from the schedule (no measurement)",
            f"  {self.ctas} CTAs on {self.sms} SMs: {self.waves} wave{'s' if self.waves != 1 else ''} "
            f"(last wave {last}/{self.sms} SMs busy)",
            f"  per CTA: {self.iterations_per_cta} iterations x {self.cycles_per_iteration} cycles "
            f"+ {self.prologue_cycles} prologue = {self.cycles_per_cta} cycles",
            f"  time: {self.waves} x {self.cycles_per_cta} cycles at {self.clock_mhz:g} MHz = "
            f"{self.seconds * 1e3:.4g} ms",
            f"  work: {self.flops / 1e12:.4g} TFLOP -> {self.tflops:.1f} TFLOP/s predicted = "
            f"{100 * self.fraction_of_peak:.1f}% of the {self.peak_tflops:.1f} TFLOP/s tensor peak",
            *self._band_lines(),
        ]

    def _band_lines(self) -> list[str]:
        if self.band is None:
            return ["  this is the schedule's prediction (II x iterations at the arch clock), not a measurement: no "
                    f"kernel of this structure has been measured on {self.arch} (archs/fidelity.json), so it has no "
                    "error band"]
        b = self.band

        def span(lo: float, hi: float, fmt: str) -> str:
            a, z = format(lo, fmt), format(hi, fmt)
            return a if a == z else f"{a}-{z}"

        return [f"  measured kernels of this structure on the {b.gpu} ({b.kernels}) took "
                f"{span(b.low, b.high, '.2f').replace('-', 'x-')}x the prediction: expect "
                f"{span(self.seconds * b.low * 1e3, self.seconds * b.high * 1e3, '.4g')} ms, "
                f"{span(self.tflops / b.high, self.tflops / b.low, '.0f')} TFLOP/s "
                "(fidelity table, docs/benchmarks.md; archs/fidelity.json)"]


def _positive(**values: int) -> None:
    for name, v in values.items():
        if v <= 0:
            raise UsageError(f"{name} {v}: must be positive")


def _estimate(arch: Arch, kernel: str, *, ctas: int, iterations: int, cycles_per_iteration: int,
              prologue_cycles: int, flops: float, dtype: str) -> Estimate:
    """The shared arithmetic of every kernel: waves, time, throughput against the tensor peak."""
    if cycles_per_iteration < 0 or prologue_cycles < 0:
        raise UsageError("cycles_per_iteration and prologue_cycles must be >= 0")
    sms = int(arch.chip["sms"].value)
    clock_mhz = float(arch.chip["clock_mhz"].value)
    waves = math.ceil(ctas / sms)
    per_cta = iterations * cycles_per_iteration + prologue_cycles
    seconds = waves * per_cta / (clock_mhz * 1e6)
    peak = sms * arch.rate(f"tensor_flops_per_clk_{dtype}") * clock_mhz * 1e6
    achieved = flops / seconds if seconds > 0 else math.inf
    return Estimate(
        kernel=kernel, arch=arch.name, sms=sms, clock_mhz=clock_mhz, flops=flops, ctas=ctas, waves=waves,
        iterations_per_cta=iterations, cycles_per_iteration=cycles_per_iteration, prologue_cycles=prologue_cycles,
        cycles_per_cta=per_cta, seconds=seconds, tflops=achieved / 1e12, peak_tflops=peak / 1e12,
        fraction_of_peak=achieved / peak,
    )


def causal_iterations(seqlen: int, block_outer: int, block_inner: int) -> int:
    """Mean inner-loop trip count of a causal mask, rounded up.

    The CTA of outer block b sees inner blocks up to the diagonal: ``ceil(min(seqlen, (b+1) *
    block_outer) / block_inner)`` of them, about half of the full count on average. The mean is
    what a wave costs when the tile scheduler pairs long and short CTAs (FA3 and FA4 schedule the
    longest first); a static scheduler would pay the longest CTA in the last wave instead.
    """
    blocks = math.ceil(seqlen / block_outer)
    total = sum(math.ceil(min(seqlen, (b + 1) * block_outer) / block_inner) for b in range(blocks))
    return math.ceil(total / blocks)


def estimate_fa_forward(arch: Arch, cycles_per_iteration: int, *, batch: int, heads: int, seqlen: int, head_dim: int,
                        block_m: int, block_n: int, causal: bool = False, prologue_cycles: int = 0,
                        dtype: str = "fp16") -> Estimate:
    """FlashAttention forward: one CTA per (batch, head, Q block of ``block_m`` rows), its loop
    over K/V blocks of ``block_n`` rows (all of them, or up to the diagonal when causal).

    FLOPs count the two GEMMs, QKᵀ and PV: 2 x 2·s²·d per head, halved when causal (the
    convention of FlashAttention's benchmarks), so TFLOP/s compare with published numbers.
    """
    return _estimate_fa(arch, cycles_per_iteration, "forward", 2, batch=batch, heads=heads, seqlen=seqlen,
                        head_dim=head_dim, block_outer=block_m, block_inner=block_n, causal=causal,
                        prologue_cycles=prologue_cycles, dtype=dtype)


def estimate_fa_backward(arch: Arch, cycles_per_iteration: int, *, batch: int, heads: int, seqlen: int,
                         head_dim: int, block_m: int, block_n: int, causal: bool = False, prologue_cycles: int = 0,
                         dtype: str = "fp16") -> Estimate:
    """FlashAttention backward, single pass: one CTA per (batch, head, K/V block of ``block_n``
    rows), its loop over Q blocks of ``block_m`` rows, accumulating dK and dV and adding into dQ.

    FLOPs count five GEMMs (S = QKᵀ recomputed, dP = dO·Vᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q,
    dQ += dS·K): 5 x 2·s²·d per head, halved when causal.
    """
    return _estimate_fa(arch, cycles_per_iteration, "backward", 5, batch=batch, heads=heads, seqlen=seqlen,
                        head_dim=head_dim, block_outer=block_n, block_inner=block_m, causal=causal,
                        prologue_cycles=prologue_cycles, dtype=dtype)


def _estimate_fa(arch: Arch, cycles_per_iteration: int, direction: str, gemms: int, *, batch: int, heads: int,
                 seqlen: int, head_dim: int, block_outer: int, block_inner: int, causal: bool, prologue_cycles: int,
                 dtype: str) -> Estimate:
    """One CTA per (batch, head, outer block); its loop runs over the inner blocks; each GEMM of the
    algorithm is 2·s²·d FLOPs per head, halved when causal."""
    _positive(batch=batch, heads=heads, seqlen=seqlen, head_dim=head_dim, block_outer=block_outer,
              block_inner=block_inner)
    ctas = batch * heads * math.ceil(seqlen / block_outer)
    iterations = (causal_iterations(seqlen, block_outer, block_inner) if causal
                  else math.ceil(seqlen / block_inner))
    flops = 2.0 * gemms * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    name = f"FlashAttention {direction} b{batch} h{heads} s{seqlen} d{head_dim}{' causal' if causal else ''}"
    return _estimate(arch, name, ctas=ctas, iterations=iterations, cycles_per_iteration=cycles_per_iteration,
                     prologue_cycles=prologue_cycles, flops=flops, dtype=dtype)


def estimate_gemm(arch: Arch, cycles_per_iteration: int, *, m: int, n: int, k: int, block_m: int, block_n: int,
                  block_k: int, prologue_cycles: int = 0, dtype: str = "fp16") -> Estimate:
    """GEMM C = A·B with A m x k: one CTA per (block_m x block_n) output tile, its loop over K in
    steps of ``block_k``; 2·m·n·k FLOPs."""
    _positive(m=m, n=n, k=k, block_m=block_m, block_n=block_n, block_k=block_k)
    ctas = math.ceil(m / block_m) * math.ceil(n / block_n)
    iterations = math.ceil(k / block_k)
    return _estimate(arch, f"GEMM {m}x{n}x{k}", ctas=ctas, iterations=iterations,
                     cycles_per_iteration=cycles_per_iteration, prologue_cycles=prologue_cycles,
                     flops=2.0 * m * n * k, dtype=dtype)
