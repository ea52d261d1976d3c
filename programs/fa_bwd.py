"""FlashAttention backward, single pass (FA3's algorithm): the loop over Q blocks of one K/V block.

Per iteration i the CTA loads Q_i, dO_i and the row statistics (LSE, D) with TMA, then for each
Q sub-tile: S = Q·Kᵀ; P = exp2(S·scale - LSE); dV += Pᵀ·dO; dP = dO·Vᵀ; dS = P ⊙ (dP - D);
dK += dSᵀ·Q; dQ = dS·K, which is reduced into global memory with a TMA reduce-add. Five GEMMs
and one exponential; dK and dV are carried across iterations. On an arch whose accumulators
live in TMEM, S and dP are read from TMEM and P, dS are written back for the next GEMMs.
"""

from twill import Arch, Carrier, LoopBuilder, ops

DESCRIPTION = "FlashAttention backward, single pass (5 GEMMs, 1 exp, dQ atomic reduce), Q sub-tiles"
# block_n = 64 by default: FA3 runs 64 x 128 with dK and dV split over two warpgroups, which a tile-level
# op cannot express; with block_n = 128 one group would hold 2 x 128 x 128 FP32 accumulators (256
# registers per thread in a warpgroup) and no schedule fits Hopper's register file.
PARAMETERS = {"block_m": 64, "block_n": 64, "head_dim": 128, "dtype": "fp16", "subtiles": 1}


def build(arch: Arch, block_m: int, block_n: int, head_dim: int, dtype: str, subtiles: int):
    if subtiles < 1 or block_m % subtiles:
        raise ValueError(f"subtiles={subtiles} must divide block_m={block_m}")
    if dtype not in ops.DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(ops.DTYPE_BYTES)}")
    rows, n, d, esize = block_m // subtiles, block_n, head_dim, ops.DTYPE_BYTES[dtype]
    tmem = arch.feature("accumulator") == "tmem"
    b = LoopBuilder("fa_bwd", block_m=block_m, block_n=block_n, head_dim=head_dim, dtype=dtype, subtiles=subtiles)
    b.add(ops.tma_load(arch, "load_q", block_m * d * esize))
    b.add(ops.tma_load(arch, "load_do", block_m * d * esize))
    b.add(ops.tma_load(arch, "load_stats", block_m * 4 * 2))
    for s in range(subtiles):
        _subtile(b, arch, str(s), rows, n, d, dtype, tmem)
    # dV and dK accumulate over sub-tiles in order, then into the next iteration
    for acc in ("dv", "dk"):
        chain = [f"{acc}{s}" for s in range(subtiles)]
        for a, c in zip(chain, chain[1:], strict=False):
            _accumulate(b, a, c, 0)
        _accumulate(b, chain[-1], chain[0], 1)
    return b.build()


def _accumulate(b: LoopBuilder, src: str, dst: str, distance: int) -> None:
    op = next(o for o in b._ops if o.name == src)
    carrier = Carrier.TMEM if op.tmem_cols else Carrier.REGISTERS
    b.edge(src, dst, latency=op.busy_cycles, distance=distance, carrier=carrier, in_place=True)


def _read(b: LoopBuilder, arch: Arch, mma_name: str, rows: int, n: int, tmem: bool) -> str:
    """The register copy of an MMA result: the MMA itself (Hopper), or a blocking TMEM load."""
    if not tmem:
        return mma_name
    name = f"ld_{mma_name}"
    b.add(ops.tmem_load(arch, name, rows * n * 4, regs=rows * n, kind="tmem_load"))
    b.edge(mma_name, name, blocking=True, carrier=Carrier.TMEM)
    b.edge(name, mma_name, latency=0, distance=1, carrier=Carrier.ORDER)  # columns read before reuse
    return name


def _operand(b: LoopBuilder, arch: Arch, value: str, rows: int, n: int, tmem: bool) -> str:
    """A 16-bit GEMM operand made from FP32 registers: cast, and on TMEM archs store it back."""
    cast = f"cast_{value}"
    b.add(ops.convert(arch, cast, rows * n, regs=rows * n // 2, kind="convert"))
    b.edge(value, cast)
    if not tmem:
        return cast
    st = f"st_{value}"
    b.add(ops.tmem_store(arch, st, rows * n * 2, tmem_cols=n // 2, kind="tmem_store"))
    b.edge(cast, st)
    return st


def _subtile(b: LoopBuilder, arch: Arch, s: str, rows: int, n: int, d: int, dtype: str, tmem: bool) -> None:
    blocking_reg = not tmem
    carrier = Carrier.TMEM if tmem else Carrier.REGISTERS
    b.add(ops.mma(arch, f"qk{s}", rows, n, d, dtype, kind="mma"))
    b.edge("load_q", f"qk{s}", blocking=True, carrier=Carrier.SMEM)
    s_val = _read(b, arch, f"qk{s}", rows, n, tmem)
    b.add(ops.softmax_exp(arch, f"p{s}", rows * n, regs=rows * n, kind="exp"))
    b.edge(s_val, f"p{s}", blocking=blocking_reg)
    b.edge("load_stats", f"p{s}", blocking=True, carrier=Carrier.SMEM)
    p_op = _operand(b, arch, f"p{s}", rows, n, tmem)
    b.add(ops.mma(arch, f"dv{s}", n, d, rows, dtype, kind="mma"))
    b.edge(p_op, f"dv{s}", blocking=tmem, carrier=carrier)
    b.edge("load_do", f"dv{s}", blocking=True, carrier=Carrier.SMEM)
    b.add(ops.mma(arch, f"dp{s}", rows, n, d, dtype, kind="mma"))
    b.edge("load_do", f"dp{s}", blocking=True, carrier=Carrier.SMEM)
    dp_val = _read(b, arch, f"dp{s}", rows, n, tmem)
    b.add(ops.fp32(arch, f"ds{s}", 2 * rows * n, regs=rows * n, kind="fp32"))
    b.edge(f"p{s}", f"ds{s}")
    b.edge(dp_val, f"ds{s}", blocking=blocking_reg)
    b.edge("load_stats", f"ds{s}", blocking=True, carrier=Carrier.SMEM)
    ds_op = _operand(b, arch, f"ds{s}", rows, n, tmem)
    b.add(ops.mma(arch, f"dk{s}", n, d, rows, dtype, kind="mma"))
    b.edge(ds_op, f"dk{s}", blocking=tmem, carrier=carrier)
    b.edge("load_q", f"dk{s}", blocking=True, carrier=Carrier.SMEM)
    b.add(ops.mma(arch, f"dq{s}", rows, d, n, dtype, kind="mma"))
    b.edge(ds_op, f"dq{s}", blocking=tmem, carrier=carrier)
    dq_val = _read(b, arch, f"dq{s}", rows, d, tmem)
    b.add(ops.tma_store(arch, f"store_dq{s}", rows * d * 4, kind="reduce"))
    b.edge(dq_val, f"store_dq{s}", blocking=blocking_reg)


def flops(block_m: int, block_n: int, head_dim: int, **_) -> int:
    """Useful tensor-core FLOPs of one iteration: five GEMMs (S, dP, dV, dK, dQ), 2·m·n·k each."""
    return 5 * 2 * block_m * block_n * head_dim
