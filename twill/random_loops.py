"""Random loop bodies for benchmarks and differential tests, each provably solvable.

``random_body(seed, n_ops, profile=...)`` is a pure function of its arguments: the same call gives
the same ``LoopBody`` on every machine and Python version (``random.Random`` seeded with a string).

Profiles
--------
``"fa"``
    FlashAttention-like bodies on the units every built-in arch has (``tma``, ``tc``, ``mufu``,
    ``fp32``, ``alu``), with cycle counts of the size ``twill show fa_fwd --arch h100`` prints:
    TMA tile loads (variable-latency, streaming, asynchronous, with SMEM ring buffers), tensor-core
    MMAs (asynchronous, register accumulators, accumulator recurrences through an in-place
    correction op), and synchronous softmax-like work (row reductions, running statistics carried
    across iterations, exps on the MUFU and the FP32 pipes at once) with register results.
``"tiny"``
    2..5 ops with 1..6-cycle costs on the units of ``tiny_arch`` (``tma``, ``tc``, ``alu``), small
    distances and small register / SMEM / TMEM footprints: small enough for exhaustive search,
    against an arch whose limits are small enough to bind.

The generalization profiles (bench/suite/) each stress one thing the joint search must handle;
their costs are fixed numbers taken from archs/b200.toml (TMA 90 B/clk + 460, tcgen05 MMA busy +
136, tcgen05.ld/st 512/682 B/clk + 138/48), so a body never depends on the arch it is solved on:

``"tmem"`` (b200 only)
    FA4-like blocks whose tiles live in tensor memory: single-thread MMAs into TMEM, tcgen05.ld
    slices of S, P stored over S, O corrected by a load-scale-store round trip. The ``tmem`` port,
    the correction recurrence and the 512 columns bind.
``"regs"``
    Chained GEMMs with tile-sized epilogues on one path through the body, with residual reads far
    back along it: values live for several IIs, so the register file binds.
``"recurrence"``
    One spine through every block closed one or two iterations later: RecMII binds.
``"units"``
    A wide graph whose ops go to the least-loaded unit, some with two-unit reservation tables
    (side by side, after, or after a gap): the unit bounds nearly tie.
``"loads"``
    Loads from slow memory (latency tails of 800-4000 cycles), some with in-loop addresses, and
    buffers freed two or three iterations on: SMEM rings, the TMA engine or the release
    recurrence bind.
``"handoff"``
    Producer ops (MMAs, one-warp index/scale work) and warpgroup consumer ops alternate along
    chains of big register tiles with feedback: in-order issue wants several groups and every
    split hands tiles across them.

``PROFILE_ARCHS`` names the built-in archs each profile's witness is proven on.

Solvability
-----------
Register, SMEM and TMEM footprints are scaled down (halved, all together) until the sequential
schedule of ``sequential_witness`` fits (the generalization profiles count registers and TMEM
turn by turn along the witness's order, a tighter bound: ``_peak_demand``): every op issued after the previous one finished, loads
in a group of their own and everything else in one group of the widest size. With II at least
the iteration's length plus the longest read, a value whose readers are at most δ iterations
later needs at most δ + 1 copies, so Σ footprint x (1 + δ) bounds every peak (design.md §2.8-2.9).
``sequential_witness`` builds that schedule, so a test can check the claim with the validator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from twill.arch.model import Arch
from twill.arch.toml import arch_from_dict
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.solver.sequential import sequential_witness, witness_ii, witness_order

__all__ = ["PROFILES", "PROFILE_ARCHS", "random_body", "tiny_arch", "sequential_witness", "witness_ii"]

PROFILES = ("fa", "tiny", "tmem", "regs", "recurrence", "units", "loads", "handoff")
# The built-in archs each profile is meant for (and its witness tested on); "tiny" is for tiny_arch.
# h100 has no tensor memory, so "tmem" bodies run on b200 only.
_COMMON_ARCHS = ("h100", "h200", "b200")
PROFILE_ARCHS: dict[str, tuple[str, ...]] = {
    "fa": _COMMON_ARCHS, "tiny": (), "tmem": ("b200",), "regs": _COMMON_ARCHS, "recurrence": _COMMON_ARCHS,
    "units": _COMMON_ARCHS, "loads": _COMMON_ARCHS, "handoff": _COMMON_ARCHS,
}

# What the witness of the "fa" profile may use on the built-in archs (h100, b200: 64 Ki registers,
# budgets 24..255 by 8, 24 reserved, 227 KiB SMEM): an 8-warp group at 248 registers per thread and
# a 1-warp load group at 24 fill 32 x (8 x 248 + 24) = 64256 <= 65536 registers and leave
# 32 x 8 x (248 - 24) = 57344 words for live results. The budgets below keep a margin.
_FA_REG_WORDS = 49152
_FA_SMEM_BYTES = 196608
# The same for the "tiny" profile against every tiny_arch: a 4-warp group at 4 registers per thread
# leaves 32 x 4 x (4 - 1) = 384 words; SMEM is at least 128 B and TMEM at least 8 columns.
_TINY_REG_WORDS = 384
_TINY_SMEM_BYTES = 128
_TINY_TMEM_COLS = 8


def random_body(seed: int, n_ops: int, *, profile: str = "fa") -> LoopBody:
    """A random loop body of exactly ``n_ops`` ops, deterministic per (seed, n_ops, profile).

    Parameters
    ----------
    seed
        Any integer; bodies for different seeds are independent.
    n_ops
        Number of ops (at least 1).
    profile
        ``"fa"`` (realistic FlashAttention-like costs, for the built-in archs), ``"tiny"``
        (1..6-cycle costs for ``tiny_arch``, small enough for exhaustive search), or one of the
        generalization profiles (module docstring; ``PROFILE_ARCHS`` says where each runs).

    Examples
    --------
    >>> body = random_body(7, 12)
    >>> len(body.ops), body == random_body(7, 12)
    (12, True)
    >>> sorted({u for op in body.ops for u in op.units()}) <= ["alu", "fp32", "mufu", "tc", "tma"]
    True
    >>> tiny = random_body(3, 4, profile="tiny")
    >>> max(op.latency for op in tiny.ops) <= 6
    True
    >>> sorted({u for op in random_body(2, 20, profile="tmem").ops for u in op.units()})
    ['alu', 'fp32', 'mufu', 'tc', 'tma', 'tmem']
    """
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r}: expected one of {', '.join(PROFILES)}")
    if isinstance(n_ops, bool) or not isinstance(n_ops, int) or n_ops < 1:
        raise ValueError(f"n_ops {n_ops!r}: expected a positive integer")
    rng = random.Random(f"twill.random_loops:{profile}:{seed}:{n_ops}")
    name = f"random_{profile}_{seed}_{n_ops}"
    if profile == "fa":
        ops, edges = _FaBuilder(rng).build(n_ops)
        ops = _fit(ops, edges, "regs", _FA_REG_WORDS, floor=32)
        ops = _fit(ops, edges, "smem_bytes", _FA_SMEM_BYTES, floor=1024, recost=_tma_recost)
    elif profile == "tiny":
        ops, edges = _tiny(rng, n_ops)
        ops = _fit(ops, edges, "regs", _TINY_REG_WORDS, floor=1)
        ops = _fit(ops, edges, "smem_bytes", _TINY_SMEM_BYTES, floor=1)
        ops = _fit(ops, edges, "tmem_cols", _TINY_TMEM_COLS, floor=1)
    else:
        ops, edges = _BUILDERS[profile](rng).build(n_ops)
        ops = _fit(ops, edges, "regs", _FA_REG_WORDS, floor=32, demand=_peak_demand, keep=(7, 8))
        ops = _fit(ops, edges, "smem_bytes", _FA_SMEM_BYTES, floor=1024, recost=_load_recost)
        ops = _fit(ops, edges, "tmem_cols", _B200_TMEM_COLS, floor=8, demand=_peak_demand)
    return LoopBody(name, tuple(ops), tuple(edges), {"seed": seed, "n_ops": n_ops, "profile": profile})


# -- the "fa" profile ------------------------------------------------------------------------------
def _tma_cost(nbytes: int) -> tuple[int, int]:
    """(busy, latency) of a TMA load at H100's 36 B/clk per SM and 440-cycle latency (archs/h100.toml)."""
    busy = math.ceil(nbytes / 36)
    return busy, busy + 440


def _tma_recost(op: Op) -> Op:
    """A load whose buffer was shrunk streams fewer bytes: its unit time and latency follow."""
    busy, latency = _tma_cost(op.smem_bytes)
    return _replace(op, uses=(Use(unit="tma", length=busy),), latency=latency)


class _FaBuilder:
    """Blocks of FlashAttention's KV loop: loads, S = Q·Kᵀ, a softmax-like chain, O += P·V with
    its correction, glued together by a few cross-block and loop-carried edges."""

    # (kind, unit segments as (unit, busy choices), register footprint: "row" or "tile")
    SYNC = (
        ("rowmax", (("alu", (128, 256)),), "row"),
        ("stat", (("fp32", (1, 2)),), "row"),
        ("alpha", (("mufu", (4, 8)),), "row"),
        ("exp", (("mufu", (256, 512, 1024)), ("fp32", (32, 64, 128))), "tile"),
        ("rowsum", (("fp32", (64, 128)),), "row"),
        ("cast", (("alu", (256, 512)),), "half"),
        ("rescale", (("fp32", (64, 128)),), "tile"),
    )

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ops: list[Op] = []
        self.edges: list[Edge] = []
        self.loads: list[str] = []
        self.values: list[str] = []  # ops with register results, for cross-block reads

    def build(self, n: int) -> tuple[list[Op], list[Edge]]:
        block = 0
        while len(self.ops) < n:
            left = n - len(self.ops)
            size = left if left <= 3 else min(left, self.rng.randint(4, 11))
            self._block(f"b{block}_", size)
            block += 1
        return self.ops, self.edges

    def _op(self, op: Op) -> str:
        self.ops.append(op)
        return op.name

    def _edge(self, src: str, dst: str, **fields) -> None:
        latency = fields.pop("latency", None)
        if latency is None:
            latency = next(o.latency for o in self.ops if o.name == src)
        self.edges.append(Edge(src=src, dst=dst, latency=latency, **fields))

    def _load(self, name: str) -> str:
        nbytes = self.rng.choice((8192, 16384, 32768))
        busy, latency = _tma_cost(nbytes)
        self.loads.append(name)
        return self._op(Op(name=name, kind="load", uses=(Use(unit="tma", length=busy),), latency=latency,
                           is_async=True, issuer=Issuer.THREAD, smem_bytes=nbytes, variable_latency=True,
                           streaming=True))

    def _mma(self, name: str, kind: str, tile: int) -> str:
        busy = self.rng.choice((256, 512, 1024))
        self.values.append(name)
        return self._op(Op(name=name, kind=kind, uses=(Use(unit="tc", length=busy),), latency=busy + 16,
                           is_async=True, issue_cycles=self.rng.choice((8, 16, 24)), issuer=Issuer.WARPGROUP,
                           regs=tile))

    def _sync(self, name: str, rows: int, tile: int, template: tuple | None = None) -> str:
        kind, segments, footprint = template or self.rng.choice(self.SYNC)
        uses = tuple(Use(unit=unit, length=self.rng.choice(choices)) for unit, choices in segments)
        # MUFU results come 14 cycles after the unit is done, FP32/ALU results 4 (archs/h100.toml)
        latency = max(u.length + (14 if u.unit == "mufu" else 4) for u in uses)
        regs = {"row": rows, "tile": tile, "half": tile // 2}[footprint]
        self.values.append(name)
        return self._op(Op(name=name, kind=kind, uses=uses, latency=latency, issuer=Issuer.WARPGROUP, regs=regs))

    def _block(self, prefix: str, size: int) -> None:
        rng = self.rng
        rows, cols = rng.choice((64, 128)), rng.choice((64, 128))
        tile = rows * cols
        if size == 1:
            if self.values:
                self._attach(self._sync(f"{prefix}s0", rows, tile))
            else:
                self._load(f"{prefix}load0")
            return
        if size == 2 and self.values:
            a = self._sync(f"{prefix}s0", rows, tile)
            self._attach(a)
            b = self._sync(f"{prefix}s1", rows, tile)
            self._edge(a, b, carrier=Carrier.REGISTERS)
            return
        n_loads = 2 if size >= 7 and rng.random() < 0.6 else 1
        loads = [self._load(f"{prefix}load{i}") for i in range(n_loads)]
        qk = self._mma(f"{prefix}qk", "mma_qk", tile)
        self._edge(loads[0], qk, blocking=True, carrier=Carrier.SMEM)
        rest = size - n_loads - 1
        with_pv = rest >= 4 and rng.random() < 0.75
        chain_len = rest - 2 if with_pv else rest
        chain: list[str] = []
        for i in range(chain_len):
            s = self._sync(f"{prefix}s{i}", rows, tile)
            if not chain:
                self._edge(qk, s, blocking=True, carrier=Carrier.REGISTERS)  # wgmma wait on S
            else:
                self._edge(chain[-1], s, carrier=Carrier.REGISTERS)
                if rng.random() < 0.3:
                    self._edge(rng.choice([qk, *chain[:-1]]), s, carrier=Carrier.REGISTERS)
            if self.ops[-1].kind == "stat" or rng.random() < 0.15:
                self._edge(s, s, distance=1, carrier=Carrier.REGISTERS)  # running max / sum
            if chain and rng.random() < 0.15:
                # a value read one or two iterations later (alpha = exp2(m_old - m_new))
                self._edge(s, rng.choice(chain), distance=rng.choice((1, 1, 2)), carrier=Carrier.REGISTERS)
            chain.append(s)
        if chain and rng.random() < 0.3:
            self._attach(chain[0])
        if with_pv:
            pv = self._mma(f"{prefix}pv", "mma_pv", rows * 128)
            self._edge(chain[-1], pv, carrier=Carrier.REGISTERS)  # P is the A operand, from registers
            self._edge(loads[-1], pv, blocking=True, carrier=Carrier.SMEM)
            fix = self._sync(f"{prefix}fix", rows, rows * 128, self.SYNC[6])
            self._edge(pv, fix, distance=1, blocking=True, in_place=True, carrier=Carrier.REGISTERS)
            self._edge(fix, pv, in_place=True, carrier=Carrier.REGISTERS)  # O accumulates in place
            self._edge(rng.choice(chain), fix, carrier=Carrier.REGISTERS)
        if rng.random() < 0.25:
            # the load's buffer is released by the block's last reader one or two iterations back
            last = self.ops[-1].name
            self._edge(last, loads[0], latency=0, distance=rng.choice((1, 2)), carrier=Carrier.ORDER)

    def _attach(self, name: str) -> None:
        """Let ``name`` also read a value of an earlier block (same or previous iteration)."""
        earlier = [v for v in self.values if v != name and not v.startswith(name.split("_")[0] + "_")]
        if earlier:
            distance = self.rng.choice((0, 0, 1))
            self._edge(self.rng.choice(earlier), name, distance=distance, carrier=Carrier.REGISTERS)


# -- the "tiny" profile ----------------------------------------------------------------------------
def _tiny(rng: random.Random, n: int) -> tuple[list[Op], list[Edge]]:
    units = sorted(rng.sample(["tma", "tc", "alu"], rng.randint(1, 3)))
    ops: list[Op] = []
    for i in range(n):
        kinds = ["sync", "sync", "async", "free"] + (["load"] if "tma" in units else [])
        kind = rng.choice(kinds)
        name = f"o{i}"
        if kind == "load":
            length = rng.randint(1, 4)
            ops.append(Op(name=name, kind="load", uses=(Use(unit="tma", length=length),),
                          latency=rng.randint(length, 6), is_async=True, issuer=Issuer.THREAD,
                          smem_bytes=rng.choice((0, 16, 32, 64)), variable_latency=True, streaming=rng.random() < 0.7))
            continue
        uses: tuple[Use, ...] = ()
        if kind != "free" or rng.random() < 0.3:
            uses = _tiny_uses(rng, units, rng.choice((1, 1, 1, 2)))
        busy = max((u.end for u in uses), default=0)
        latency = rng.randint(busy, 6) if uses else rng.choice((0, 0, 1, 2))
        ops.append(Op(
            name=name, kind=kind, uses=uses, latency=latency, is_async=kind == "async",
            issue_cycles=rng.choice((1, 1, 2)), issuer=rng.choice((Issuer.THREAD, Issuer.WARP, Issuer.WARPGROUP)),
            regs=rng.choice((0, 0, 16, 32, 64, 96)), tmem_cols=rng.choice((0, 0, 0, 2, 4)) if kind == "async" else 0,
            smem_bytes=rng.choice((0, 0, 0, 16)) if kind == "async" else 0,
        ))
    edges: list[Edge] = []
    for j in range(n):
        for i in range(j):
            if rng.random() < 0.45:
                edges.append(_tiny_edge(rng, ops[i], ops[j], 0))
    for i in range(n):
        if rng.random() < 0.25:
            edges.append(_tiny_edge(rng, ops[i], ops[i], rng.choice((1, 1, 2))))
        for j in range(i):
            if rng.random() < 0.2:
                edges.append(_tiny_edge(rng, ops[i], ops[j], rng.choice((1, 1, 2))))
    return ops, edges


def _tiny_uses(rng: random.Random, units: list[str], count: int) -> tuple[Use, ...]:
    """A reservation table of ``count`` segments ending by cycle 6. Two segments on one unit are
    placed one after the other: overlapping they could exceed the unit's capacity on their own,
    and no II would ever fit the op."""
    uses: list[Use] = []
    for _ in range(count):
        unit = rng.choice(units)
        amount = 2 if unit == "alu" and rng.random() < 0.25 else 1  # tiny_arch's alu has 2 instances
        offset, length = rng.choice((0, 0, 1, 2)), rng.randint(1, 4)
        same = [u for u in uses if u.unit == unit]
        if same:
            offset = same[-1].end
            length = min(length, 6 - offset)
            if length < 1:
                continue
        uses.append(Use(unit=unit, offset=offset, length=length, amount=amount))
    return tuple(uses)


def _tiny_edge(rng: random.Random, src: Op, dst: Op, distance: int) -> Edge:
    # values read by a load travel as orderings (a buffer released), never as registers to copy
    carrier = Carrier.ORDER if dst.variable_latency else rng.choice(
        (Carrier.REGISTERS, Carrier.REGISTERS, Carrier.REGISTERS, Carrier.SMEM, Carrier.ORDER, Carrier.TMEM))
    latency = src.latency if rng.random() < 0.8 else rng.randint(0, 6)
    return Edge(src=src.name, dst=dst.name, latency=latency, distance=distance,
                blocking=rng.random() < (0.5 if src.is_async else 0.1), carrier=carrier,
                in_place=carrier is not Carrier.ORDER and rng.random() < 0.1)


# -- the generalization profiles: shared machinery ---------------------------------------------------
# Costs are fixed numbers, so a body is a pure function of (seed, n_ops, profile) whatever the arch:
# MMA results come 136 cycles after the tensor core is done and tcgen05.ld/st move 512/682 B per
# cycle with 138/48 cycles of latency on top (archs/b200.toml); MUFU results come 14 cycles after
# the unit is done, FP32/ALU results 4; TMA streams 90 B/clk with a 460-cycle tail.
_MMA_TAIL = 136
_TMA_RATE, _TMA_TAIL = 90, 460
_TMEM_LD_RATE, _TMEM_LD_TAIL = 512, 138
_TMEM_ST_RATE, _TMEM_ST_TAIL = 682, 48
_SYNC_TAIL = {"mufu": 14, "fp32": 4, "alu": 4}
_SYNC_UNITS = ("mufu", "fp32", "alu")
# The witness of these profiles holds at most 512 TMEM columns (b200's whole tensor memory).
_B200_TMEM_COLS = 512


def _load_recost(op: Op) -> Op:
    """A load whose buffer was shrunk streams fewer bytes at 90 B/clk; its fixed latency tail (the
    part that does not depend on the size: 460 cycles from L2, more from a slow memory) stays."""
    tail = op.latency - op.busy_cycles
    busy = math.ceil(op.smem_bytes / _TMA_RATE)
    return _replace(op, uses=(Use(unit="tma", length=busy),), latency=busy + tail)


class _Builder:
    """A body grown block by block until it has n ops; ``_block(prefix, size)`` adds exactly
    ``size`` ops. Edges into a variable-latency op only order it (a buffer freed, an address
    computed): the witness keeps loads in a group of their own, so no register value crosses
    into that group and no hand-off staging buffer takes shared memory there."""

    BLOCK = (4, 11)  # block sizes drawn from this range; a smaller rest becomes one last block

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ops: list[Op] = []
        self.edges: list[Edge] = []
        self.values: list[str] = []  # ops with register results, for cross-block reads

    def build(self, n: int) -> tuple[list[Op], list[Edge]]:
        block = 0
        while len(self.ops) < n:
            left = n - len(self.ops)
            lo, hi = self.BLOCK
            size = left if left < lo else min(left, self.rng.randint(lo, hi))
            self._block(f"b{block}_", size)
            block += 1
        self._finish()
        return self.ops, self.edges

    def _block(self, prefix: str, size: int) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """Edges that need the whole body (a recurrence closed over every block)."""

    def _add(self, op: Op) -> str:
        self.ops.append(op)
        if op.regs:
            self.values.append(op.name)
        return op.name

    def _latency(self, name: str) -> int:
        return next(o.latency for o in self.ops if o.name == name)

    def _edge(self, src: str, dst: str, **fields) -> None:
        latency = fields.pop("latency", None)
        self.edges.append(Edge(src=src, dst=dst, latency=self._latency(src) if latency is None else latency,
                               **fields))

    # op makers, with the fixed costs above
    def _load(self, name: str, nbytes: int, tail: int = _TMA_TAIL, streaming: bool = True) -> str:
        busy = math.ceil(nbytes / _TMA_RATE)
        return self._add(Op(name=name, kind="load", uses=(Use(unit="tma", length=busy),), latency=busy + tail,
                            is_async=True, issuer=Issuer.THREAD, smem_bytes=nbytes, variable_latency=True,
                            streaming=streaming))

    def _mma(self, name: str, busy: int, *, regs: int = 0, tmem_cols: int = 0, kind: str = "mma",
             issuer: Issuer = Issuer.WARPGROUP) -> str:
        return self._add(Op(name=name, kind=kind, uses=(Use(unit="tc", length=busy),), latency=busy + _MMA_TAIL,
                            is_async=True, issue_cycles=self.rng.choice((4, 8, 16)), issuer=issuer, regs=regs,
                            tmem_cols=tmem_cols))

    def _sync(self, name: str, unit: str, busy: int, regs: int, *, kind: str = "", issuer: Issuer = Issuer.WARPGROUP,
              extra: tuple[Use, ...] = ()) -> str:
        uses = (Use(unit=unit, length=busy), *extra)
        latency = max(u.end + _SYNC_TAIL.get(u.unit, 4) for u in uses)
        return self._add(Op(name=name, kind=kind or unit, uses=uses, latency=latency, issuer=issuer, regs=regs))

    def _tmem_load(self, name: str, nbytes: int, kind: str = "tmem_load") -> str:
        busy = math.ceil(nbytes / _TMEM_LD_RATE)
        return self._add(Op(name=name, kind=kind, uses=(Use(unit="tmem", length=busy),),
                            latency=busy + _TMEM_LD_TAIL, issuer=Issuer.WARPGROUP, regs=nbytes // 4))

    def _tmem_store(self, name: str, nbytes: int, tmem_cols: int = 0, kind: str = "tmem_store") -> str:
        busy = math.ceil(nbytes / _TMEM_ST_RATE)
        return self._add(Op(name=name, kind=kind, uses=(Use(unit="tmem", length=busy),),
                            latency=busy + _TMEM_ST_TAIL, issuer=Issuer.WARPGROUP, tmem_cols=tmem_cols))

    def _random_sync(self, name: str, regs: int) -> str:
        unit = self.rng.choice(_SYNC_UNITS)
        return self._sync(name, unit, self.rng.choice((32, 64, 128, 256)), regs)

    def _attach(self, name: str, prefix: str, distances: tuple[int, ...] = (0, 0, 1)) -> None:
        """Let ``name`` also read a register value of an earlier block."""
        earlier = [v for v in self.values if v != name and not v.startswith(prefix)]
        if earlier:
            self._edge(self.rng.choice(earlier), name, distance=self.rng.choice(distances),
                       carrier=Carrier.REGISTERS)

    def _fill(self, prefix: str, size: int) -> None:
        """``size`` synchronous ops in a chain that starts from an earlier value (or a load)."""
        prev = None
        if not self.values:
            prev = self._load(f"{prefix}load", self.rng.choice((8192, 16384)))
            size -= 1
        for i in range(size):
            s = self._random_sync(f"{prefix}f{i}", self.rng.choice((64, 128)) * 64)
            if prev is None:
                self._attach(s, prefix, (0, 1))
            else:
                self._edge(prev, s, blocking=self._is_async(prev), carrier=self._carrier(prev))
            prev = s

    def _is_async(self, name: str) -> bool:
        return next(o.is_async for o in self.ops if o.name == name)

    def _carrier(self, name: str) -> Carrier:
        op = next(o for o in self.ops if o.name == name)
        return Carrier.SMEM if op.smem_bytes else Carrier.TMEM if op.tmem_cols and not op.regs else Carrier.REGISTERS


# -- "tmem": Blackwell-style bodies whose tiles live in tensor memory ---------------------------------
class _TmemBuilder(_Builder):
    """FA4-like blocks: S = Q·Kᵀ into TMEM, S read back in slices by tcgen05.ld, softmax, P stored
    over S's columns, O += P·V into a TMEM accumulator corrected by a load-scale-store round trip.
    MMAs are single-thread issued with no register result; the TMEM port carries every tile in
    and out, so the ``tmem`` unit and the 512 columns are what these bodies fight over."""

    BLOCK = (4, 12)

    def _block(self, prefix: str, size: int) -> None:
        if size < 4:
            self._fill(prefix, size)
            return
        rng = self.rng
        cols, d = rng.choice((64, 128, 128)), rng.choice((32, 32, 64))
        load = self._load(f"{prefix}load", 128 * d * 2)
        s = self._mma(f"{prefix}qk", cols * d // 32, tmem_cols=cols, kind="mma_qk", issuer=Issuer.THREAD)
        self._edge(load, s, blocking=True, carrier=Carrier.SMEM)
        with_acc = size >= 8 and rng.random() < 0.8
        chain = self._softmax(prefix, s, cols, size - 2 - (5 if with_acc else 0))
        self._edge(chain[0], s, latency=0, distance=1, carrier=Carrier.ORDER)  # S's columns read before reuse
        if with_acc:
            self._accumulate(prefix, load, s, chain, cols, d)

    def _softmax(self, prefix: str, s: str, cols: int, count: int) -> list[str]:
        """``count`` ops reading S: tcgen05.ld slices of it and synchronous work on what they load."""
        rng, chain = self.rng, []
        for i in range(count):
            if not chain or rng.random() < 0.5:
                name = self._tmem_load(f"{prefix}ld{i}", 128 * cols * 4 // rng.choice((1, 1, 1, 2)), kind="load_s")
                self._edge(s, name, blocking=True, carrier=Carrier.TMEM)
                if chain:
                    self._edge(chain[-1], name, latency=0, carrier=Carrier.ORDER)  # tcgen05.ld in issue order
            else:
                name = self._sync(f"{prefix}s{i}", rng.choice(_SYNC_UNITS), rng.choice((32, 64, 128, 256)),
                                  128 * rng.choice((1, cols // 2, cols)), kind="softmax")
                self._edge(chain[-1], name, carrier=Carrier.REGISTERS)
                if rng.random() < 0.2:
                    self._edge(name, name, distance=1, carrier=Carrier.REGISTERS)  # a running statistic
                if rng.random() < 0.25:
                    self._attach(name, prefix)
            chain.append(name)
        return chain

    def _accumulate(self, prefix: str, load: str, s: str, chain: list[str], cols: int, d: int) -> None:
        """P stored over S, O += P·V, and O's correction: load, scale, store back in place."""
        stp = self._tmem_store(f"{prefix}stp", 128 * cols * 2, kind="store_p")
        self._edge(chain[-1], stp, carrier=Carrier.REGISTERS)
        pv = self._mma(f"{prefix}pv", cols * d // 32, tmem_cols=d, kind="mma_pv", issuer=Issuer.THREAD)
        self._edge(load, pv, blocking=True, carrier=Carrier.SMEM)
        self._edge(stp, pv, blocking=True, carrier=Carrier.TMEM)
        self._edge(s, pv, latency=0, carrier=Carrier.ORDER)  # S's columns, now P, kept until PV read them
        ldo = self._tmem_load(f"{prefix}ldo", 128 * d * 4, kind="correction")
        self._edge(pv, ldo, distance=1, blocking=True, carrier=Carrier.TMEM)
        fix = self._sync(f"{prefix}fix", "fp32", 128 * d // 128, 128 * d, kind="correction")
        self._edge(ldo, fix, carrier=Carrier.REGISTERS)
        self._edge(self.rng.choice(chain), fix, carrier=Carrier.REGISTERS)
        sto = self._tmem_store(f"{prefix}sto", 128 * d * 4, tmem_cols=d, kind="correction")
        self._edge(fix, sto, carrier=Carrier.REGISTERS)
        self._edge(sto, pv, blocking=True, in_place=True, carrier=Carrier.TMEM)


# -- "regs": long-lived tiles in registers ----------------------------------------------------------
class _RegsBuilder(_Builder):
    """Chained GEMMs with tile-sized epilogues: every block's MMA takes the previous block's last
    tile as its operand, so one dependence path runs through the whole body, while its work is
    spread over the tensor core and three pipes (II well below the path). Values are read again
    far down the path (a residual, a saved activation), so each lives for several IIs: the
    register file, and how the groups split it, binds before the units do."""

    BLOCK = (4, 10)

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.path: list[str] = []  # every op of the through-path, in order
        self.reach = 3  # how many path ops back a residual read goes

    def build(self, n: int) -> tuple[list[Op], list[Edge]]:
        self.reach = max(3, n // 3)
        return super().build(n)

    def _block(self, prefix: str, size: int) -> None:
        rng = self.rng
        tile = 128 * rng.choice((128, 256))
        if size < 2 and not self.path:
            self._fill(prefix, size)
            return
        if size >= 3 or not self.path:
            load = self._load(f"{prefix}load", rng.choice((4096, 8192)))
            mma = self._mma(f"{prefix}mma", rng.choice((64, 128)), regs=tile)
            self._edge(load, mma, blocking=True, carrier=Carrier.SMEM)
            self._read_path(mma)
            self.path.append(mma)
            size -= 2
        for i in range(size):
            s = self._sync(f"{prefix}s{i}", _SYNC_UNITS[(len(self.path) + i) % 3], rng.choice((64, 128, 256)), tile,
                           kind="tile")
            self._read_path(s)
            self.path.append(s)

    def _read_path(self, op: str) -> None:
        """``op`` reads the path's last value and, often, one from far back (which stays live)."""
        if not self.path:
            return
        prev = self.path[-1]
        self._edge(prev, op, blocking=self._is_async(prev), carrier=Carrier.REGISTERS)
        if len(self.path) >= self.reach and self.rng.random() < 0.85:
            self._edge(self.path[-self.reach], op, carrier=Carrier.REGISTERS)  # a residual
        if len(self.path) > 3 and self.rng.random() < 0.3:
            self._edge(self.rng.choice(self.path[:-2]), op, carrier=Carrier.REGISTERS)
        elif self.rng.random() < 0.1:
            self._edge(self.rng.choice(self.path), op, distance=1, carrier=Carrier.REGISTERS)


# -- "recurrence": one long loop-carried chain ------------------------------------------------------
class _RecurrenceBuilder(_Builder):
    """Most ops sit on one spine that runs through every block and closes on itself one or two
    iterations later (a scan, an online statistic threaded through all the work); loads and a few
    side ops hang off it. The spine's latency exceeds every unit's work: RecMII binds."""

    BLOCK = (3, 9)

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.spine: list[str] = []
        self.side: str | None = None  # a side op the next spine op reads one iteration later

    def _block(self, prefix: str, size: int) -> None:
        rng = self.rng
        if size >= 3 and rng.random() < 0.5:
            load = self._load(f"{prefix}load", rng.choice((4096, 8192)))
            size -= 1
        else:
            load = None
        for i in range(size):
            if self.spine and rng.random() < 0.15:  # a side op: reads the spine, read one iteration later
                side = self._random_sync(f"{prefix}x{i}", 128 * 64)
                self._edge(self.spine[-1], side, carrier=Carrier.REGISTERS)
                self.side = side
                continue
            self._spine_op(f"{prefix}s{i}", load)
            load = None

    def _spine_op(self, name: str, load: str | None) -> None:
        rng = self.rng
        if load is not None and rng.random() < 0.5:
            op = self._mma(name, rng.choice((128, 256, 512)), regs=128 * 64)
        else:
            op = self._sync(name, rng.choice(_SYNC_UNITS), rng.choice((16, 32, 64, 128)), 128 * rng.choice((1, 64)))
        if load is not None:
            self._edge(load, op, blocking=True, carrier=Carrier.SMEM)
        if self.spine:
            prev = self.spine[-1]
            self._edge(prev, op, blocking=self._is_async(prev), carrier=Carrier.REGISTERS)
        if self.side is not None:
            self._edge(self.side, op, distance=1, carrier=Carrier.REGISTERS)
            self.side = None
        self.spine.append(op)

    def _finish(self) -> None:
        if self.spine:
            last, first = self.spine[-1], self.spine[0]
            self._edge(last, first, distance=self.rng.choice((1, 1, 2)), blocking=self._is_async(last),
                       carrier=Carrier.REGISTERS)


# -- "units": work spread over every unit ------------------------------------------------------------
class _UnitsBuilder(_Builder):
    """A wide graph of short chains whose ops go to the least-loaded unit so far, some with
    reservation tables on two units (side by side or one after the other, with a gap): every
    unit carries about the same work, so several unit bounds tie and few recurrences matter."""

    BLOCK = (4, 10)
    WORK = {"tma": 0, "tc": 0, "mufu": 0, "fp32": 0, "alu": 0}

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.work = dict(self.WORK)

    def _block(self, prefix: str, size: int) -> None:
        rng, block = self.rng, []
        for i in range(size):
            least = min(self.work.values())
            unit = rng.choice(sorted(u for u, w in self.work.items() if w <= least + 64))
            name = self._unit_op(f"{prefix}{unit}{i}", unit, block)
            block.append(name)

    def _unit_op(self, name: str, unit: str, block: list[str]) -> str:
        rng = self.rng
        if unit == "tma":
            op = self._load(name, rng.choice((4096, 8192, 16384)))
        elif unit == "tc":
            op = self._mma(name, rng.choice((128, 256, 512)), regs=128 * 64)
        else:
            op = self._sync(name, unit, rng.choice((64, 128, 256)), 128 * rng.choice((1, 32, 64)),
                            extra=self._second_segment(unit))
        for use in self.ops[-1].uses:
            self.work[use.unit] += use.length
        if self.ops[-1].variable_latency:  # a load only waits for a buffer freed iterations ago
            if block and rng.random() < 0.3:
                self._edge(rng.choice(block), op, latency=0, distance=rng.choice((1, 2)), carrier=Carrier.ORDER)
        elif block and rng.random() < 0.7:
            src = rng.choice(block)
            self._edge(src, op, blocking=self._is_async(src), carrier=self._carrier(src))
        elif rng.random() < 0.3:
            self._attach(op, name.split("_")[0] + "_", (1, 2))
        return op

    def _second_segment(self, unit: str) -> tuple[Use, ...]:
        """Nothing, or a segment on another synchronous unit: at the same time (exp and its FMA),
        right after, or after a gap (a reservation table with a hole)."""
        rng = self.rng
        if rng.random() < 0.5:
            return ()
        other = rng.choice([u for u in _SYNC_UNITS if u != unit])
        return (Use(unit=other, offset=rng.choice((0, 64, 128, 320)), length=rng.choice((32, 64, 128))),)


# -- "loads": long variable-latency loads ------------------------------------------------------------
class _LoadsBuilder(_Builder):
    """Blocks of one to three loads from slow memory (latency tails of 800-4000 cycles, a paged or
    gathered tile), some whose address an index op computes in the loop, feeding an MMA and a
    few synchronous ops; some consumers free their buffer for a load two or three iterations on.
    Shared-memory rings deep enough to cover the latency, and the TMA engine, bind."""

    BLOCK = (3, 9)

    def _block(self, prefix: str, size: int) -> None:
        rng = self.rng
        n_loads = min(size - 1, rng.choice((1, 2, 2, 3))) if size > 1 else 1
        loads = []
        for i in range(n_loads):
            dependent = size - n_loads >= 3 and rng.random() < 0.3
            if dependent:  # an index op computes the address (a paged KV cache)
                idx = self._sync(f"{prefix}idx{i}", "alu", rng.choice((8, 16)), 128, kind="index",
                                 issuer=Issuer.WARP)
                self._attach(idx, prefix, (0, 1))
                size -= 1
            load = self._load(f"{prefix}load{i}", rng.choice((16384, 32768, 65536)),
                              tail=rng.choice((800, 1600, 2400, 4000)), streaming=not dependent)
            if dependent:
                self._edge(idx, load, carrier=Carrier.ORDER)
            loads.append(load)
        self._consumers(prefix, loads, size - n_loads)

    def _consumers(self, prefix: str, loads: list[str], count: int) -> None:
        rng, chain = self.rng, []
        for i in range(count):
            if i == 0:
                op = self._mma(f"{prefix}mma", rng.choice((128, 256)), regs=128 * 128)
                for load in loads[:2]:
                    self._edge(load, op, blocking=True, carrier=Carrier.SMEM)
            else:
                op = self._random_sync(f"{prefix}s{i}", 128 * rng.choice((1, 64, 128)))
                self._edge(chain[-1], op, blocking=i == 1, carrier=Carrier.REGISTERS)
                if len(loads) > 2 and i == 1:
                    self._edge(loads[2], op, blocking=True, carrier=Carrier.SMEM)
            chain.append(op)
        if chain and rng.random() < 0.4:  # the last reader frees a buffer for a load iterations later
            self._edge(chain[-1], rng.choice(loads), latency=0, distance=rng.choice((2, 3)), carrier=Carrier.ORDER)


# -- "handoff": values that cross between producer and consumer roles --------------------------------
class _HandoffBuilder(_Builder):
    """Producer ops (MMAs, and one-warp index/scale ops) and consumer ops (warpgroup tile work on
    three pipes; two for each producer) alternate along a chain of register values, with
    feedback from each iteration's last consumer to the next iteration's producers. Consumer holds add up to several times any
    unit's work, so in-order issue wants several groups, and every split hands big tiles across."""

    BLOCK = (4, 10)

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.consumers = 0  # consumer ops so far: they take the three pipes in turn

    def _block(self, prefix: str, size: int) -> None:
        rng = self.rng
        start = 0
        if size >= 4:
            load = self._load(f"{prefix}load", rng.choice((8192, 16384, 32768)))
            prev = self._mma(f"{prefix}mma0", rng.choice((128, 256)), regs=128 * 128, kind="producer_mma")
            self._edge(load, prev, blocking=True, carrier=Carrier.SMEM)
            chain, start = [prev], 2
        else:
            chain = []
        producers = list(chain)
        for i in range(start, size):
            op = self._role_op(f"{prefix}o{i}", producer=i % 3 == 0)
            if chain:
                self._edge(chain[-1], op, blocking=self._is_async(chain[-1]), carrier=Carrier.REGISTERS)
                if len(chain) > 1 and rng.random() < 0.5:
                    self._edge(rng.choice(chain[:-1]), op, carrier=Carrier.REGISTERS)
            else:
                self._attach(op, prefix, (0, 1))
            if i % 3 == 0:
                producers.append(op)
            chain.append(op)
        if producers and chain[-1] not in producers and rng.random() < 0.6:
            # feedback: this iteration's last consumer feeds the next iteration's producer (a new scale)
            self._edge(chain[-1], rng.choice(producers), distance=1, carrier=Carrier.REGISTERS)

    def _role_op(self, name: str, producer: bool) -> str:
        rng = self.rng
        if producer and rng.random() < 0.25:
            return self._mma(name, rng.choice((64, 128, 256)), regs=128 * rng.choice((64, 128)),
                             kind="producer_mma")
        if producer:
            return self._sync(name, rng.choice(("alu", "fp32")), rng.choice((8, 16, 32)), 32 * rng.choice((32, 128)),
                              kind="producer", issuer=Issuer.WARP)  # an index, mask or scale
        self.consumers += 1
        return self._sync(name, _SYNC_UNITS[self.consumers % 3], rng.choice((256, 384, 512)),
                          128 * rng.choice((64, 128)), kind="consumer")


_BUILDERS: dict[str, type[_Builder]] = {
    "tmem": _TmemBuilder, "regs": _RegsBuilder, "recurrence": _RecurrenceBuilder, "units": _UnitsBuilder,
    "loads": _LoadsBuilder, "handoff": _HandoffBuilder,
}


# -- footprints that provably fit ------------------------------------------------------------------
def _replace(op: Op, **fields) -> Op:
    from dataclasses import replace

    return replace(op, **fields)


def _demand(ops: list[Op], edges: list[Edge], field: str) -> int:
    """Σ footprint x (1 + largest distance of a reader): the witness's peak bound (module docstring)."""
    reach = {op.name: 0 for op in ops}
    for e in edges:
        reach[e.src] = max(reach[e.src], e.distance)
    return sum(getattr(op, field) * (1 + reach[op.name]) for op in ops)


def _peak_demand(ops: list[Op], edges: list[Edge], field: str) -> int:
    """A tighter bound on the witness's peak, for memories counted cycle by cycle (registers of
    the one group that holds them all, TMEM columns; not SMEM, whose rings add up whatever their
    lifetimes). The witness runs the ops one after another in a fixed order (``_witness_plan``),
    each after the previous one is done with its result, units and group, at an II above the
    iteration's length: a value read only in its own iteration is live from its producer's turn
    to its last reader's, and one read δ iterations later needs at most 1 + δ copies at any time.
    So the peak is at most the largest sum of the former over one turn, plus all the latter."""
    order = witness_order([op.name for op in ops], edges)
    position = {name: i for i, name in enumerate(order)}
    reach: dict[str, int] = {}  # the largest distance each carried value is read at
    for e in edges:
        if e.distance > 0:
            reach[e.src] = max(reach.get(e.src, 0), e.distance)
    last = {op.name: position[op.name] for op in ops}
    for e in edges:
        if e.distance == 0:
            last[e.src] = max(last[e.src], position[e.dst])
    turns = [0] * len(order)
    always = 0
    for op in ops:
        size = getattr(op, field)
        if not size:
            continue
        if op.name in reach:
            always += size * (1 + reach[op.name])
            continue
        for k in range(position[op.name], last[op.name] + 1):
            turns[k] += size
    return always + max(turns, default=0)


def _fit(ops: list[Op], edges: list[Edge], field: str, budget: int, floor: int,
         recost: Callable[[Op], Op] | None = None,
         demand: Callable[[list[Op], list[Edge], str], int] = _demand, keep: tuple[int, int] = (1, 2)) -> list[Op]:
    """Scale every nonzero ``field`` by ``keep`` (halve it, by default; not below ``floor``) until
    the demand fits ``budget``; if it still does not, drop the footprint from the largest consumers
    of it. A finer ``keep`` leaves footprints closer to the budget."""
    num, den = keep
    while demand(ops, edges, field) > budget and any(getattr(op, field) > floor for op in ops):
        ops = [_replace(op, **{field: max(floor, getattr(op, field) * num // den)}) if getattr(op, field) else op
               for op in ops]
        if recost:
            ops = [recost(op) if op.smem_bytes else op for op in ops]
    while demand(ops, edges, field) > budget:
        i = max(range(len(ops)), key=lambda k: getattr(ops[k], field))
        ops[i] = _replace(ops[i], **{field: 0})
    return ops


# -- the tiny arch ---------------------------------------------------------------------------------
def tiny_arch(seed: int = 0) -> Arch:
    """A synthetic test arch with small limits, so that warps, registers, SMEM and TMEM bind.

    Built through the arch loader (``arch_from_dict``), so every number carries a source, as the
    built-in archs' do. Units (``tma``, ``tc``: one instance; ``alu``: two) are the same for every
    seed; the seed varies the CTA's warps, the register file, SMEM, TMEM and the sync costs.

    Examples
    --------
    >>> a = tiny_arch(1)
    >>> a.unit("alu").cap, a.register_budgets(), a.warp_group_sizes()
    (2, (1, 2, 3, 4), (1, 2, 4))
    """
    rng = random.Random(f"twill.random_loops:tiny_arch:{seed}")
    src = f"synthetic test arch (twill.random_loops.tiny_arch, seed {seed})"

    def fact(value: object) -> dict:
        return {"value": value, "source": src}

    data = {
        "name": f"tiny{seed}",
        "description": "synthetic arch with tiny limits for differential tests",
        "chip": {"sms": fact(1), "clock_mhz": fact(1000)},
        "limits": {
            "warps_per_cta": fact(rng.choice((5, 6, 8))),
            "warp_group_sizes": fact([1, 2, 4]),
            # room for the witness: 32 x (4 x 4 + 1 x 1) = 544 words
            "regs_per_sm": fact(rng.choice((544, 640, 768))),
            "regs_per_thread_max": fact(4),
            "reg_alloc_min": fact(1),
            "reg_alloc_max": fact(4),
            "reg_alloc_step": fact(1),
            "regs_reserved_per_thread": fact(1),
            "smem_bytes_per_cta": fact(rng.choice((128, 192, 256))),
            "tmem_cols": fact(rng.choice((8, 12, 16))),
        },
        "rates": {k: fact(1) for k in ("tensor_flops_per_clk_fp16", "tensor_flops_per_clk_bf16",
                                       "tensor_flops_per_clk_fp8", "mma_full_rate_min_m", "mufu_ops_per_clk",
                                       "fp32_ops_per_clk", "alu_ops_per_clk", "convert_ops_per_clk",
                                       "tma_bytes_per_clk")},
        "latencies": {k: fact(1) for k in ("mma", "mufu", "fp32", "tma")},
        "sync": {
            "mbarrier": fact(rng.choice((1, 2))),
            "named_barrier": fact(1),
            "handoff_fixed": fact(rng.choice((0, 1))),
            "handoff_per_kib": fact(4),
            "wait_issue": fact(rng.choice((0, 1))),
        },
        "features": {"accumulator": fact("registers"), "mma_issuer": fact("thread")},
        "units": {
            "tma": {"capacity": fact(1), "async": True, "description": "copy engine"},
            "tc": {"capacity": fact(1), "async": True, "description": "matrix unit"},
            "alu": {"capacity": fact(2), "description": "two scalar pipes"},
        },
    }
    # drawn last, so that the facts above stay those of earlier versions for every seed: a third of
    # the archs charge no hand-off copy, the rest copy 64 or 128 B per cycle (a few cycles per value)
    copy_rate = rng.choice((0, 64, 128))
    if copy_rate:
        data["rates"]["smem_bytes_per_clk_beside_wgmma"] = fact(copy_rate)
    return arch_from_dict(data, f"tiny_arch({seed})")
