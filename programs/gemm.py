"""GEMM main loop: C += A_k · B_k over the K dimension, one CTA tile.

Each iteration loads an A tile (block_m x block_k) and a B tile (block_n x block_k) with TMA and
issues one tile MMA into the accumulator (registers with Hopper's wgmma, TMEM with Blackwell's
tcgen05). Successive MMAs into one accumulator are chained by the tensor core in issue order, so
the loop-carried edge waits for the previous MMA's tensor-core time, not its completion.

``subtiles`` > 1 splits the tile's rows: MMA ``mma{j}`` multiplies rows j*block_m/subtiles.. of the
A tile by the whole B tile into its own accumulator (the cooperative split of CUTLASS's and
FlashAttention-3's two consumer warpgroups), so the solver may give each sub-tile its own warp
group. Each sub-tile MMA is costed by the arch like any MMA of that shape (``ops.mma``); with
``subtiles`` = 1 the body is the single ``mma`` above.
"""

from twill import Arch, Carrier, LoopBuilder, ops

DESCRIPTION = "GEMM main loop (TMA A/B tiles, one tensor-core MMA per row sub-tile into a carried accumulator)"
PARAMETERS = {"block_m": 128, "block_n": 256, "block_k": 64, "dtype": "fp16", "subtiles": 1}


def build(arch: Arch, block_m: int, block_n: int, block_k: int, dtype: str, subtiles: int = 1):
    if dtype not in ops.DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(ops.DTYPE_BYTES)}")
    if subtiles < 1 or block_m % subtiles:
        raise ValueError(f"subtiles={subtiles} must divide block_m={block_m}")
    esize = ops.DTYPE_BYTES[dtype]
    params = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "dtype": dtype}
    if subtiles > 1:  # the default body keeps the parameters it always had
        params["subtiles"] = subtiles
    b = LoopBuilder("gemm", **params)
    # The epilogue stages the C tile in SMEM for its TMA store, allocated beside the rings for the
    # kernel's life (twill/codegen/frames.py): the rings get what is left.
    b.static_smem = block_m * block_n * esize
    # Raster order shares an A panel along a tile row and a B panel along a column: the L2 feed and
    # landing time of that pattern ("panel"), slower per SM than every SM on the same tile.
    b.add(ops.tma_load(arch, "load_a", block_m * block_k * esize, sharing="panel"))
    b.add(ops.tma_load(arch, "load_b", block_n * block_k * esize, sharing="panel"))
    names = ["mma"] if subtiles == 1 else [f"mma{j}" for j in range(subtiles)]
    for name in names:
        mma = ops.mma(arch, name, block_m // subtiles, block_n, block_k, dtype)
        b.add(mma)
        b.edge("load_a", name, blocking=True, carrier=Carrier.SMEM)
        b.edge("load_b", name, blocking=True, carrier=Carrier.SMEM)
        carrier = Carrier.TMEM if mma.tmem_cols else Carrier.REGISTERS
        b.edge(name, name, latency=mma.busy_cycles, distance=1, carrier=carrier, in_place=True)
    return b.build()


def flops(block_m: int, block_n: int, block_k: int, **_) -> int:
    """Useful tensor-core FLOPs of one iteration: one (block_m x block_k) @ (block_k x block_n) MMA."""
    return 2 * block_m * block_n * block_k
