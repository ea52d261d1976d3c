"""Register arithmetic of Triton 3.6's ``AllocateWarpGroups`` pass, replayed before emission.

Why: Gluon has no ``setmaxnreg`` call; the compiler turns each worker partition's requested
registers into ``setmaxnreg`` and gives the default partition what is left of the launch limit
(``maxnreg``). When the arithmetic does not work out the pass emits no ``setmaxnreg`` at all and
says nothing, so the emitter replays it to know, before compiling, what each partition is granted
(source: triton-lang/triton ``lib/Conversion/TritonGPUToLLVM/AllocateWarpGroups.cpp``, the copy
read for Triton 3.6; see docs/codegen.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Grant", "grant"]

REGS_PER_SM = 64 * 1024
THREADS_PER_WARP = 32
PAD_REQUEST = 16  # what the pass requests for the empty partitions it pads warpgroups with
SETMAXNREG_CAP = 256


@dataclass(frozen=True, slots=True)
class Grant:
    """What the compiler grants: launch limit, the default partition's leftover, each worker's."""

    maxnreg: int
    default: int | None  # None: the pass emits no setmaxnreg (budget or leftover too small)
    workers: tuple[int, ...]
    total_warps: int


def _ceil8(x: int) -> int:
    return -(-x // 8) * 8


def grant(default_warps: int, worker_warps: tuple[int, ...], worker_regs: tuple[int, ...],
          maxnreg: int | None = None) -> Grant:
    """Replay the pass for one ``warp_specialize``: warps padded to whole warpgroups, partitions
    placed largest first from warp ``default_warps`` on, each warpgroup granted the largest request
    of its members rounded up to 8, the default partition the rest of ``maxnreg`` (the launch
    option, else 64K / warps / 32 rounded down to 8), capped at 256 by ``setmaxnreg``."""
    extra = sum(worker_warps)
    wgs = -(-extra // 4)
    sizes = list(worker_warps)
    reqs = list(worker_regs)
    pad = wgs * 4 - extra
    while pad > 0:
        p = 1 << (pad.bit_length() - 1)
        sizes.append(p)
        reqs.append(PAD_REQUEST)
        pad -= p
    total = default_warps + wgs * 4
    if maxnreg is None:
        maxnreg = REGS_PER_SM // total // THREADS_PER_WARP // 8 * 8
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])  # stable: ties keep partition order
    start, starts = default_warps, {}
    for i in order:
        starts[i] = start
        start += sizes[i]
    groups: list[list[int]] = []
    for i in sorted(starts, key=lambda i: starts[i]):
        if starts[i] % 4 == 0:
            groups.append([])
        groups[-1].append(i)
    per_part = {}
    budget = maxnreg * default_warps * THREADS_PER_WARP
    for members in groups:
        top = max(_ceil8(reqs[i]) for i in members)
        warps = sum(sizes[i] for i in members)
        budget += (maxnreg - top) * warps * THREADS_PER_WARP
        for i in members:
            per_part[i] = top
    workers = tuple(min(per_part[i], SETMAXNREG_CAP) for i in range(len(worker_warps)))
    if budget <= 0:
        return Grant(maxnreg, None, workers, total)
    leftover = budget // (default_warps * THREADS_PER_WARP) // 8 * 8
    if leftover < 24:
        return Grant(maxnreg, None, workers, total)
    return Grant(maxnreg, min(leftover, SETMAXNREG_CAP), workers, total)
