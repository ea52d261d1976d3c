"""Architecture models: functional units, limits and a cost model, every number with its source.

An ``Arch`` is data loaded from a TOML file (``archs/*.toml`` or a plugin). Code never branches on
an architecture's name: it asks for a fact (``arch.limit("tmem_cols")``, ``arch.cost.mma(...)``).
Every number is a ``Fact(value, source)`` so ``twill archs`` can say where it came from; an
optimal solver exploits every modelling error, so an unsourced number is refused at load time.
See docs/arch-format.md for the file format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from twill.errors import ArchError

__all__ = ["Fact", "Unit", "Arch", "CostModel", "Cost"]


@dataclass(frozen=True, slots=True)
class Fact:
    """A number or word about the hardware and where it comes from."""

    value: float | int | str | bool
    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ArchError(f"fact {self.value!r}: it has no source; every arch number needs one")


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    """A functional unit of one SM at tile granularity (capacity = instances usable at once)."""

    name: str
    capacity: Fact
    description: str = ""
    is_async: bool = False  # ops on this unit complete later and signal a barrier (TMA, tensor core)
    aliases: tuple[str, ...] = ()  # pipeline names used by imported graphs (e.g. "TC", "SFU")

    @property
    def cap(self) -> int:
        return int(self.capacity.value)


@dataclass(frozen=True, slots=True)
class Cost:
    """What a tile-level op costs: ``busy`` cycles on its unit, result ``latency`` after issue, and
    ``hold`` cycles of its issuing group where that group issues slower than the unit serves (0: the
    busy span)."""

    busy: int
    latency: int
    hold: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Arch:
    """One GPU model: units, limits, per-SM rates, latencies and synchronisation costs."""

    name: str
    description: str
    units: tuple[Unit, ...]
    limits: Mapping[str, Fact]
    rates: Mapping[str, Fact]
    latencies: Mapping[str, Fact]
    sync: Mapping[str, Fact]
    chip: Mapping[str, Fact]
    features: Mapping[str, Fact] = field(default_factory=dict)
    path: Path | None = None
    origin: str = "builtin"

    def __post_init__(self) -> None:
        for name in ("limits", "rates", "latencies", "sync", "chip", "features"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    # -- lookups ---------------------------------------------------------------------------
    def unit(self, name: str) -> Unit:
        for u in self.units:
            if u.name == name:
                return u
        raise ArchError(f"arch {self.name!r}: no unit {name!r} (units: {', '.join(self.unit_names())})")

    def has_unit(self, name: str) -> bool:
        return any(u.name == name for u in self.units)

    def unit_names(self) -> tuple[str, ...]:
        return tuple(u.name for u in self.units)

    def unit_for_pipeline(self, pipeline: str) -> Unit | None:
        """The unit an imported graph's pipeline name maps to (by alias or by name)."""
        for u in self.units:
            if pipeline in u.aliases or pipeline.lower() == u.name:
                return u
        return None

    def _fact(self, table: Mapping[str, Fact], section: str, key: str) -> Fact:
        try:
            return table[key]
        except KeyError:
            raise ArchError(f"arch {self.name!r}: [{section}] has no {key!r}") from None

    def limit(self, key: str) -> int:
        return int(self._fact(self.limits, "limits", key).value)

    def rate(self, key: str) -> float:
        return float(self._fact(self.rates, "rates", key).value)

    def latency(self, key: str) -> int:
        return int(self._fact(self.latencies, "latencies", key).value)

    def sync_cost(self, key: str) -> float:
        return float(self._fact(self.sync, "sync", key).value)

    def feature(self, key: str) -> str:
        return str(self._fact(self.features, "features", key).value)

    def has_feature(self, key: str) -> bool:
        return key in self.features

    @property
    def cost(self) -> CostModel:
        return CostModel(self)

    def register_budgets(self) -> tuple[int, ...]:
        """Legal per-thread register budgets of a warp group (Hopper setmaxnreg: 24..256 by 8),
        capped by the per-thread maximum the ISA can address."""
        lo, hi, step = self.limit("reg_alloc_min"), self.limit("reg_alloc_max"), self.limit("reg_alloc_step")
        cap = self.limit("regs_per_thread_max")
        return tuple(r for r in range(lo, hi + 1, step) if r <= cap)

    def reg_alloc_warps(self) -> int:
        """Warps that setmaxnreg sets one budget for (``limits.reg_alloc_group_warps``; 1 when the
        arch file does not say, i.e. per-warp budgets). PTX: all warps of a warpgroup execute the
        same setmaxnreg, so on sm_90a/sm_100a groups narrower than a warpgroup share one budget."""
        fact = self.limits.get("reg_alloc_group_warps")
        return 1 if fact is None else int(fact.value)

    def warp_group_sizes(self) -> tuple[int, ...]:
        raw = self._fact(self.limits, "limits", "warp_group_sizes").value
        return tuple(int(x) for x in str(raw).split(","))

    def all_facts(self) -> dict[str, Fact]:
        """Every fact keyed ``section.key`` (for listings and docs)."""
        out: dict[str, Fact] = {}
        for section in ("chip", "limits", "rates", "latencies", "sync", "features"):
            for key, fact in getattr(self, section).items():
                out[f"{section}.{key}"] = fact
        for u in self.units:
            out[f"units.{u.name}.capacity"] = u.capacity
        return out


# The per-SM rate key of each register unit that ``CostModel.reduce`` charges a reduction to.
_UNIT_RATES = {"alu": "alu_ops_per_clk", "fp32": "fp32_ops_per_clk"}

# How the grid's CTAs share a TMA-loaded tile -> (rate key, latency key) measured for that pattern
# (bench/gpu/tma.cu, tma_loaded.cu): "all" every SM loads the same tile at about the same time
# (FlashAttention's K/V, one head's blocks across the grid); "panel" a GEMM's raster order (an A
# panel shared along a tile row, a B panel along a column).
TMA_SHARING = {"all": ("tma_bytes_per_clk", "tma"), "panel": ("tma_bytes_per_clk_gemm", "tma_gemm")}


def _cycles(x: float) -> int:
    return max(1, math.ceil(x - 1e-9))


@dataclass(frozen=True, slots=True)
class CostModel:
    """Cycle costs of tile-level work on one SM, derived from the arch's per-SM rates.

    Work is spread over the whole SM (all four sub-partitions), so busy cycles are total work
    divided by the per-SM rate; latencies add the unit's pipeline latency on top.
    """

    arch: Arch

    def mma(self, m: int, n: int, k: int, dtype: str = "fp16") -> Cost:
        """Tensor-core GEMM of (m x k) @ (k x n): 2mnk FLOPs at the dtype's FLOP/clk/SM.

        Tiles shorter than the MMA's full-rate M run at the rate of a full-M tile (B200's
        tcgen05 with M = 64 reaches half its datapath), so m is rounded up to that M.
        """
        flops = 2 * max(m, int(self.arch.rate("mma_full_rate_min_m"))) * n * k
        busy = _cycles(flops / self.arch.rate(f"tensor_flops_per_clk_{dtype}"))
        return Cost(busy, busy + self.arch.latency("mma"))

    def mma_issue(self, instructions: int) -> int:
        """Cycles a group spends issuing ``instructions`` MMA instructions: ``latencies.mma_issue`` each
        where the arch has it (measured for wgmma beside the group's own in-flight group, issue 21), else
        one each, the issue slot alone."""
        per = self.arch.latencies.get("mma_issue")
        return instructions * (int(per.value) if per is not None else 1)

    def issue_rate(self, key: str) -> float:
        """Results per clock of the register work that ``rates.key`` counts, issued by one warp group.

        ``key`` (e.g. ``mufu_ops_per_clk``) is the pipe's per-SM rate, measured with every
        sub-partition full of warps. Where the arch also has ``key + "_warpgroup"``, the rate one
        warpgroup (one warp per sub-partition) reaches while the tensor cores run another group's
        wgmmas, the lower of the two is charged: every register op of the built-in programs is issued
        by such a group, beside tensor-core work (bench/gpu/fa_consumer.cu, issue 21).
        """
        rate = self.arch.rate(key)
        group = self.arch.rates.get(f"{key}_warpgroup")
        return min(rate, float(group.value)) if group is not None else rate

    def _register_work(self, n: int, key: str, latency: str, group_rate: float | None = None) -> Cost:
        """``n`` results of register work: the unit is busy at the pipe's per-SM rate (``key``), the issuing
        group for as long as it takes at its own rate (``group_rate``, else ``issue_rate(key)``), and the
        result is ready that long plus the pipe's latency.

        The two differ where the arch measured one warpgroup's rate: that warpgroup is limited by its own
        issue and dependences, not by the pipe, and another warpgroup's work shares the pipe meanwhile
        (fa_consumer.cu: two warpgroups on the exp2 step at once take 1140 cycles each, where one beside
        the tensor cores takes 918 and the pipe alone serves a tile in 512)."""
        busy = _cycles(n / self.arch.rate(key))
        hold = _cycles(n / (group_rate if group_rate is not None else self.issue_rate(key)))
        return Cost(busy, hold + self.arch.latency(latency), hold if hold > busy else 0)

    def exp(self, n: int) -> Cost:
        """``n`` exponentials (ex2) on the MUFU."""
        return self._register_work(n, "mufu_ops_per_clk", "mufu")

    def fp32(self, n: int) -> Cost:
        """``n`` FP32 FMA/FADD/FMUL results on the FP32 pipes."""
        return self._register_work(n, "fp32_ops_per_clk", "fp32")

    def alu(self, n: int) -> Cost:
        """``n`` min/max/compare results on the integer/ALU pipe (row max)."""
        return self._register_work(n, "alu_ops_per_clk", "fp32")

    def convert(self, n: int) -> Cost:
        """``n`` FP32->FP16/BF16 pack instructions (two elements each)."""
        return self._register_work(n, "convert_ops_per_clk", "fp32")

    def reduce(self, n: int, unit: str) -> Cost:
        """A row reduction of ``n`` elements on ``unit`` (``alu``: max, ``fp32``: sum): per thread a
        dependent chain per row, then shuffle stages across the threads that share a row.

        The issuing group runs at ``rates.{unit}_reduce_ops_per_clk_warpgroup`` where the arch measured
        one (the chains are latency-bound in one warp per sub-partition), else at the unit's elementwise
        rate; the unit is busy at its elementwise rate either way.
        """
        key = _UNIT_RATES[unit]
        rate = self.arch.rate(key)
        chain = self.arch.rates.get(f"{unit}_reduce_ops_per_clk_warpgroup")
        return self._register_work(n, key, "fp32", min(rate, float(chain.value)) if chain is not None else rate)

    def tma(self, nbytes: int, sharing: str = "all") -> Cost:
        """A TMA tile copy global->shared of ``nbytes``: busy at the per-SM L2->SMEM rate of the way
        the grid's CTAs share the tile, then that pattern's latency (``TMA_SHARING``).

        The L2 feed per SM depends on how many SMs read the same lines at once, measured on the
        H200 from 35 (distinct tiles) to 127 B/clk (every SM on the same tile): charging a GEMM's
        panels at the same-tile rate hid the feed bound that held its kernels at 1.2x II, and a
        ring planned on that feed's median landing stalled on its tail (issue 21). An arch without
        the pattern's own measurement falls back to ``tma_bytes_per_clk`` and ``latencies.tma``.
        """
        if sharing not in TMA_SHARING:
            raise ValueError(f"TMA sharing {sharing!r} is not one of {sorted(TMA_SHARING)}")
        rate_key, lat_key = TMA_SHARING[sharing]
        rate = self.arch.rate(rate_key if rate_key in self.arch.rates else "tma_bytes_per_clk")
        busy = _cycles(nbytes / rate)
        return Cost(busy, busy + self.arch.latency(lat_key if lat_key in self.arch.latencies else "tma"))

    def global_load(self, nbytes: int) -> Cost:
        """A pointer load (LDG or cp.async) of ``nbytes``: busy on the load/store units at the per-SM
        rate ``lsu_bytes_per_clk``, ready an L2 hit (``global_load``) after the last byte."""
        busy = _cycles(nbytes / self.arch.rate("lsu_bytes_per_clk"))
        return Cost(busy, busy + self.arch.latency("global_load"))

    def tmem_load(self, nbytes: int) -> Cost:
        busy = _cycles(nbytes / self.arch.rate("tmem_load_bytes_per_clk"))
        return Cost(busy, busy + self.arch.latency("tmem_load"))

    def tmem_store(self, nbytes: int) -> Cost:
        busy = _cycles(nbytes / self.arch.rate("tmem_store_bytes_per_clk"))
        return Cost(busy, busy + self.arch.latency("tmem_store"))

    def handoff(self, nbytes: int) -> int:
        """Register -> SMEM -> register hand-off between warp groups, plus the mbarrier handshake."""
        a = self.arch
        return _cycles(
            a.sync_cost("handoff_fixed") + a.sync_cost("handoff_per_kib") * nbytes / 1024 + a.sync_cost("mbarrier")
        )

    def handoff_copy(self, nbytes: int) -> int:
        """Cycles a warp group spends copying ``nbytes`` of a hand-off between its registers and
        SMEM (the producer's store, or the reader's load), at the shared-memory rate measured
        beside the tensor cores (a hand-off happens while other groups' MMAs run); 0 on an arch
        that records no such rate, where the hand-off is charged as edge latency alone (§2.4)."""
        if not nbytes or "smem_bytes_per_clk_beside_wgmma" not in self.arch.rates:
            return 0
        return _cycles(nbytes / self.arch.rate("smem_bytes_per_clk_beside_wgmma"))

    def signal(self) -> int:
        """An mbarrier arrive -> wait between groups when no register data moves."""
        return _cycles(self.arch.sync_cost("mbarrier"))

    def named_barrier(self) -> int:
        return _cycles(self.arch.sync_cost("named_barrier"))

    def wait(self) -> int:
        """Issue cost of a blocking wait that finds its barrier already complete."""
        return _cycles(self.arch.sync_cost("wait_issue"))
