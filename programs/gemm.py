"""GEMM main loop: C += A_k · B_k over the K dimension, one CTA tile.

Each iteration loads an A tile (block_m x block_k) and a B tile (block_n x block_k) with TMA and
issues one tile MMA into the accumulator (registers with Hopper's wgmma, TMEM with Blackwell's
tcgen05). Successive MMAs into one accumulator are chained by the tensor core in issue order, so
the loop-carried edge waits for the previous MMA's tensor-core time, not its completion.
"""

from twill import Arch, Carrier, LoopBuilder, ops

DESCRIPTION = "GEMM main loop (TMA A/B tiles, one tensor-core MMA into a carried accumulator)"
PARAMETERS = {"block_m": 128, "block_n": 256, "block_k": 64, "dtype": "fp16"}


def build(arch: Arch, block_m: int, block_n: int, block_k: int, dtype: str):
    if dtype not in ops.DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(ops.DTYPE_BYTES)}")
    esize = ops.DTYPE_BYTES[dtype]
    b = LoopBuilder("gemm", block_m=block_m, block_n=block_n, block_k=block_k, dtype=dtype)
    b.add(ops.tma_load(arch, "load_a", block_m * block_k * esize))
    b.add(ops.tma_load(arch, "load_b", block_n * block_k * esize))
    mma = ops.mma(arch, "mma", block_m, block_n, block_k, dtype)
    b.add(mma)
    b.edge("load_a", "mma", blocking=True, carrier=Carrier.SMEM)
    b.edge("load_b", "mma", blocking=True, carrier=Carrier.SMEM)
    carrier = Carrier.TMEM if mma.tmem_cols else Carrier.REGISTERS
    b.edge("mma", "mma", latency=mma.busy_cycles, distance=1, carrier=carrier, in_place=True)
    return b.build()


def flops(block_m: int, block_n: int, block_k: int, **_) -> int:
    """Useful tensor-core FLOPs of one iteration: one (block_m x block_k) @ (block_k x block_n) MMA."""
    return 2 * block_m * block_n * block_k
