"""Build a twill ``LoopBody`` from Triton's TTGIR: the loop as Triton's software pipeliner sees it.

Stage 1 of the pipeline for Triton users (docs/frontend.md). Input: a ``.ttgir`` module or an
MLIR_ENABLE_DUMP stream. From a stream the module printed before ``TritonGPUAssignLatencies`` is
taken (layouts final, loop not yet pipelined); when its loop holds control flow because Triton
flattened a persistent kernel's loops, the module before ``TritonGPUFuseNestedLoops`` is taken.
In the module, the innermost ``scf.for`` that holds a dot is the loop body. Its ops map to twill
ops whose costs come from the arch (``twill.frontend.ops``), never from here:

* dots (``tt.dot``, ``ttng.warp_group_dot``, ``ttng.tc_gen5_mma``) -> tensor-core MMAs;
* ``tt.descriptor_load`` -> TMA loads; pointer ``tt.load`` -> loads on the load/store units;
* float elementwise ops, ``tt.reduce`` and conversions -> MUFU / FP32 / ALU work per element;
  single-use chains of equal size fuse into one op (FFMA contraction of mul + add included);
* ``ttng.tmem_load`` / ``ttng.tmem_store`` / ``ttng.tmem_alloc %x`` -> TMEM ops;
* views (``local_alloc``, transposes, ``expand_dims``, ``broadcast``, register-local
  ``convert_layout``) are looked through; index arithmetic, masks and constants are dropped.

Edges follow SSA use-def, ``scf.yield`` (distance 1 per loop-carried hop) and async tokens. What
twill cannot model (control flow in the body, an op with no mapping, a pipelined module) is refused
with one line naming the op and its source location (``GraphError``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twill.arch.model import Arch
from twill.errors import GraphError, TwillError
from twill.frontend import ops as tops
from twill.frontend.mlir_text import MlirOp, Module, TensorType, parse_module, parse_type, split_dump
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use

__all__ = ["ImportedLoop", "import_ttgir", "read_ttgir", "select_module", "PREFERRED_PASSES"]

# Passes whose "IR Dump Before" snapshot is the loop as the pipeliner receives it, in order of
# preference: before AssignLatencies the layouts are final and nothing is pipelined yet; before
# FuseNestedLoops a persistent kernel's K loop is still its own loop (research note §3).
PREFERRED_PASSES = ("TritonGPUAssignLatencies", "TritonGPUFuseNestedLoops")
DOTS = {"tt.dot", "ttng.warp_group_dot", "ttng.tc_gen5_mma", "tt.dot_scaled"}
DESCRIPTOR_LOADS = {"tt.descriptor_load", "tt.descriptor_gather"}
DESCRIPTOR_STORES = {"tt.descriptor_store", "tt.descriptor_reduce", "tt.descriptor_scatter"}
VIEWS = {"ttg.local_alloc", "ttg.memdesc_trans", "ttg.memdesc_reshape", "ttg.memdesc_subslice", "tt.trans",
         "tt.reshape", "tt.expand_dims", "tt.broadcast", "tt.splat", "ttg.convert_layout", "tt.join", "tt.split"}
DROPPED = {"arith.constant", "tt.addptr", "tt.advance", "tt.make_range", "tt.get_program_id", "tt.get_num_programs",
           "ttng.tmem_alloc", "gpu.barrier", "ttng.fence_async_shared", "tt.assume", "ub.poison", "scf.yield"}
CONTROL_FLOW = {"scf.if", "scf.for", "scf.while", "scf.index_switch", "cf.br", "cf.cond_br", "ttg.warp_specialize"}
PIPELINED = {"ttg.memdesc_index", "ttng.async_tma_copy_global_to_local", "ttng.wait_barrier", "ttng.barrier_expect",
             "ttg.async_copy_global_to_local", "ttg.async_wait", "ttng.warp_group_dot_wait"}
# Per-element work of the float elementwise ops, by unit class: (fp32, mufu, alu, convert).
# exp(x) is ex2(x * log2 e) and x / y is x * rcp(y): one MUFU op and one FP32 op each (PTX ISA:
# ex2.approx and rcp.approx are MUFU instructions; CUDA Guide throughput table, "32-bit floating-point
# reciprocal ... base-2 exponential" on the special function units).
ELEMENTWISE: dict[str, tuple[int, int, int, int]] = {
    "arith.mulf": (1, 0, 0, 0), "arith.addf": (1, 0, 0, 0), "arith.subf": (1, 0, 0, 0), "arith.negf": (1, 0, 0, 0),
    "math.fma": (1, 0, 0, 0), "arith.divf": (1, 1, 0, 0), "math.exp2": (0, 1, 0, 0), "math.exp": (1, 1, 0, 0),
    "math.log2": (0, 1, 0, 0), "math.log": (1, 1, 0, 0), "math.sqrt": (0, 1, 0, 0), "math.rsqrt": (0, 1, 0, 0),
    "arith.maxnumf": (0, 0, 1, 0), "arith.minnumf": (0, 0, 1, 0), "arith.maximumf": (0, 0, 1, 0),
    "arith.minimumf": (0, 0, 1, 0), "arith.select": (0, 0, 1, 0), "math.absf": (0, 0, 1, 0),
    "arith.truncf": (0, 0, 0, 1), "arith.extf": (0, 0, 0, 1), "tt.fp_to_fp": (0, 0, 0, 1),
}
MMA_DTYPES = {"f16": "fp16", "bf16": "bf16", "f8E4M3FN": "fp8", "f8E5M2": "fp8"}
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
                 "f8E4M3FN": 1, "f8E5M2": 1}
MAX_TEXT_CHARS = 64 << 20


@dataclass(frozen=True, slots=True)
class ImportedLoop:
    """The imported body and what it was built from, for reports and tests."""

    body: LoopBody
    before_pass: str  # the dump snapshot it came from ("" for a single module)
    flops: int  # tensor-core FLOPs per iteration (2mnk per dot)
    load_bytes: int  # bytes loaded from global memory per iteration (TMA and pointer loads)


# -- picking the module and the loop ------------------------------------------------------------
def select_module(text: str) -> list[tuple[str, Module]]:
    """The candidate modules of ``text``, best first: a dump's preferred snapshots, or the one module."""
    if len(text) > MAX_TEXT_CHARS:
        raise GraphError(f"TTGIR: {len(text)} characters is above the limit {MAX_TEXT_CHARS}")
    if "// -----// IR Dump Before" in text:
        snapshots = split_dump(text)
        chosen = [(p, next((s for s in snapshots if s.before_pass == p), None)) for p in PREFERRED_PASSES]
        found = [(p, parse_module(s.text, s.first_line)) for p, s in chosen if s is not None]
        if not found:
            passes = ", ".join(PREFERRED_PASSES)
            raise GraphError(f"TTGIR dump: no module printed before {passes}; compile with MLIR_ENABLE_DUMP set and "
                             "the NVIDIA backend (twill needs the loop before software pipelining)")
        return found
    if "module" not in text:
        raise GraphError("TTGIR: no 'module' in the text; give a .ttgir module or an MLIR_ENABLE_DUMP stream")
    return [("", parse_module(text))]


def _dot_loops(module: Module) -> list[MlirOp]:
    """Innermost scf.for loops whose body (or a region nested in it) holds a dot, in text order."""
    loops: list[MlirOp] = []
    for fn in module.functions():
        for op in fn.walk():
            if op.name != "scf.for":
                continue
            nested_loop_with_dot = any(o is not op and o.name == "scf.for" and _has_dot(o) for o in op.walk())
            if _has_dot(op) and not nested_loop_with_dot:
                loops.append(op)
    return loops


def _has_dot(op: MlirOp) -> bool:
    return any(o.name in DOTS for o in op.walk())


def _check_body(loop: MlirOp) -> None:
    for op in loop.regions[0]:
        if op.name in CONTROL_FLOW:
            raise GraphError(f"{op.where}: {op.name} inside the loop body; twill schedules loop bodies without "
                             "control flow (hoist or predicate it, or split the loop)")
        if op.name in PIPELINED:
            raise GraphError(f"{op.where}: {op.name} in the loop body: this module is already software-pipelined; "
                             "give the MLIR dump (MLIR_ENABLE_DUMP) so twill can take the module before pipelining")


# -- values and their producers -------------------------------------------------------------------
class _Scope:
    """Definitions visible to the loop: its body ops, its iter_args, and values from outside."""

    def __init__(self, module: Module, fn: MlirOp, loop: MlirOp) -> None:
        self.aliases = module.aliases
        self.loop = loop
        self.defs: dict[str, MlirOp] = {}
        self.types: dict[str, str] = dict(fn.arg_types)
        for op in fn.walk():
            for name, typ in zip(op.results, op.result_types, strict=False):
                self.types[name] = typ
            self.types.update(op.arg_types)
        for op in fn.walk():
            for r in op.results:
                self.defs[r] = op
        body_args = loop.region_args[0] if loop.region_args else ()
        self.induction = body_args[0] if body_args else ""
        self.iter_args = {a: i for i, a in enumerate(body_args[1:])}
        self.body = loop.regions[0]
        self.in_body = {id(op) for op in self.body}
        yields = [op for op in self.body if op.name == "scf.yield"]
        self.yielded = yields[0].operands if yields else ()
        self.uses: dict[str, list[MlirOp]] = {}
        for op in self.body:
            for v in op.operands:
                self.uses.setdefault(v, []).append(op)

    def type(self, value: str) -> TensorType:
        return parse_type(self.types.get(value, ""), self.aliases)

    def producer(self, value: str) -> MlirOp | None:
        op = self.defs.get(value)
        return op if op is not None and id(op) in self.in_body else None


def _classify(op: MlirOp, scope: _Scope) -> str:
    """What an op of the loop body becomes: a twill role, 'view', or 'drop'."""
    name = op.name
    if name in DOTS:
        return "mma"
    if name in DESCRIPTOR_LOADS:
        return "tma_load"
    if name == "tt.load":
        return "global_load"
    if name in DESCRIPTOR_STORES:
        return "tma_store"
    if name in ("ttng.tmem_load",):
        return "tmem_load"
    if name == "ttng.tmem_store" or (name == "ttng.tmem_alloc" and op.operands):
        return "tmem_store"
    if name == "tt.reduce":
        return "reduce"
    if name in DROPPED:
        return "drop"
    result = scope.type(op.results[0]) if op.results else TensorType("other", (), "")
    scalar_or_integer = result.kind not in ("tensor", "memdesc") or not _is_float(result.element)
    if scalar_or_integer and (name in ELEMENTWISE or name.startswith(("arith.", "math.")) or name in VIEWS):
        return "drop"  # scalar and integer work: loop indices, addresses, masks
    if name == "ttg.convert_layout":
        return _convert(op, scope)
    if name in VIEWS:
        return "view"
    if name in ELEMENTWISE:
        return "ew"
    raise GraphError(f"{op.where}: {name} ({_short(op)}) has no mapping to a twill op; "
                     "docs/frontend.md lists the TTGIR ops twill reads")


def _convert(op: MlirOp, scope: _Scope) -> str:
    """A layout conversion that stays in each thread's registers is a view; one through SMEM is not
    modelled. The accumulator -> dot-operand conversion of a 16-bit tile (the RS operand of wgmma) is
    register-local: the dot_op layout with the same parent and kWidth 2 keeps each thread's values."""
    src = _expand(scope.type(op.operands[0]).encoding, scope.aliases) if op.operands else ""
    dst = _expand(scope.type(op.results[0]).encoding, scope.aliases)
    sixteen_bit = scope.type(op.results[0]).element in ("f16", "bf16")
    if src and sixteen_bit and dst.startswith("#ttg.dot_op<{opIdx = 0") and f"parent = {src}" in dst:
        return "view"
    raise GraphError(f"{op.where}: ttg.convert_layout {_short(op)} moves data between threads (through shared "
                     "memory), which twill has no unit for")


def _expand(encoding: str, aliases: dict[str, str]) -> str:
    return re.sub(r"#[\w$.-]+", lambda m: aliases.get(m.group(0), m.group(0)), encoding)


def _is_float(element: str) -> bool:
    return element in ("f16", "bf16", "f32", "f64") or element.startswith("f8")


def _short(op: MlirOp) -> str:
    text = " ".join(op.text.split())
    return text if len(text) <= 70 else text[:67] + "..."


# -- the mapping --------------------------------------------------------------------------------
@dataclass(slots=True)
class _Node:
    """One twill op in the making: the TTGIR ops it covers and its role."""

    role: str
    members: list[MlirOp]
    name: str = ""

    @property
    def head(self) -> MlirOp:
        return self.members[-1]


class _Builder:
    def __init__(self, scope: _Scope, arch: Arch, fp_fusion: bool) -> None:
        self.scope, self.arch, self.fp_fusion = scope, arch, fp_fusion
        self.roles: dict[int, str] = {}
        self.follow: dict[int, int] = {}  # a view's operand that carries its value (default 0)
        round_trips = _accumulator_round_trips(scope)
        for op in scope.body:
            if id(op) in round_trips:
                self.roles[id(op)], self.follow[id(op)] = "view", round_trips[id(op)]
            else:
                self.roles[id(op)] = _classify(op, scope)
        self.node_of: dict[int, _Node] = {}
        self.nodes: list[_Node] = []
        self._group()

    # fusion of elementwise chains
    def _consumers(self, value: str, seen: set[str] | None = None) -> list[tuple[MlirOp, str]]:
        """Ops that read ``value``, looking through views; yield counts as a consumer."""
        seen = seen if seen is not None else set()
        if value in seen:
            return []
        seen.add(value)
        out: list[tuple[MlirOp, str]] = []
        for op in self.scope.uses.get(value, []):
            role = self.roles.get(id(op), "drop")
            if role == "view" and op.operands and op.operands[0] == value:
                for r in op.results:
                    out.extend(self._consumers(r, seen))
            else:
                out.append((op, value))
        return out

    def _group(self) -> None:
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            while parent.get(x, x) != x:
                x = parent[x]
            return x

        body = self.scope.body
        for op in body:
            if self.roles[id(op)] != "ew":
                continue
            consumers = self._consumers(op.results[0])
            if len(consumers) != 1:
                continue
            consumer, _ = consumers[0]
            if self.roles.get(id(consumer)) != "ew":
                continue
            if self.scope.type(op.results[0]).elements != self.scope.type(consumer.results[0]).elements:
                continue
            parent[find(id(op))] = find(id(consumer))
        groups: dict[int, _Node] = {}
        for op in body:
            role = self.roles[id(op)]
            if role in ("view", "drop"):
                continue
            key = find(id(op)) if role == "ew" else id(op)
            node = groups.get(key)
            if node is None:
                node = groups[key] = _Node(role, [])
                self.nodes.append(node)
            node.members.append(op)
            self.node_of[id(op)] = node
        used: set[str] = set()
        for node in self.nodes:
            node.name = _unique(_node_name(node), used)

    # producers through views and iter_args
    def producers(self, value: str, distance: int = 0, depth: int = 0) -> list[tuple[_Node, int]]:
        if depth > 64:
            return []
        scope = self.scope
        if value in scope.iter_args:
            index = scope.iter_args[value]
            if index >= len(scope.yielded):
                return []
            return self.producers(scope.yielded[index], distance + 1, depth + 1)
        op = scope.producer(value)
        if op is None:
            return []
        role = self.roles[id(op)]
        if role == "drop":
            return []
        if role == "view":
            index = self.follow.get(id(op), 0)
            return self.producers(op.operands[index], distance, depth + 1) if len(op.operands) > index else []
        return [(self.node_of[id(op)], distance)]


def _accumulator_round_trips(scope: _Scope) -> dict[int, int]:
    """A tcgen05 accumulator carried in registers across iterations: ``tmem_alloc %acc`` -> MMA ->
    ``tmem_load`` -> yield. Before FuseNestedLoops (a persistent kernel) Triton has not yet run
    HoistTMEMAlloc, which keeps the accumulator in TMEM across iterations and removes the round
    trip; twill reads the loop as that pass leaves it: both ops become views, so the MMA chains to
    itself in TMEM. Returns op id -> the operand its value follows (the alloc's data, the load's token)."""
    found: dict[int, int] = {}
    for alloc in scope.body:
        if alloc.name != "ttng.tmem_alloc" or not alloc.operands or alloc.operands[0] not in scope.iter_args:
            continue
        index = scope.iter_args[alloc.operands[0]]
        buffer = alloc.results[0] if alloc.results else ""
        readers = scope.uses.get(buffer, [])
        loads = [op for op in readers if op.name == "ttng.tmem_load"]
        mmas = [op for op in readers if op.name == "ttng.tc_gen5_mma" and op.operands[2:3] == (buffer,)]
        if (len(loads) == 1 and len(mmas) == 1 and len(readers) == 2 and index < len(scope.yielded)
                and scope.yielded[index] == loads[0].results[0] and len(loads[0].operands) > 1):
            found[id(alloc)], found[id(loads[0])] = 0, 1
    return found


def _node_name(node: _Node) -> str:
    prefix = {"mma": "mma", "tma_load": "load", "global_load": "load", "tma_store": "store", "tmem_load": "tmem_ld",
              "tmem_store": "tmem_st", "reduce": "red"}.get(node.role)
    if prefix is None:
        names = {op.name for op in node.members}
        prefix = "exp" if names & {"math.exp2", "math.exp"} else "cvt" if names <= {
            "arith.truncf", "arith.extf", "tt.fp_to_fp"} else "ew"
    value = node.head.results[0] if node.head.results else f"line{node.head.line}"
    base = re.sub(r"[^\w]", "_", value.lstrip("%"))
    return f"{prefix}_{base}"


def _unique(name: str, used: set[str]) -> str:
    out, i = name, 1
    while out in used:
        i += 1
        out = f"{name}_{i}"
    used.add(out)
    return out


# -- costs ----------------------------------------------------------------------------------------
def _regs(t: TensorType) -> int:
    """32-bit registers a register tensor takes over the whole tile."""
    return max(1, t.elements * ELEMENT_BYTES.get(t.element, 4) // 4)


def _load_bytes(t: TensorType) -> int:
    element = t.element
    m = re.match(r"!tt\.ptr<(\w+)>", element)
    if m:
        element = m.group(1)
    if element not in ELEMENT_BYTES:
        raise GraphError(f"TTGIR: element type {element!r} of a load has no known size")
    return t.elements * ELEMENT_BYTES[element]


def _mma_op(node: _Node, scope: _Scope, arch: Arch) -> tuple[Op, int]:
    op = node.head
    if len(op.operands) < 3:
        raise GraphError(f"{op.where}: {op.name} needs A, B and accumulator operands, got {len(op.operands)}")
    a_type, b_type = scope.type(op.operands[0]), scope.type(op.operands[1])
    if len(a_type.shape) != 2 or len(b_type.shape) != 2:
        raise GraphError(f"{op.where}: {op.name} operands must be 2-D tiles, got {a_type.shape} and {b_type.shape}")
    (m, k), n = a_type.shape, b_type.shape[1]
    dtype = MMA_DTYPES.get(a_type.element)
    if dtype is None:
        raise GraphError(f"{op.where}: {op.name} on {a_type.element} operands; the arch models tensor-core rates "
                         f"for {', '.join(sorted(MMA_DTYPES))}")
    return tops.mma(arch, node.name, m, n, k, dtype, kind="mma"), 2 * m * n * k


def _elementwise_op(node: _Node, scope: _Scope, arch: Arch, fp_fusion: bool) -> Op:
    """A fused chain: its units' work side by side, like ``ops.softmax_exp`` (the elements stream
    through every unit of the chain at once)."""
    elements = scope.type(node.head.results[0]).elements
    fp32 = mufu = alu = convert = 0
    members = {id(op) for op in node.members}
    for op in node.members:
        f, mu, a, c = ELEMENTWISE[op.name]
        fp32, mufu, alu, convert = fp32 + f, mufu + mu, alu + a, convert + c
        if fp_fusion and op.name == "arith.mulf":  # mul feeding an add/sub in the chain: one FFMA
            uses = scope.uses.get(op.results[0], [])
            if len(uses) == 1 and id(uses[0]) in members and uses[0].name in ("arith.addf", "arith.subf"):
                fp32 -= 1
    cost = arch.cost
    uses: list[Use] = []
    latencies: list[int] = []
    holds: list[int] = []  # the issuing group's span per unit (ops.softmax_exp: the longest one holds it)
    for unit, count, fn in (("fp32", fp32, cost.fp32), ("mufu", mufu, cost.exp)):
        if count:
            c = fn(count * elements)
            uses.append(Use(unit=unit, length=c.busy))
            latencies.append(c.latency)
            holds.append(c.hold or c.busy)
    if alu or convert:  # min/max and F2FP conversions share the ALU pipe: their busy times add up
        parts = [cost.alu(alu * elements)] if alu else []
        if convert:  # one F2FP packs two elements (ops.convert)
            parts.append(cost.convert(max(1, convert * elements // 2)))
        busy, hold = sum(p.busy for p in parts), sum(p.hold or p.busy for p in parts)
        uses.append(Use(unit="alu", length=busy))
        latencies.append(hold + max(p.latency - (p.hold or p.busy) for p in parts))
        holds.append(hold)
    kind = "convert" if node.name.startswith("cvt") else "elementwise"
    span = max(u.end for u in uses)
    return Op(name=node.name, kind=kind, uses=tuple(uses), latency=max(latencies),
              issuer=Issuer.WARPGROUP,  # register tiles of the CTA's rows are spread over warpgroups (as ops._sync)
              regs=_regs(scope.type(node.head.results[0])), sync_hold=max(holds) if max(holds) > span else 0)


def _reduce_op(node: _Node, scope: _Scope, arch: Arch) -> Op:
    """A row reduction: one combine per input element, on the ALU for max/min, else on FP32."""
    op = node.head
    combiners = {o.name for region in op.regions for o in region}
    n = scope.type(op.operands[0]).elements
    regs = _regs(scope.type(op.results[0]))
    if combiners & {"arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf", "arith.maxsi",
                    "arith.minsi"}:
        return tops.alu(arch, node.name, n, regs=regs, kind="reduce")
    if combiners & {"arith.addf", "arith.mulf"}:
        return tops.fp32(arch, node.name, n, regs=regs, kind="reduce")
    raise GraphError(f"{op.where}: tt.reduce with combiner {sorted(combiners)} has no mapping; twill reads max, "
                     "min and sum reductions")


def _tmem_cols(t: TensorType) -> int:
    """TMEM columns of a 128-lane buffer: one 32-bit column per 4 bytes of a row (PTX ISA tcgen05)."""
    if len(t.shape) != 2:
        return 0
    return max(1, t.shape[1] * ELEMENT_BYTES.get(t.element, 4) // 4) * max(1, t.shape[0] // 128)


def _panel_loads(builder: _Builder) -> set[int]:
    """The TMA loads that are GEMM panels: both operands of one MMA loaded by TMA in the same iteration.

    A GEMM's grid shares each A tile along a row of output tiles and each B tile along a column, so
    their L2 feed is the panel pattern's (``TMA_SHARING["panel"]``, measured with a GEMM's raster),
    not every SM on the same tile. FlashAttention's K and V each meet an operand made in the loop (Q
    stays resident, P is computed), so they keep the same-tile rate, as in ``programs/fa_fwd.py``."""
    panels: set[int] = set()
    for node in builder.nodes:
        if node.role != "mma" or len(node.head.operands) < 2:
            continue
        found = [builder.producers(v) for v in node.head.operands[:2]]
        loads = [ps[0][0] for ps in found if len(ps) == 1 and ps[0][1] == 0 and ps[0][0].role == "tma_load"]
        if len(loads) == 2 and loads[0] is not loads[1]:
            panels.update(id(n) for n in loads)
    return panels


def _make_op(node: _Node, scope: _Scope, arch: Arch, fp_fusion: bool, panel: bool = False) -> tuple[Op, int, int]:
    """The twill op of a node, its tensor-core FLOPs and its loaded bytes; ``panel``: a TMA load that
    ``_panel_loads`` found to be a GEMM panel."""
    op = node.head
    if node.role == "mma":
        built, flops = _mma_op(node, scope, arch)
        return built, flops, 0
    if node.role in ("tma_load", "global_load"):
        nbytes = _load_bytes(scope.type(op.results[0]))
        if node.role == "tma_load":
            return tops.tma_load(arch, node.name, nbytes, kind="load", sharing="panel" if panel else "all"), 0, nbytes
        _require_unit(arch, "lsu", op)
        return tops.global_load(arch, node.name, nbytes, kind="load"), 0, nbytes
    if node.role == "tma_store":
        stored = [scope.type(v) for v in op.operands if scope.type(v).kind == "tensor"]
        if not stored:
            raise GraphError(f"{op.where}: {op.name} stores no tensor twill can size")
        return tops.tma_store(arch, node.name, _load_bytes(stored[-1]), kind="store"), 0, 0
    if node.role == "tmem_load":
        _require_unit(arch, "tmem", op)
        t = scope.type(op.results[0])
        return tops.tmem_load(arch, node.name, t.elements * 4, regs=_regs(t), kind="tmem_load"), 0, 0
    if node.role == "tmem_store":
        _require_unit(arch, "tmem", op)
        t = scope.type(op.operands[0])
        cols = _tmem_cols(scope.type(op.results[0])) if op.name == "ttng.tmem_alloc" else _tmem_cols(
            scope.type(op.operands[1]))
        return tops.tmem_store(arch, node.name, t.elements * ELEMENT_BYTES.get(t.element, 4), tmem_cols=cols,
                               kind="tmem_store"), 0, 0
    if node.role == "reduce":
        return _reduce_op(node, scope, arch), 0, 0
    return _elementwise_op(node, scope, arch, fp_fusion), 0, 0


def _require_unit(arch: Arch, unit: str, op: MlirOp) -> None:
    if not arch.has_unit(unit):
        raise GraphError(f"{op.where}: {op.name} needs the {unit!r} unit, which arch {arch.name!r} lacks "
                         f"(units: {', '.join(arch.unit_names())}); compile for this arch's Triton target")


# -- edges ----------------------------------------------------------------------------------------
# Operand positions of an MMA's accumulator D: the tensor for wgmma, the TMEM buffer and its token for tcgen05.
_ACCUMULATOR_OPERANDS = {"tt.dot": (2,), "ttng.warp_group_dot": (2,), "ttng.tc_gen5_mma": (2, 3)}


def _edge(src: _Node, dst: _Node, src_op: Op, dst_op: Op, distance: int, operand: int, via_token: bool) -> Edge:
    """Latency and flags of one dependence (research note §6, the hand-written programs' rules)."""
    base: dict[str, Any] = {"src": src.name, "dst": dst.name, "distance": distance}
    acc_operand = operand in _ACCUMULATOR_OPERANDS.get(dst.head.name, ())
    tmem = Carrier.TMEM if src_op.tmem_cols or src.role in ("tmem_store",) else Carrier.REGISTERS
    if src.role in ("tma_load", "global_load"):
        return Edge(**base, latency=src_op.latency, blocking=True, carrier=Carrier.SMEM)
    if src.role == "mma":
        if dst.role == "mma" and acc_operand:  # the tensor core chains MMAs into one accumulator in order
            return Edge(**base, latency=src_op.busy_cycles, carrier=tmem, in_place=True)
        in_place = distance >= 1 and dst.role == "ew"  # O *= alpha rewrites the accumulator in place
        return Edge(**base, latency=src_op.latency, blocking=True, carrier=tmem, in_place=in_place)
    if src.role == "tmem_load" and via_token:  # the columns were read: a later write may reuse them
        return Edge(**base, latency=0, carrier=Carrier.ORDER)
    if src.role == "tmem_store":
        return Edge(**base, latency=src_op.latency, blocking=dst.role == "mma", carrier=Carrier.TMEM,
                    in_place=acc_operand)
    return Edge(**base, latency=src_op.latency, in_place=dst.role == "mma" and acc_operand)


def _edges(builder: _Builder, built: dict[str, Op]) -> list[Edge]:
    scope = builder.scope
    found: dict[tuple[str, str, int], Edge] = {}
    for node in builder.nodes:
        members = {id(op) for op in node.members}
        for op in node.members:
            for index, value in enumerate(op.operands):
                token = scope.type(value).kind == "token"
                for src, distance in builder.producers(value):
                    if src is node and distance == 0:
                        continue
                    if id(src.head) in members and distance == 0:
                        continue
                    e = _edge(src, node, built[src.name], built[node.name], distance, index, token)
                    key = (e.src, e.dst, e.distance)
                    old = found.get(key)
                    if old is None or _stronger(e, old):
                        found[key] = e
    return list(found.values())


def _stronger(new: Edge, old: Edge) -> bool:
    """Of two parallel edges keep the data one over an ordering, then the later one."""
    if old.carrier is Carrier.ORDER and new.carrier is not Carrier.ORDER:
        return True
    return new.latency > old.latency and new.carrier is not Carrier.ORDER


# -- trip count -------------------------------------------------------------------------------------
_ARITH = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
          "arith.divsi": lambda a, b: int(a / b) if b else None, "arith.divui": lambda a, b: a // b if b else None,
          "arith.ceildivsi": lambda a, b: -(-a // b) if b else None, "arith.remsi": lambda a, b: a % b if b else None,
          "arith.maxsi": max, "arith.minsi": min}


def _value_of(value: str, scope: _Scope, values: dict[str, int], memo: dict[str, int | None], depth: int = 0) -> int | None:
    """The integer a scalar SSA value holds, from constants, launch values and integer arithmetic
    (memoised: a chain of ``addi %x, %x`` would otherwise double the work at every step)."""
    if value in memo:
        return memo[value]
    if depth > 32:
        return None
    name = value.lstrip("%")
    result: int | None = None
    op = scope.defs.get(value)
    if name in values:
        result = values[name]
    elif op is not None and op.name == "arith.constant":
        m = re.match(r"arith\.constant\s+(-?\d{1,18})\s*:", op.text)
        result = int(m.group(1)) if m else None
    elif op is not None and op.name in _ARITH and len(op.operands) == 2:
        a, b = (_value_of(v, scope, values, memo, depth + 1) for v in op.operands)
        result = None if a is None or b is None else _ARITH[op.name](a, b)
    memo[value] = result
    return result


def _trip_count(scope: _Scope, values: dict[str, int]) -> int | None:
    memo: dict[str, int | None] = {}
    lb, ub, step = (_value_of(v, scope, values, memo) for v in scope.loop.operands[:3])
    if lb is None or ub is None or not step or step < 0:
        return None
    return max(0, -(-(ub - lb) // step))


# -- public entry points ----------------------------------------------------------------------------
def _build(module: Module, loop: MlirOp, fn: MlirOp, arch: Arch, name: str, before_pass: str,
           values: dict[str, int], trip_count: int | None, fp_fusion: bool) -> ImportedLoop:
    _check_body(loop)
    scope = _Scope(module, fn, loop)
    builder = _Builder(scope, arch, fp_fusion)
    built: dict[str, Op] = {}
    flops = load_bytes = 0
    panels = _panel_loads(builder)
    for node in builder.nodes:
        op, f, b = _make_op(node, scope, arch, fp_fusion, id(node) in panels)
        refs = " ".join(f"{m.name}" for m in node.members)
        where = f" ({node.head.loc})" if node.head.loc else f" (TTGIR line {node.head.line})"
        built[node.name] = _with_ref(op, f"{refs}{where}")
        flops, load_bytes = flops + f, load_bytes + b
    if not any(n.role == "mma" for n in builder.nodes):
        raise GraphError(f"{loop.where}: the loop's dot is not in its body; twill needs the dot in the loop body")
    edges = _edges(builder, built)
    trips = trip_count if trip_count is not None else _trip_count(scope, values)
    params = {"source": name, "ttgir_pass": before_pass or "module", "loop_line": loop.line,
              "loop_loc": loop.loc, "flops_per_iteration": flops, "load_bytes_per_iteration": load_bytes,
              "fp_fusion": fp_fusion}
    body = LoopBody(name, tuple(built.values()), tuple(edges), params, trips)
    return ImportedLoop(body, before_pass, flops, load_bytes)


def _with_ref(op: Op, ref: str) -> Op:
    return replace(op, ref=ref[:200])


def import_ttgir(text: str, arch: Arch, name: str = "ttgir", loop: int = 0, values: dict[str, int] | None = None,
                 trip_count: int | None = None, fp_fusion: bool = True) -> ImportedLoop:
    """Import the loop with tensor-core work from TTGIR text (a module or a dump stream).

    Parameters
    ----------
    text : a ``.ttgir`` module printed before pipelining, or an MLIR_ENABLE_DUMP stream.
    arch : the architecture whose cost model prices every op.
    loop : which loop with a dot, in text order, when the kernel has several.
    values : runtime scalar arguments by name (``{"n_ctx": 8192}``), for the trip count.
    fp_fusion : whether Triton contracts mul + add into FFMA (its default).

    Raises
    ------
    GraphError : one line naming the op and its source location when the loop cannot be modelled.
    """
    first_error: TwillError | None = None
    for before_pass, module in _modules(text):
        try:
            return _import_module(module, arch, name, before_pass, loop, dict(values or {}), trip_count, fp_fusion)
        except GraphError as err:  # try the next snapshot (a persistent kernel's pre-fusion loop)
            first_error = first_error or err
        except (IndexError, KeyError, ValueError, TypeError, RecursionError) as err:
            first_error = first_error or _malformed(err)
    assert first_error is not None
    raise first_error


def _modules(text: str) -> list[tuple[str, Module]]:
    try:
        return select_module(text)
    except (IndexError, KeyError, ValueError, TypeError, RecursionError) as err:
        raise _malformed(err) from None


def _malformed(err: Exception) -> GraphError:
    """Text the reader's checks did not anticipate: still one line, naming what went wrong."""
    return GraphError(f"TTGIR: malformed text that twill cannot read ({type(err).__name__}: "
                      f"{' '.join(str(err).split())[:120]}); give a module as Triton prints it")


def _import_module(module: Module, arch: Arch, name: str, before_pass: str, loop: int, values: dict[str, int],
                   trip_count: int | None, fp_fusion: bool) -> ImportedLoop:
    functions = module.functions()
    if not functions:
        raise GraphError("TTGIR: the module holds no tt.func")
    loops = _dot_loops(module)
    if not loops:
        dots = [op for fn in functions for op in fn.walk() if op.name in DOTS]
        where = f"; its dot at {dots[0].where} is outside any loop" if dots else ""
        raise GraphError(f"TTGIR: no scf.for loop with a dot (tt.dot, warp_group_dot or tc_gen5_mma){where}; twill "
                         "schedules the main loop of a tensor-core kernel")
    if not 0 <= loop < len(loops):
        raise GraphError(f"TTGIR: loop index {loop} out of range; the module has {len(loops)} loop(s) with a dot")
    chosen = loops[loop]
    fn = next(f for f in functions if any(o is chosen for o in f.walk()))
    return _build(module, chosen, fn, arch, name, before_pass, values, trip_count, fp_fusion)


def read_ttgir(path: str | Path, arch: Arch, loop: int = 0, values: dict[str, int] | None = None,
               trip_count: int | None = None) -> ImportedLoop:
    """Import a ``.ttgir`` / ``.mlir`` file (a module or a dump stream)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GraphError(f"{p}: no such TTGIR file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GraphError(f"{p}: cannot read TTGIR text ({type(err).__name__})") from None
    stem = p.name.split(".")[0] or "ttgir"
    return import_ttgir(text, arch, name=stem, loop=loop, values=values, trip_count=trip_count)
