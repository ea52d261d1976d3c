"""TMA loads are charged for how the grid shares their tiles (issue 21): the gemm program's panels at the
L2 feed of a GEMM's raster order and the landing tail a ring must cover, where the arch measured them."""

from __future__ import annotations

import math

import pytest

from tests.conftest import problem
from twill.arch.registry import get_arch
from twill.solver import SolveOptions, solve


def test_panel_loads_pay_the_gemm_feed_and_its_tail_on_h200():
    arch = get_arch("h200")
    feed, tail = arch.rate("tma_bytes_per_clk_gemm"), arch.latency("tma_gemm")
    load_b = problem("gemm", "h200", block_n=128).op("load_b")
    busy = math.ceil(16384 / feed)
    assert (load_b.uses[0].length, load_b.latency) == (busy, busy + tail) == (336, 336 + 1878)
    # FlashAttention's K/V (every SM on the same tiles) keep the same-tile rate and the median latency
    k = problem("fa_fwd", "h200").op("load_k")
    same = math.ceil(128 * 128 * 2 / arch.rate("tma_bytes_per_clk"))
    assert (k.uses[0].length, k.latency) == (same, same + arch.latency("tma"))


def test_an_arch_without_the_panel_facts_charges_panels_as_the_same_tile():
    arch = get_arch("b200")
    assert "tma_bytes_per_clk_gemm" not in arch.rates and "tma_gemm" not in arch.latencies
    assert arch.cost.tma(16384, "panel") == arch.cost.tma(16384, "all")
    with pytest.raises(ValueError, match="not one of"):
        arch.cost.tma(16384, "diagonal")


@pytest.mark.parametrize("arch, narrow_ii, wide_ii", [("h200", 672, 1211), ("h100", 774, 1428)])
def test_gemm_is_bound_by_the_feed_or_by_shared_memory(arch, narrow_ii, wide_ii):
    """128x128: the feed binds (both tiles at 48.9 B/clk = 672 cycles on the H200, 42.4 = 774 on the H100,
    each chip's tma_loaded.json) and the p99 tail asks for rings of 5. 128x256: the tensor cores need 1024
    (the H100's feed 1160), but rings deep enough for the tail do not fit beside the C tile's staging (64 KiB,
    static_smem): II 1211 on the H200, 1428 on the H100, with rings of 4 and 3, proven."""
    opts = SolveOptions(workers=1, time_limit=60)
    narrow = solve(problem("gemm", arch, block_n=128), opts)
    assert (narrow.status, narrow.ii) == ("optimal", narrow_ii) and "unit 'tma'" in narrow.proof
    assert {b.value: b.copies for b in narrow.buffers if b.memory == "smem"} == {"load_a": 5, "load_b": 5}
    wide = problem("gemm", arch)
    assert wide.body.static_smem == 128 * 256 * 2
    s = solve(wide, opts)
    assert (s.status, s.ii) == ("optimal", wide_ii)
    assert {b.value: b.copies for b in s.buffers if b.memory == "smem"} == {"load_a": 4, "load_b": 3}
