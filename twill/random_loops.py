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

Solvability
-----------
Register, SMEM and TMEM footprints are scaled down (halved, all together) until the sequential
schedule of ``sequential_witness`` fits: every op issued after the previous one finished, loads
in a group of their own and everything else in one group of the widest size. With II at least
the iteration's length plus the longest read, a value whose readers are at most δ iterations
later needs at most δ + 1 copies, so Σ footprint x (1 + δ) bounds every peak (design.md §2.8-2.9).
``sequential_witness`` builds that schedule, so a test can check the claim with the validator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import networkx as nx

from twill.arch.model import Arch
from twill.arch.toml import arch_from_dict
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.problem import Problem

__all__ = ["PROFILES", "random_body", "tiny_arch", "sequential_witness", "witness_ii"]

PROFILES = ("fa", "tiny")

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
        ``"fa"`` (realistic FlashAttention-like costs, for the built-in archs) or ``"tiny"``
        (1..6-cycle costs for ``tiny_arch``, small enough for exhaustive search).

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
    else:
        ops, edges = _tiny(rng, n_ops)
        ops = _fit(ops, edges, "regs", _TINY_REG_WORDS, floor=1)
        ops = _fit(ops, edges, "smem_bytes", _TINY_SMEM_BYTES, floor=1)
        ops = _fit(ops, edges, "tmem_cols", _TINY_TMEM_COLS, floor=1)
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


def _fit(ops: list[Op], edges: list[Edge], field: str, budget: int, floor: int,
         recost: Callable[[Op], Op] | None = None) -> list[Op]:
    """Halve every nonzero ``field`` (not below ``floor``) until the demand fits ``budget``; if it
    still does not, drop the footprint from the largest consumers of it."""
    while _demand(ops, edges, field) > budget and any(getattr(op, field) > floor for op in ops):
        ops = [_replace(op, **{field: max(floor, getattr(op, field) // 2)}) if getattr(op, field) else op
               for op in ops]
        if recost:
            ops = [recost(op) if op.smem_bytes else op for op in ops]
    while _demand(ops, edges, field) > budget:
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
    return arch_from_dict(data, f"tiny_arch({seed})")


# -- the witness -----------------------------------------------------------------------------------
def _witness_plan(problem: Problem) -> tuple[dict[str, int], dict[str, int], int]:
    """Starts (one op after another in dependence order), groups, and the smallest II at which
    every loop-carried dependence and every read ends within the next iteration's window."""
    groups = {op.name: (0 if op.variable_latency else 1) for op in problem.ops}
    if len(set(groups.values())) == 1:
        groups = dict.fromkeys(groups, 0)
    g = nx.DiGraph()
    g.add_nodes_from(op.name for op in problem.ops)
    g.add_edges_from((e.src, e.dst) for e in problem.edges if e.distance == 0)
    order = list(nx.lexicographical_topological_sort(g, key=[op.name for op in problem.ops].index))
    starts: dict[str, int] = {}
    free = 0
    for name in order:
        op = problem.op(name)
        ready = [starts[e.src] + e.latency + (problem.cross_group_cost(e) if groups[e.src] != groups[e.dst] else 0)
                 for e in problem.body.in_edges(name) if e.distance == 0]
        starts[name] = max([free, *ready])
        free = starts[name] + max(op.latency, problem.hold(name), op.busy_cycles, 1)
    longest_read = max((e.latency + problem.cross_group_cost(e) for e in problem.edges), default=0)
    reads = max([op.latency for op in problem.ops] + [problem.hold(op.name) for op in problem.ops])
    return starts, groups, free + longest_read + reads + 1


def witness_ii(problem: Problem) -> int:
    """The II of ``sequential_witness``: an upper bound on the optimal II of a generated body."""
    return _witness_plan(problem)[2]


def sequential_witness(problem: Problem, *, swp_only: bool = False):
    """A schedule with no overlap inside an iteration, which the profiles' footprints always fit.

    Ops issue one after another in dependence order; variable-latency ops get a warp group of
    their own (of the narrowest size they need), every other op shares one group of the widest
    size, with the largest register budget the register file allows next to the other group.
    It is not optimal; it proves that the body has a schedule (check it with ``validate``).

    Examples
    --------
    >>> from twill.problem import build_problem
    >>> from twill.validate import validate
    >>> arch = tiny_arch(0)
    >>> p = build_problem(random_body(0, 5, profile="tiny"), arch)
    >>> validate(p, sequential_witness(p))
    []
    """
    from twill.options import SolveOptions
    from twill.solver.assemble import Assignment, assemble, copies_needed

    starts, groups, ii = _witness_plan(problem)
    arch = problem.arch
    options = SolveOptions(swp_only=swp_only)
    warps: dict[int, int] = {}
    regs: dict[int, int] = {}
    sizes, budgets = sorted(arch.warp_group_sizes()), sorted(arch.register_budgets())
    for g in sorted(set(groups.values())):
        need = max(problem.op(n).min_warps for n, h in groups.items() if h == g)
        widest = g == max(groups.values())
        warps[g] = sizes[-1] if widest else min(s for s in sizes if s >= need)
    for g in sorted(warps):
        others = sum(32 * w * budgets[0] for h, w in warps.items() if h != g)
        fitting = [r for r in budgets if 32 * warps[g] * r + others <= arch.limit("regs_per_sm")]
        regs[g] = fitting[-1] if g == max(warps) and fitting else budgets[0]
    copies = {op.name: copies_needed(problem, starts, ii, op.name) for op in problem.ops
              if op.regs or op.smem_bytes or op.tmem_cols}
    a = Assignment(ii=ii, starts=starts, groups={} if swp_only else groups, warps={} if swp_only else warps,
                   regs={} if swp_only else regs, copies={} if swp_only else copies)
    return assemble(problem, options, a, optimal=False, proven_lb=1,
                    proof="feasible: a sequential schedule (twill.random_loops.sequential_witness)",
                    proven={"ii": False}, seconds=0.0)
