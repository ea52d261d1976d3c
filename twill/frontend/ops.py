"""Tile-level op constructors that programs use: each asks the arch's cost model for its cycles.

These are the building blocks of ``programs/*.py``: a TMA load, a tensor-core MMA, exp on the
MUFU, FP32 and ALU work, TMEM loads and stores. They return ``Op`` values whose reservation
tables, latencies and footprints come from the arch, so one program runs on every arch.
"""

from __future__ import annotations

from twill.arch.model import Arch, Cost
from twill.ir import Issuer, Op, Use

__all__ = ["DTYPE_BYTES", "tma_load", "tma_store", "global_load", "mma", "exp", "fp32", "alu", "convert", "row_reduce",
           "tmem_load", "tmem_store", "softmax_exp", "softmax_exp_convert", "scale_store"]

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}


def tma_load(arch: Arch, name: str, nbytes: int, kind: str = "load", sharing: str = "all") -> Op:
    """A TMA tile copy global -> shared: variable latency, streaming, issued by one thread; its L2
    feed and latency are the ones measured for how the grid shares the tile (``sharing``, see
    ``CostModel.tma``)."""
    c = arch.cost.tma(nbytes, sharing)
    return Op(name=name, kind=kind, uses=(Use(unit="tma", length=c.busy),), latency=c.latency, is_async=True,
              issuer=Issuer.THREAD, smem_bytes=nbytes, variable_latency=True, streaming=True)


def tma_store(arch: Arch, name: str, nbytes: int, kind: str = "store") -> Op:
    """A TMA store or reduce-add shared -> global (variable latency, but fed by the loop)."""
    c = arch.cost.tma(nbytes)
    return Op(name=name, kind=kind, uses=(Use(unit="tma", length=c.busy),), latency=c.latency, is_async=True,
              issuer=Issuer.THREAD, smem_bytes=nbytes, variable_latency=True)


# cp.async moves at most 16 bytes per thread per instruction (PTX ISA, cp.async: cp-size 4, 8 or 16).
CP_ASYNC_BYTES_PER_THREAD = 16
THREADS_PER_WARPGROUP = 128  # 4 warps of 32 threads (PTX ISA, warpgroup)


def global_load(arch: Arch, name: str, nbytes: int, kind: str = "load") -> Op:
    """A pointer load global -> shared (Triton pipelines ``tt.load`` as cp.async): every thread of
    the issuing warp group issues its 16-byte pieces, then the copy completes asynchronously on
    the load/store units with a memory (variable) latency."""
    c = arch.cost.global_load(nbytes)
    issue = max(1, -(-nbytes // (CP_ASYNC_BYTES_PER_THREAD * THREADS_PER_WARPGROUP)))
    return Op(name=name, kind=kind, uses=(Use(unit="lsu", length=c.busy),), latency=c.latency, is_async=True,
              issue_cycles=issue, issuer=Issuer.WARPGROUP, smem_bytes=nbytes, variable_latency=True,
              streaming=True)


def mma(arch: Arch, name: str, m: int, n: int, k: int, dtype: str, kind: str = "mma") -> Op:
    """A tensor-core GEMM (m x k) @ (k x n) with an FP32 accumulator.

    The accumulator lives where the arch keeps it (``features.accumulator``): m*n registers
    (Hopper wgmma) or n TMEM columns (Blackwell tcgen05, 128 lanes). Issue slots: one
    instruction per 16-deep K step (32 for fp8) per 64 rows of M, each ``CostModel.mma_issue``
    cycles. A register accumulator lives in the issuing warpgroups, 64 rows each, so its group has
    at most 4 warps per 64 rows (``Op.max_warps``): PTX wgmma is m64 per warpgroup, and the model
    spreads an op's registers over every warp of its group, which would otherwise let an 8-warp
    group hold a 64-row accumulator at half the registers per thread.
    """
    c = arch.cost.mma(m, n, k, dtype)
    k_step = 32 if DTYPE_BYTES[dtype] == 1 else 16
    in_tmem = arch.feature("accumulator") == "tmem"
    issuer = Issuer.WARPGROUP if arch.feature("mma_issuer") == "warpgroup" else Issuer.THREAD
    return Op(name=name, kind=kind, uses=(Use(unit="tc", length=c.busy),), latency=c.latency, is_async=True,
              issue_cycles=arch.cost.mma_issue(max(1, (k // k_step) * max(1, m // 64))), issuer=issuer,
              regs=0 if in_tmem else m * n, tmem_cols=n * max(1, m // 128) if in_tmem else 0,
              max_warps=0 if in_tmem or issuer is not Issuer.WARPGROUP else 4 * -(-m // 64))


def _hold(*costs: Cost) -> int:
    """The issue span of register work that streams through several units at once: the longest of its
    parts' group holds, where one exceeds every part's unit time (0: the units' busy span)."""
    hold = max(c.hold or c.busy for c in costs)
    return hold if hold > max(c.busy for c in costs) else 0


def _sync(name: str, unit: str, c: Cost, regs: int, kind: str) -> Op:
    """Register work of one warpgroup: ``c.busy`` cycles on ``unit``, the group held ``c.hold`` where it
    issues slower than the unit serves."""
    return Op(name=name, kind=kind, uses=(Use(unit=unit, length=c.busy),), latency=c.latency,
              issuer=Issuer.WARPGROUP, regs=regs, sync_hold=c.hold)


def exp(arch: Arch, name: str, n: int, regs: int, kind: str = "exp") -> Op:
    return _sync(name, "mufu", arch.cost.exp(n), regs, kind)


def fp32(arch: Arch, name: str, n: int, regs: int, kind: str = "fp32") -> Op:
    return _sync(name, "fp32", arch.cost.fp32(n), regs, kind)


def alu(arch: Arch, name: str, n: int, regs: int, kind: str = "reduce") -> Op:
    return _sync(name, "alu", arch.cost.alu(n), regs, kind)


def row_reduce(arch: Arch, name: str, n: int, regs: int, unit: str, kind: str = "reduce") -> Op:
    """A row reduction of ``n`` elements on ``unit`` (``alu``: row max, ``fp32``: row sum): dependent
    chains in each thread, then shuffles across the threads of a row, so it runs at the arch's reduction
    rate where one is measured (``CostModel.reduce``), not at the pipe's elementwise rate."""
    return _sync(name, unit, arch.cost.reduce(n, unit), regs, kind)


def convert(arch: Arch, name: str, elements: int, regs: int, kind: str = "convert") -> Op:
    """FP32 -> FP16/BF16 packing: one instruction converts two elements."""
    return _sync(name, "alu", arch.cost.convert(max(1, elements // 2)), regs, kind)


def softmax_exp(arch: Arch, name: str, n: int, regs: int, kind: str = "exp") -> Op:
    """P = exp2(S * scale - m): one FFMA and one MUFU.EX2 per element, interleaved, so the op
    holds the FP32 pipes and the MUFU at once (a reservation table on two units)."""
    e, f = arch.cost.exp(n), arch.cost.fp32(n)
    return Op(name=name, kind=kind, uses=(Use(unit="mufu", length=e.busy), Use(unit="fp32", length=f.busy)),
              latency=max(e.latency, f.latency), issuer=Issuer.WARPGROUP, regs=regs, sync_hold=_hold(e, f))


def tmem_load(arch: Arch, name: str, nbytes: int, regs: int, kind: str = "tmem_load", wait: bool = False) -> Op:
    """tcgen05.ld + wait::ld: TMEM -> registers; a full 128-lane tile needs a warpgroup.

    ``wait``: the warps stall at tcgen05.wait::ld until the data lands, so the op holds its group
    for its whole latency while the TMEM port is busy only for the transfer (``Op.waits``)."""
    c = arch.cost.tmem_load(nbytes)
    return Op(name=name, kind=kind, uses=(Use(unit="tmem", length=c.busy),), latency=c.latency,
              issuer=Issuer.WARPGROUP, regs=regs, waits=wait)


def tmem_store(arch: Arch, name: str, nbytes: int, tmem_cols: int = 0, kind: str = "tmem_store") -> Op:
    """tcgen05.st: registers -> TMEM."""
    c = arch.cost.tmem_store(nbytes)
    return Op(name=name, kind=kind, uses=(Use(unit="tmem", length=c.busy),), latency=c.latency,
              issuer=Issuer.WARPGROUP, tmem_cols=tmem_cols)


def softmax_exp_convert(arch: Arch, name: str, n: int, emu: float, emu_fp32: int, emu_alu: int,
                        kind: str = "exp") -> Op:
    """One fragment of FA4's softmax: P = exp2(S * scale - m) and its FP32 -> 16-bit convert, in
    one instruction stream whose MUFU, FP32 and ALU work proceed in parallel (a reservation table
    on three units). A fraction ``emu`` of the exp2 runs as a polynomial (``emu_fp32`` FP32 and
    ``emu_alu`` ALU ops each) instead of on the MUFU. Result: the packed 16-bit fragment."""
    emulated = round(n * emu)
    e = arch.cost.exp(n - emulated)
    f = arch.cost.fp32(n + emu_fp32 * emulated)  # the scale-subtract FFMA of every element, + emulation
    cvt = arch.cost.convert(max(1, n // 2))
    alu = arch.cost.alu(emu_alu * emulated) if emulated else None
    uses = [Use(unit="mufu", length=e.busy), Use(unit="fp32", length=f.busy),
            Use(unit="alu", length=cvt.busy + (alu.busy if alu else 0))]
    latency = max(e.latency, f.latency, cvt.latency + (alu.busy if alu else 0))
    return Op(name=name, kind=kind, uses=tuple(uses), latency=latency, issuer=Issuer.WARPGROUP, regs=n // 2,
              sync_hold=_hold(e, f, cvt))


def scale_store(arch: Arch, name: str, words: int, kind: str = "correction") -> Op:
    """O *= alpha on a chunk in registers (FMUL), then tcgen05.st of the chunk back over O: the
    store issues once the multiplies have produced their results (FP32 latency)."""
    f = arch.cost.fp32(words)
    st = arch.cost.tmem_store(words * 4)
    return Op(name=name, kind=kind, uses=(Use(unit="fp32", length=f.busy), Use(unit="tmem", offset=f.latency,
              length=st.busy)), latency=f.latency + st.latency, issuer=Issuer.WARPGROUP)
