"""FlashAttention forward: the KV loop of one CTA (one Q tile), optionally split into sub-tiles.

Per iteration j the CTA loads K_j and V_j with TMA, then for each Q sub-tile of ``rows`` rows:
S = Q·K_jᵀ on the tensor cores; the row max; the running max m (carried across iterations);
alpha = exp2(m_old - m_new); P = exp2(S·scale - m) on the MUFU; the row sum l (carried); the
cast of P to 16 bits; the rescale O *= alpha; and O += P·V_j (O carried). On an arch whose MMA
accumulators live in TMEM (Blackwell) S and O stay there: S is read with a blocking tcgen05.ld,
P is written back over S's columns (FA4's aliasing), and the rescale loads, scales and stores O.
"""

from twill import Arch, Carrier, LoopBuilder, ops

DESCRIPTION = "FlashAttention forward KV loop (TMA K/V, QKᵀ, online softmax, PV), 1 or 2 Q sub-tiles"
PARAMETERS = {"block_m": 128, "block_n": 128, "head_dim": 128, "dtype": "fp16", "subtiles": 1}


def build(arch: Arch, block_m: int, block_n: int, head_dim: int, dtype: str, subtiles: int):
    if subtiles < 1 or block_m % subtiles:
        raise ValueError(f"subtiles={subtiles} must divide block_m={block_m}")
    if dtype not in ops.DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(ops.DTYPE_BYTES)}")
    rows, n, d = block_m // subtiles, block_n, head_dim
    esize = ops.DTYPE_BYTES[dtype]
    tmem = arch.feature("accumulator") == "tmem"
    b = LoopBuilder("fa_fwd", block_m=block_m, block_n=block_n, head_dim=head_dim, dtype=dtype, subtiles=subtiles)
    b.add(ops.tma_load(arch, "load_k", n * d * esize))
    b.add(ops.tma_load(arch, "load_v", n * d * esize))
    for j in range(subtiles):
        _subtile(b, arch, f"{j}", rows, n, d, dtype, tmem)
    return b.build()


def _subtile(b: LoopBuilder, arch: Arch, j: str, rows: int, n: int, d: int, dtype: str, tmem: bool) -> None:
    qk, pv = f"qk{j}", f"pv{j}"
    b.add(ops.mma(arch, qk, rows, n, d, dtype, kind="mma_qk"))
    b.edge("load_k", qk, blocking=True, carrier=Carrier.SMEM)
    if tmem:
        b.add(ops.tmem_load(arch, f"lds{j}", rows * n * 4, regs=rows * n, kind="load_s"))
        b.edge(qk, f"lds{j}", blocking=True, carrier=Carrier.TMEM)
        b.edge(f"lds{j}", qk, latency=0, distance=1, carrier=Carrier.ORDER)  # S's columns are read before reuse
        s_value = f"lds{j}"
    else:
        s_value = qk
    # softmax on the rows of S
    b.add(ops.alu(arch, f"rowmax{j}", rows * n, regs=rows, kind="softmax"))
    b.edge(s_value, f"rowmax{j}", blocking=not tmem)
    b.add(ops.fp32(arch, f"max{j}", rows, regs=rows, kind="softmax"))
    b.edge(f"rowmax{j}", f"max{j}")
    b.edge(f"max{j}", f"max{j}", distance=1)  # running max m
    b.add(ops.exp(arch, f"alpha{j}", rows, regs=rows, kind="softmax"))
    b.edge(f"max{j}", f"alpha{j}")
    b.edge(f"max{j}", f"alpha{j}", distance=1)  # exp2(m_old - m_new)
    b.add(ops.softmax_exp(arch, f"exp{j}", rows * n, regs=rows * n, kind="softmax"))
    b.edge(s_value, f"exp{j}")
    b.edge(f"max{j}", f"exp{j}")
    b.add(ops.fp32(arch, f"rowsum{j}", rows * n, regs=rows, kind="softmax"))
    b.edge(f"exp{j}", f"rowsum{j}")
    b.edge(f"alpha{j}", f"rowsum{j}")
    b.edge(f"rowsum{j}", f"rowsum{j}", distance=1)  # running sum l
    b.add(ops.convert(arch, f"cast{j}", rows * n, regs=rows * n // 2, kind="softmax"))
    b.edge(f"exp{j}", f"cast{j}")
    b.add(ops.mma(arch, pv, rows, d, n, dtype, kind="mma_pv"))
    b.edge("load_v", pv, blocking=True, carrier=Carrier.SMEM)
    if tmem:
        b.add(ops.tmem_store(arch, f"stp{j}", rows * n * 2, kind="store_p"))  # P over S's columns
        b.edge(f"cast{j}", f"stp{j}")
        b.edge(f"stp{j}", pv, blocking=True, carrier=Carrier.TMEM)
        b.edge(qk, pv, latency=0, carrier=Carrier.ORDER)  # keeps S's columns (now P) until PV has read them
        b.add(ops.tmem_load(arch, f"ldo{j}", rows * d * 4, regs=rows * d, kind="correction"))
        b.edge(pv, f"ldo{j}", distance=1, blocking=True, carrier=Carrier.TMEM)
        b.add(ops.fp32(arch, f"rescale{j}", rows * d, regs=rows * d, kind="correction"))
        b.edge(f"ldo{j}", f"rescale{j}")
        b.edge(f"alpha{j}", f"rescale{j}")
        b.add(ops.tmem_store(arch, f"sto{j}", rows * d * 4, tmem_cols=d * max(1, rows // 128), kind="correction"))
        b.edge(f"rescale{j}", f"sto{j}")
        b.edge(f"sto{j}", pv, blocking=True, carrier=Carrier.TMEM, in_place=True)
    else:
        b.edge(f"cast{j}", pv)  # P is wgmma's A operand from registers (RS)
        b.add(ops.fp32(arch, f"rescale{j}", rows * d, regs=rows * d, kind="softmax"))
        b.edge(pv, f"rescale{j}", distance=1, blocking=True, in_place=True)
        b.edge(f"alpha{j}", f"rescale{j}")
        b.edge(f"rescale{j}", pv, in_place=True)  # O accumulates in the same registers


def flops(block_m: int, block_n: int, head_dim: int, **_) -> int:
    """Useful tensor-core FLOPs of one iteration: Q·Kᵀ and P·V, 2·m·n·k each (FlashAttention's
    convention), so `twill sweep` ranks tile shapes by work per cycle, not by cycles alone."""
    return 2 * 2 * block_m * block_n * head_dim
