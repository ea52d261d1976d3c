"""FlashAttention forward: the KV loop of one CTA (one Q tile), optionally split into sub-tiles.

Per iteration j the CTA loads K_j and V_j with TMA, then for each Q sub-tile of ``rows`` rows:
S = Q·K_jᵀ on the tensor cores; the row max; the running max m (carried across iterations);
alpha = exp2(m_old - m_new); P = exp2(S·scale - m) on the MUFU; the row sum l (carried); the
cast of P to 16 bits; the rescale O *= alpha; and O += P·V_j (O carried). On an arch whose MMA
accumulators live in TMEM (Blackwell) S and O stay there: S is read with a blocking tcgen05.ld,
P is written back over S's columns (FA4's aliasing), and the rescale loads, scales and stores O.

FA4's granularity (``s_frags`` >= 1, TMEM archs; the defaults keep the tile-level graph above):
the exp2 and the FP32->BF16 convert run per fragment of ``n / s_frags`` columns, each fragment
stored to TMEM on its own; P·V is split after ``split_p`` fragments (its first K-steps start while
the last fragments are computed); O stays resident in TMEM (an in-place ring P·V_a -> P·V_b ->
next P·V_a) and is corrected in ``o_chunks`` column chunks; a fraction ``emu`` of the exp2 runs as
a polynomial on the FMA/ALU pipes; the row max uses 3-input max; TMEM loads block their warps
until the data lands; Q and the O staging buffer hold SMEM outside the loop (Q alone at the
tile level: twill's Hopper frame stages O in Q's tile). Sources: FA4
(flash_attn/cute/flash_fwd_sm100.py, softmax.py, utils.py at 0251105a), read side by side with
this program in ../shared/research/fa4.md.
"""

from twill import Arch, Carrier, LoopBuilder, ops
from twill.ir import Op

DESCRIPTION = "FlashAttention forward KV loop (TMA K/V, QKᵀ, online softmax, PV), 1 or 2 Q sub-tiles"
PARAMETERS = {"block_m": 128, "block_n": 128, "head_dim": 128, "dtype": "fp16", "subtiles": 1,
              "s_frags": 0, "split_p": 0, "o_chunks": 1, "emu": 0.0}
# FA4's forward at hd 128, 1-CTA (flash_fwd_sm100.py): 2 x 128-row Q tiles, exp2 + convert per 32
# columns (4 fragments), P·V after 3 of 4 P stores (split_P_arrive = 96), O corrected in 8 chunks
# of 16 columns (corr_tile_size), ex2_emu_freq 16 -> 16 of 128 exps emulated
FA4 = {"subtiles": 2, "block_m": 256, "s_frags": 4, "split_p": 3, "o_chunks": 8, "emu": 0.125}
# ex2_emulation_2 (FA4 utils.py 771-786): per emulated exp2, FP32 lane-ops and ALU ops
EMU_FP32_OPS, EMU_ALU_OPS = 6, 3


def build(arch: Arch, block_m: int, block_n: int, head_dim: int, dtype: str, subtiles: int,
          s_frags: int = 0, split_p: int = 0, o_chunks: int = 1, emu: float = 0.0):
    if subtiles < 1 or block_m % subtiles:
        raise ValueError(f"subtiles={subtiles} must divide block_m={block_m}")
    if dtype not in ops.DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(ops.DTYPE_BYTES)}")
    rows, n, d = block_m // subtiles, block_n, head_dim
    esize = ops.DTYPE_BYTES[dtype]
    tmem = arch.feature("accumulator") == "tmem"
    granular = s_frags > 0
    if granular:
        _check_granularity(tmem, n, d, s_frags, split_p, o_chunks, emu)
    elif (split_p, o_chunks, emu) != (0, 1, 0.0):
        raise ValueError("split_p, o_chunks and emu describe FA4's granularity: set s_frags >= 1 as well")
    extra = {"s_frags": s_frags, "split_p": split_p, "o_chunks": o_chunks, "emu": emu} if granular else {}
    b = LoopBuilder("fa_fwd", block_m=block_m, block_n=block_n, head_dim=head_dim, dtype=dtype, subtiles=subtiles,
                    **extra)
    b.add(ops.tma_load(arch, "load_k", n * d * esize))
    b.add(ops.tma_load(arch, "load_v", n * d * esize))
    for j in range(subtiles):
        if granular:
            _granular_subtile(b, arch, f"{j}", rows, n, d, dtype, s_frags, split_p, o_chunks, emu)
        else:
            _subtile(b, arch, f"{j}", rows, n, d, dtype, tmem)
    # Q (all sub-tiles) is SMEM for the whole kernel: every Q·Kᵀ reads it from there (wgmma and
    # tcgen05 take A from SMEM). FA4 keeps the O staging buffer of the epilogue apart (sQ and sO,
    # 2 x 32 KiB each at hd 128, flash_fwd_sm100.py 395-405); twill's Hopper frame stages O in Q's
    # tile, which no Q·Kᵀ reads once the last P·V of its sub-tile is due (docs/codegen.md, "The frame").
    b.static_smem = (2 if granular else 1) * block_m * d * esize
    return b.build()


def _check_granularity(tmem: bool, n: int, d: int, s_frags: int, split_p: int, o_chunks: int, emu: float) -> None:
    if not tmem:
        raise ValueError("s_frags models FA4's TMEM streaming; this arch keeps accumulators in registers")
    if n % s_frags or (n // s_frags) % 16:
        raise ValueError(f"s_frags={s_frags} must split block_n={n} into fragments of a multiple of 16 columns")
    if not 0 <= split_p <= s_frags:
        raise ValueError(f"split_p={split_p} must lie in [0, s_frags={s_frags}] (0: no split)")
    if o_chunks < 1 or d % o_chunks:
        raise ValueError(f"o_chunks={o_chunks} must divide head_dim={d}")
    if not 0 <= emu < 1:
        raise ValueError(f"emu={emu} is a fraction of the exps in [0, 1)")


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
    b.add(ops.row_reduce(arch, f"rowmax{j}", rows * n, regs=rows, unit="alu", kind="softmax"))
    b.edge(s_value, f"rowmax{j}", blocking=not tmem)
    _running_max(b, arch, j, rows)
    b.add(ops.softmax_exp(arch, f"exp{j}", rows * n, regs=rows * n, kind="softmax"))
    b.edge(s_value, f"exp{j}")
    b.edge(f"max{j}", f"exp{j}")
    b.add(ops.row_reduce(arch, f"rowsum{j}", rows * n, regs=rows, unit="fp32", kind="softmax"))
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


def _granular_subtile(b: LoopBuilder, arch: Arch, j: str, rows: int, n: int, d: int, dtype: str,
                      frags: int, split_p: int, chunks: int, emu: float) -> None:
    """One Q tile at FA4's granularity (module docstring); costs from the arch, counts from FA4."""
    qk = f"qk{j}"
    b.add(ops.mma(arch, qk, rows, n, d, dtype, kind="mma_qk"))
    b.edge("load_k", qk, blocking=True, carrier=Carrier.SMEM)
    wait = arch.has_feature("tmem_load_wait") and arch.feature("tmem_load_wait") == "blocking"
    b.add(ops.tmem_load(arch, f"lds{j}", rows * n * 4, regs=rows * n, kind="load_s", wait=wait))
    b.edge(qk, f"lds{j}", blocking=True, carrier=Carrier.TMEM)
    b.edge(f"lds{j}", qk, latency=0, distance=1, carrier=Carrier.ORDER)  # S's columns are read before reuse
    # FA4 reduces with 3-input fmax (utils.py 390-413): one instruction folds two new elements
    b.add(ops.alu(arch, f"rowmax{j}", rows * n // 2, regs=rows, kind="softmax"))
    b.edge(f"lds{j}", f"rowmax{j}")
    _running_max(b, arch, j, rows)
    pv = _split_pv(b, arch, j, rows, n, d, dtype, frags, split_p)
    for f in range(frags):
        exc, stp = f"exc{j}_{f}", f"stp{j}_{f}"
        op = ops.softmax_exp_convert(arch, exc, rows * n // frags, emu, EMU_FP32_OPS, EMU_ALU_OPS, kind="softmax")
        b.add(op)
        b.edge(f"lds{j}", exc)  # exp2 overwrites S in place, fragment by fragment
        b.edge(f"max{j}", exc)
        if f:  # one instruction stream: fragment f follows fragment f - 1
            b.edge(f"exc{j}_{f - 1}", exc, latency=op.hold_cycles, carrier=Carrier.ORDER)
        b.add(ops.tmem_store(arch, stp, rows * n // frags * 2, kind="store_p"))  # P over S's columns
        b.edge(exc, stp)
        b.edge(stp, pv[0] if f < split_p or len(pv) == 1 else pv[1], blocking=True, carrier=Carrier.TMEM)
    # the row sum adds the FP32 exps kept in S's registers, after the P stores (FA4 fwd 2546)
    b.add(ops.fp32(arch, f"rowsum{j}", rows * n, regs=rows, kind="softmax"))
    b.edge(f"lds{j}", f"rowsum{j}")
    b.edge(f"exc{j}_{frags - 1}", f"rowsum{j}")
    b.edge(f"alpha{j}", f"rowsum{j}")
    b.edge(f"rowsum{j}", f"rowsum{j}", distance=1)  # running sum l
    _chunked_correction(b, arch, j, rows, d, chunks, pv, wait)


def _mma_order(arch: Arch, producer: Op) -> dict[str, int]:
    """Edge latencies between two MMAs on one accumulator: the issuing thread's own next MMA runs
    after the producer's K-steps (the tensor pipe keeps one issuer's order); an MMA issued from
    another warp group must wait for the completion (tcgen05.commit -> mbarrier)."""
    if arch.has_feature("mma_pipe_order") and arch.feature("mma_pipe_order") == "per_issuer":
        return {"latency": producer.busy_cycles, "cross_latency": producer.latency}
    return {"latency": producer.latency}


def _split_pv(b: LoopBuilder, arch: Arch, j: str, rows: int, n: int, d: int, dtype: str, frags: int,
              split_p: int) -> list[str]:
    """O += P·V as one MMA, or two (K-steps over the first ``split_p`` fragments of P, then the rest);
    O (``d`` columns) stays resident: each MMA takes the accumulator over in place, the last one
    hands it to the next iteration's first."""
    parts = [n] if split_p in (0, frags) else [n * split_p // frags, n * (frags - split_p) // frags]
    names = [f"pv{j}"] if len(parts) == 1 else [f"pv{j}a", f"pv{j}b"]
    mmas = [ops.mma(arch, name, rows, d, k, dtype, kind="mma_pv") for name, k in zip(names, parts, strict=True)]
    for op in mmas:
        b.add(op)
        b.edge("load_v", op.name, blocking=True, carrier=Carrier.SMEM)
    for prev, nxt in zip(mmas, mmas[1:], strict=False):
        b.edge(prev.name, nxt.name, in_place=True, carrier=Carrier.TMEM, **_mma_order(arch, prev))
    b.edge(names[-1], names[0], distance=1, in_place=True, carrier=Carrier.TMEM, **_mma_order(arch, mmas[-1]))
    b.edge(f"qk{j}", names[-1], latency=0, carrier=Carrier.ORDER)  # S's columns (now P) stay until P·V has read
    # the next Q·Kᵀ overwrites P's columns: after P·V's reads (pipe order) or its completion
    b.edge(names[-1], f"qk{j}", distance=1, carrier=Carrier.ORDER, **_mma_order(arch, mmas[-1]))
    return names


def _chunked_correction(b: LoopBuilder, arch: Arch, j: str, rows: int, d: int, chunks: int, pv: list[str],
                        wait: bool) -> None:
    """O *= alpha in ``chunks`` column chunks: load (blocking), then FMUL and store back in place."""
    words = rows * d // chunks
    for c in range(chunks):
        ldo, rst = f"ldo{j}_{c}", f"rst{j}_{c}"
        load = ops.tmem_load(arch, ldo, words * 4, regs=words, kind="correction", wait=wait)
        b.add(load)
        b.edge(pv[-1], ldo, distance=1, blocking=True, carrier=Carrier.TMEM)  # O of the previous iteration
        b.add(ops.scale_store(arch, rst, words, kind="correction"))
        b.edge(ldo, rst)
        # the chunk's registers are scaled in place and read again by the store at the end of rst
        b.edge(ldo, rst, latency=load.latency, carrier=Carrier.ORDER)
        b.edge(f"alpha{j}", rst)
        b.edge(rst, pv[0], blocking=True, carrier=Carrier.TMEM)

# FA4's five roles (flash_fwd_sm100.py 300-306) as a ``twill solve --groups`` spec: the load warp,
# the MMA warp, softmax warpgroup 0, the correction warpgroup (both tiles), softmax warpgroup 1
FA4_ROLES = ("load_*;qk*,pv*;lds0,rowmax0,max0,alpha0,exc0_*,stp0_*,rowsum0;ldo*,rst*;"
             "lds1,rowmax1,max1,alpha1,exc1_*,stp1_*,rowsum1")


def fa4_roles(groups: dict[str, int], subtiles: int = 2) -> dict[str, bool]:
    """Which of FA4's roles a schedule's warp groups (op -> group) have, checked one by one so a
    partial rediscovery reads as such (../shared/research/fa4.md §9):
    loads: load_k and load_v alone in their group; softmax: each tile's softmax ops in one group,
    a different one per tile; off_path: no tile's correction in its own softmax group;
    correction: every O load/rescale/store of every tile in one group without softmax work;
    mma: every Q·Kᵀ and P·V in one group that issues nothing else."""
    def members(g: int) -> set[str]:
        return {n for n, x in groups.items() if x == g}

    def softmax(j: int) -> set[str]:
        return {n for n in groups if n.rstrip("0123456789_") in _SOFTMAX and _tile(n) == j}

    corr = {n for n in groups if n.startswith(("ldo", "rst"))}
    mma = {n for n in groups if n.startswith(("qk", "pv"))}
    sm_groups = [{groups[n] for n in softmax(j)} for j in range(subtiles)]
    one_each = all(len(s) == 1 for s in sm_groups) and len({min(s) for s in sm_groups}) == subtiles
    all_softmax = set().union(*(softmax(j) for j in range(subtiles)))
    corr_groups = {groups[n] for n in corr}
    mma_groups = {groups[n] for n in mma}
    return {
        "loads": members(groups["load_k"]) == {"load_k", "load_v"},
        "softmax": one_each,
        "off_path": one_each and all(groups[n] != min(sm_groups[_tile(n)]) for n in corr),
        "correction": len(corr_groups) == 1 and not members(min(corr_groups)) & all_softmax
        and members(min(corr_groups)) == corr,
        "mma": len(mma_groups) == 1 and members(min(mma_groups)) == mma,
    }


_SOFTMAX = ("lds", "rowmax", "max", "alpha", "exc", "stp", "rowsum")


def _tile(name: str) -> int:
    """The Q tile an op belongs to: the first digit after its role prefix (exc1_3 -> 1)."""
    return int(next(c for c in name if c.isdigit()))


def flops(block_m: int, block_n: int, head_dim: int, **_) -> int:
    """Useful tensor-core FLOPs of one iteration: Q·Kᵀ and P·V, 2·m·n·k each (FlashAttention's
    convention), so `twill sweep` ranks tile shapes by work per cycle, not by cycles alone."""
    return 2 * 2 * block_m * block_n * head_dim


def _running_max(b: LoopBuilder, arch: Arch, j: str, rows: int) -> None:
    """The running row max m (from rowmax{j}) and the rescale factor alpha = exp2(m_old - m_new)."""
    b.add(ops.fp32(arch, f"max{j}", rows, regs=rows, kind="softmax"))
    b.edge(f"rowmax{j}", f"max{j}")
    b.edge(f"max{j}", f"max{j}", distance=1)  # running max m
    b.add(ops.exp(arch, f"alpha{j}", rows, regs=rows, kind="softmax"))
    b.edge(f"max{j}", f"alpha{j}")
    b.edge(f"max{j}", f"alpha{j}", distance=1)  # exp2(m_old - m_new)
