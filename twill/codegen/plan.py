"""From a schedule to a lowering plan: every structural fact of the kernel, read off the schedule.

The plan is pure data (no Gluon text): partitions and their ordered ops with normalised stages,
rings and the channels that guard them, wgmma wait depths and release points, the register grant
the compiler will make, and the SMEM total. ``make_plan`` is also the legality check: a schedule
the emitter cannot lower faithfully raises ``CodegenError`` with one line saying why; nothing is
adjusted to make it fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twill.codegen.frames import Frame, MmaSpec, RingSpec, ValueSpec, frame_for
from twill.codegen.regs import Grant, grant
from twill.errors import TwillError
from twill.ir import Carrier
from twill.problem import Problem
from twill.schedule import Schedule, ScheduledOp

__all__ = ["CodegenError", "Ring", "Channel", "Handoff", "Final", "Partition", "MmaWait", "Turn", "Plan", "make_plan",
           "TURN_KINDS"]

MAX_PARTITIONS = 15  # named barrier ids 0 and 1 are taken; 2 + i per worker up to 16 (codegen.md §1.3)
BARRIER_BYTES = 8
NAMED_BARRIERS = 16  # hardware named barriers per CTA (bar.sync / bar.arrive ids 0..15)
TURN_KINDS = ("named", "mbarrier")  # how the tensor-core turn token is lowered (rule 9)


class CodegenError(TwillError):
    """The schedule cannot be lowered faithfully (one line: the fact that stops it)."""


@dataclass(frozen=True, slots=True)
class Ring:
    """The SMEM ring a load op fills: ``copies`` slots, read by ``readers``."""

    op: str
    group: int
    copies: int
    copies_from: str  # the schedule fact the depth came from
    slot_bytes: int
    readers: tuple[str, ...]
    reader_groups: tuple[int, ...]
    spec: RingSpec


@dataclass(frozen=True, slots=True)
class Channel:
    """Barriers over one or more rings filled by one group and read by the same ops.

    ``full[copies]`` (count 1: the producer's expect-tx, completed by TMA) and, when a reader sits in
    another group, ``empty[copies]`` with one arrival per reader group."""

    name: str
    rings: tuple[Ring, ...]
    producer: int
    readers: tuple[str, ...]
    reader_groups: tuple[int, ...]
    copies: int

    @property
    def cross(self) -> bool:
        return any(g != self.producer for g in self.reader_groups)

    @property
    def expect_bytes(self) -> int:
        return sum(r.slot_bytes for r in self.rings)


@dataclass(frozen=True, slots=True)
class Handoff:
    """A register value read in another group: the producer stores each iteration's value in an SMEM
    slot (``copies`` of them, the depth the schedule gave the hand-off buffer) and arrives on
    ``full``; each reader group waits and arrives on ``empty`` once it is done with the slot: after
    loading it into its own registers, or, for a wgmma taking it as its A operand (``operand``),
    after that wgmma, which reads the slot in place, retires."""

    op: str
    group: int
    readers: tuple[str, ...]
    reader_groups: tuple[int, ...]
    copies: int
    copies_from: str
    value: ValueSpec
    operand: tuple[str, ...] = ()  # readers that take it as their wgmma's A operand from the slot (SS wgmma)

    @property
    def name(self) -> str:
        return f"{self.op}_hand"

    @property
    def async_read(self) -> bool:
        """Whether a wgmma reads a slot (the async proxy): the producer fences its store first."""
        return bool(self.operand)

    @property
    def slot_bytes(self) -> int:
        return self.value.bytes


@dataclass(frozen=True, slots=True)
class Final:
    """The last value of ``op`` that the frame's write of an output in another group reads after the
    loop: one SMEM slot, stored once by ``group`` after its epilogue, read once by ``reader_group``."""

    op: str
    group: int
    reader_group: int
    value: ValueSpec

    @property
    def name(self) -> str:
        return f"{self.op}_final"


@dataclass(frozen=True, slots=True)
class MmaWait:
    """``warpgroup_mma_wait(depth)`` issued right after ``after`` (iteration j) retires ``op`` of
    iteration j - ``lag``; then the op's operand slots are released."""

    op: str
    after: str
    depth: int
    lag: int
    deferred: bool = False  # retired behind the group's next wgmma, not where its result is due


@dataclass(slots=True)
class Partition:
    group: int
    warps: int
    regs: int | None
    ops: tuple[str, ...]  # steady-state issue order (offset past the cut, then start)
    stage: dict[str, int]  # normalised stage s' = stage - min stage of the group
    default: bool = False
    cut: int = 0  # where the loop body starts within the II (see _cut)

    @property
    def depth(self) -> int:
        return max(self.stage.values())


@dataclass(slots=True)
class Plan:
    schedule: Schedule
    problem: Problem
    frame: Frame
    partitions: list[Partition]
    rings: dict[str, Ring]
    channels: list[Channel]
    waits: dict[str, MmaWait]
    mmas: dict[str, MmaSpec]
    grant: Grant | None
    smem_bytes: int
    windows: list[Turn] = field(default_factory=list)  # tensor-core turn order (empty: no turn-taking)
    releasers: dict[tuple[int, str], str] = field(default_factory=dict)  # (group, channel) -> the op that releases
    tc_windows: list[Turn] = field(default_factory=list)  # the schedule's TC windows, token or not (rule 12)
    turn_kind: str | None = None  # 'named' (bar.sync/bar.arrive), 'mbarrier', or None (no token)
    deferred: dict[str, str] = field(default_factory=dict)  # register op -> the wgmma it is emitted after (rule 12)
    handoffs: dict[str, Handoff] = field(default_factory=dict)  # register values read in another group
    finals: list[Final] = field(default_factory=list)  # last values the frame's writes read across groups

    @property
    def turns(self) -> list[int]:
        """The groups of the tensor-core windows in turn order."""
        return [w.group for w in self.windows]

    def window_of(self, op: str) -> Turn | None:
        return next((w for w in self.windows if op in w.ops), None)

    def turn_barrier(self, position: int) -> tuple[int, int]:
        """Named barrier (id, threads) of turn ``position``: the group of that position syncs on it and the
        group of the position before arrives, so ``threads`` counts the warps of both. Ids are taken from 15
        down, above the ones Triton gives its partitions (0, 1 and 2 + i per worker)."""
        warps = {p.group: p.warps for p in self.partitions}
        before = self.windows[position - 1].group
        return NAMED_BARRIERS - 1 - position, 32 * (warps[self.windows[position].group] + warps[before])

    def var(self, op: str) -> str:
        """The variable holding ``op``'s value: an MMA's accumulator, else the frame's name."""
        return self.mmas[op].acc if op in self.mmas else self.frame.var(op)

    def kind(self, op: str) -> str:
        return _kind(self.problem, op)

    def register_edge(self, src: str, dst: str, distance: int) -> bool:
        return _register_edge(self.problem, src, dst, distance)

    def releases(self, group: int, channel: str, op: str) -> bool:
        """Whether retiring ``op`` releases ``channel``'s slot for ``group`` (one arrival per group
        per iteration: by the group's last-issued reader, whose retirement retires the others)."""
        return self.releasers.get((group, channel)) == op

    @property
    def default(self) -> Partition:
        return next(p for p in self.partitions if p.default)

    @property
    def workers(self) -> list[Partition]:
        return [p for p in self.partitions if not p.default]

    def channel_of(self, op: str) -> Channel:
        return next(c for c in self.channels if any(r.op == op for r in c.rings))

    def received(self, group: int) -> list[Handoff]:
        """The hand-offs ``group`` reads (from their SMEM slots)."""
        return [h for h in self.handoffs.values() if group in h.reader_groups]



REG_UNITS = frozenset({"alu", "fp32", "mufu"})  # register ops: the frame writes their Gluon expression


def _kind(problem: Problem, op: str) -> str:
    """The template an op needs: 'tma_load', 'wgmma' or 'reg' (a synchronous op on the ALU, FP32 or
    MUFU pipes, computed in registers); anything else has no template yet."""
    o = problem.op(op)
    units = {u.unit for u in o.uses}
    if o.kind == "load" and units == {"tma"}:
        return "tma_load"
    if units == {"tc"} and o.is_async and o.issuer.value == "warpgroup":
        return "wgmma"
    if units and units <= REG_UNITS and not o.is_async:
        return "reg"
    raise CodegenError(f"codegen: op {op!r} (kind {o.kind}, units {sorted(units)}) has no Gluon template")


def _ring_copies(sched: Schedule, problem: Problem, op: str) -> tuple[int, str]:
    for b in sched.buffers:
        if b.value == op and b.memory == "smem":
            return b.copies, f"buffer {op}: copies {b.copies}"
    if sched.buffers or not sched.swp_only:
        raise CodegenError(f"codegen: the schedule declares no SMEM buffer for {op!r}")
    starts = {o.id: o.start for o in sched.ops}
    life = problem.lifetime(starts, sched.ii, op)
    copies = max(1, -(-life // sched.ii))
    return copies, f"lifetime of {op} {life} cycles over II {sched.ii} (swp-only schedule: ceil(lifetime/II))"


def _rings(sched: Schedule, problem: Problem, frame: Frame) -> dict[str, Ring]:
    rings = {}
    for o in sched.ops:
        if _kind(problem, o.id) != "tma_load":
            continue
        outs = list(problem.body.out_edges(o.id))
        bad = [e for e in outs if e.carrier != Carrier.SMEM]
        if bad:
            raise CodegenError(f"codegen: edge {bad[0].src}->{bad[0].dst} carries {bad[0].carrier.value}; a TMA "
                               "load's result can only be read from SMEM")
        readers = tuple(sorted({e.dst for e in outs}))
        copies, why = _ring_copies(sched, problem, o.id)
        spec = frame.ring(o.id)
        nbytes = spec.esize
        for d in spec.block:
            nbytes *= d
        if nbytes != problem.op(o.id).smem_bytes:
            raise CodegenError(f"codegen: frame box of {o.id} holds {nbytes} B but the op loads "
                               f"{problem.op(o.id).smem_bytes} B")
        rings[o.id] = Ring(o.id, o.group, copies, why, nbytes, readers,
                           tuple(sorted({sched.group_of(r) for r in readers})), spec)
    return rings


def _check_boxes(rings: dict[str, Ring], frame: Frame) -> None:
    """Every TMA box (the rings' and the frame's staged tiles) has power-of-2 sides: Triton's tensor
    descriptors refuse any other at launch (triton/_utils.py validate_block_shape), so a schedule of,
    say, 192-column tiles would otherwise give a kernel that compiles and then fails when it runs."""
    boxes = [(r.op, r.spec.block) for r in rings.values()]
    boxes += [(name, shape) for name, _, shape, layout, _ in frame.staging() if layout.endswith("_desc.layout")]
    for name, box in boxes:
        if any(d < 1 or d & (d - 1) for d in box):
            raise CodegenError(f"codegen: the TMA box of {name} is {' x '.join(map(str, box))}; Triton's tensor "
                               "descriptors need power-of-2 sides")


def _channels(sched: Schedule, rings: dict[str, Ring]) -> list[Channel]:
    """Rings that one group fills in one stage for the same readers with the same depth share a
    barrier pair (Triton's combineArefs): one expect-tx, one wait, one release per iteration."""
    keyed: dict[tuple, list[Ring]] = {}
    for r in rings.values():
        key = (r.group, sched.op(r.op).stage, r.readers, r.copies)
        keyed.setdefault(key, []).append(r)
    out = []
    for i, ((grp, _stage, readers, copies), rs) in enumerate(keyed.items()):
        out.append(Channel(f"ch{i}", tuple(rs), grp, readers, tuple(sorted({sched.group_of(x) for x in readers})),
                           copies))
    return out


def _body(sched: Schedule, ops: list[str], cut: int) -> tuple[tuple[str, ...], dict[str, int]]:
    """Issue order and normalised stages of a group's loop body cut at ``cut`` cycles into the II."""
    ii = sched.ii
    order = sorted((sched.op(n) for n in ops), key=lambda o: ((o.offset - cut) % ii, o.start))
    stage = {o.id: (o.start - cut) // ii for o in order}
    low = min(stage.values())
    return tuple(o.id for o in order), {k: v - low for k, v in stage.items()}


def _cut(sched: Schedule, problem: Problem, ops: list[str], waits: dict[str, MmaWait]) -> int:
    """Where a register group's loop body starts: the first of 0 and its ops' offsets at which
    every wgmma is retired in the step that issues it. The modulo schedule is the same at any cut
    (only the prologue changes); the cut matters to ptxas, which serializes every wgmma of a
    function (C7511) when one with register values around it stays in flight across the back edge."""
    if not any(_kind(problem, o) == "reg" for o in ops):
        return 0
    for cut in [0] + sorted({sched.op(o).offset for o in ops}):
        order, stage = _body(sched, ops, cut)
        pos = {o: i for i, o in enumerate(order)}
        if max(stage.values()) <= 1 and all(
                w.lag + stage[w.after] == stage[v] and pos[w.after] >= pos[v]
                for v, w in waits.items() if v in pos):
            return cut
    return 0


def _partitions(sched: Schedule, problem: Problem, waits: dict[str, MmaWait]) -> list[Partition]:
    parts = []
    for g in sched.groups:
        cut = _cut(sched, problem, list(g.ops), waits)
        order, stage = _body(sched, list(g.ops), cut)
        parts.append(Partition(g.id, g.warps, g.regs_per_thread, order, stage, cut=cut))
    mma_groups = {sched.group_of(o.id) for o in sched.ops if _kind(problem, o.id) == "wgmma"}
    for p in parts:
        if p.group in mma_groups and p.warps % 4:
            raise CodegenError(f"codegen: group {p.group} issues wgmma with {p.warps} warps; wgmma needs whole "
                               "warpgroups (a multiple of 4 warps)")
        if p.warps & (p.warps - 1):
            raise CodegenError(f"codegen: group {p.group} has {p.warps} warps; a Gluon partition needs a power of 2")
    # The default partition runs on the kernel's num_warps: it must be whole warpgroups so the
    # workers start warpgroup-aligned; the tensor-core group is preferred (it owns the accumulator
    # the frame's epilogue reads), then the most warps, then the lowest id.
    cands = [p for p in parts if p.warps % 4 == 0]
    if not cands:
        raise CodegenError("codegen: no group has a multiple of 4 warps to be the default partition")
    best = min(cands, key=lambda p: (p.group not in mma_groups, -p.warps, p.group))
    best.default = True
    if len(parts) > MAX_PARTITIONS:
        raise CodegenError(f"codegen: {len(parts)} groups; Gluon allows at most {MAX_PARTITIONS} partitions")
    return [best] + [p for p in parts if p is not best]


@dataclass(frozen=True, slots=True)
class Turn:
    """One group's contiguous tensor-core window in the round, ``position`` in turn order.

    ``rounds`` maps each of its wgmmas to the shift from the op's iteration to the round it
    belongs to: the window that starts with ``first`` at iteration j is round j + rounds[first]."""

    position: int
    group: int
    ops: tuple[str, ...]  # in time order within the window
    rounds: dict[str, int]

    @property
    def first(self) -> str:
        return self.ops[0]

    @property
    def last(self) -> str:
        return self.ops[-1]


def _turns(sched: Schedule, problem: Problem) -> list[Turn]:
    """The tensor-core round: windows of consecutive wgmmas of one group, in modular time order.

    The tensor cores are one unit, so the schedule keeps the TC work of different groups in
    disjoint windows modulo II; when two or more groups issue wgmma the kernel makes them take
    turns in that order (a token passed round on mbarriers). A window may wrap past the II (a
    group's P·V of one iteration, then its Q·Kᵀ of the next): its ops then belong to different
    iterations of the same round."""
    ii = sched.ii
    tc = sorted((o for o in sched.ops if _kind(problem, o.id) == "wgmma"), key=lambda o: (o.offset, o.start))
    if len({o.group for o in tc}) < 2:
        return []
    runs: list[list] = []
    for o in tc:
        if runs and runs[-1][0].group == o.group:
            runs[-1].append(o)
        else:
            runs.append([o])
    if len(runs) > 1 and runs[0][0].group == runs[-1][0].group:
        runs[0] = runs.pop() + runs[0]  # the window wraps past the II
    base = min(r[0].start for r in runs)
    out = []
    for run in runs:
        first = run[0]
        k = (first.start - base) // ii  # the round in which ``first`` at iteration 0 takes its turn
        # u at iteration j lies in the window ``first`` opens at iteration j + (s_u - s_first) // II
        rounds = {o.id: k + (o.start - first.start) // ii for o in run}
        out.append((first.start - k * ii, run[0].group, tuple(o.id for o in run), rounds))
    out.sort()
    return [Turn(i, g, ops, rounds) for i, (_, g, ops, rounds) in enumerate(out)]


def _defer_window_work(problem: Problem, partitions: list[Partition], windows: list[Turn]) -> dict[str, str]:
    """Rule 12: a tensor-core window's wgmmas go out back to back.

    In the schedule a window's wgmma issues are instants and its register ops run beside the tensor
    cores; in the kernel ptxas spreads the instructions of a register op placed between two wgmma
    issues among the HGMMAs of the first, and the warp, issuing in order, leaves the tensor cores idle
    while it works through them. So a register op that the schedule starts between the first and the
    last wgmma of one of its group's windows (in the loop body's order), and that no later wgmma of
    the window reads within the step, is emitted right after the window's last wgmma (and its turn
    pass). A retire placed right after that wgmma is emitted behind the deferred ops of the same loop
    step (the schedule starts them before the wgmma's result is due too). Reorders the partitions'
    ops in place and returns {deferred op: the wgmma it now follows}."""
    moved: dict[str, str] = {}
    for p in partitions:
        order = list(p.ops)
        for w in windows:
            if w.group != p.group:
                continue
            first, last = order.index(w.first), order.index(w.last)
            if first >= last:  # the window straddles the loop cut: no op lies between its issues here
                continue
            inside = order[first + 1:last]
            keep = set(w.ops)
            for op in reversed(inside):  # an op feeding a kept op (same step, registers) is kept too
                if any(e.src == op and e.dst in keep and e.distance == 0 and e.carrier == Carrier.REGISTERS
                       for e in problem.edges):
                    keep.add(op)
            later = [op for op in inside if op not in keep and _kind(problem, op) == "reg"]
            if not later:
                continue
            order = [op for op in order if op not in later]
            at = order.index(w.last) + 1
            order[at:at] = later
            moved.update({op: w.last for op in later})
        p.ops = tuple(order)
    return moved


def _waits(sched: Schedule, problem: Problem) -> dict[str, MmaWait]:
    """Where each wgmma is retired, from the schedule's times: right after the last op of its group
    (a wgmma or a register op; loads never wait) that the schedule starts before the result is
    due (start + latency), with depth k = the wgmmas the group issues between the two; with none,
    right after the wgmma itself (k = 0)."""
    ii = sched.ii
    out = {}
    for v in sched.ops:
        if _kind(problem, v.id) != "wgmma":
            continue
        lat = problem.op(v.id).latency
        later = []
        for u in sched.ops:
            if u.group != v.group or _kind(problem, u.id) == "tma_load":
                continue
            for d in range(-sched.stages - 1, lat // ii + 2):
                t = u.start + d * ii
                if v.start < t < v.start + lat or (t == v.start and u.offset > v.offset and d == 0):
                    later.append((t, u.offset, u.id, d))
        later.sort()
        if not later:
            out[v.id] = _deferred_wait(sched, problem, v) or MmaWait(v.id, v.id, 0, 0)
        else:
            _, _, u, d = later[-1]
            depth = sum(1 for x in later if _kind(problem, x[2]) == "wgmma")
            out[v.id] = MmaWait(v.id, u, depth, d)
    return out


def _deferred_wait(sched: Schedule, problem: Problem, v: ScheduledOp) -> MmaWait | None:
    """Retire a wgmma whose result is due before its group issues anything else right after the
    group's next wgmma instead (depth 1), when that next op is a wgmma that needs nothing of it
    in registers (an in-place accumulator chain needs nothing retired).

    Why: ``warpgroup_mma_wait(0)`` right after the wgmma blocks its warps for the whole latency, a
    hold the schedule does not have (an async op holds its group for its issue cycles only), and it
    puts the latency on the group's path from one wgmma to the next: the kernel's step becomes
    wait + issue + latency + release instead of the tensor core's busy time. Measured on the H200
    (docs/codegen.md, rule 7): matmul schedules at II 672 (latency 571) ran 793-889 cycles per
    iteration with the eager retire, 599-614 deferred. Deferring releases the operand slots one
    wgmma later; _check_in_group_reuse and the empty barriers keep that safe, the rings' depth only
    bounds how far the loads run ahead.
    """
    nxt = None
    for u in sched.ops:
        if u.group != v.group or _kind(problem, u.id) == "tma_load":
            continue
        for d in range(-sched.stages - 1, sched.stages + 2):
            t = u.start + d * sched.ii
            if t > v.start or (t == v.start and u.offset > v.offset):
                if nxt is None or (t, u.offset) < nxt[:2]:
                    nxt = (t, u.offset, u.id, d)
                break
    if nxt is None or _kind(problem, nxt[2]) != "wgmma":
        return None
    reads = [e for e in problem.body.out_edges(v.id) if e.dst == nxt[2] and e.carrier == Carrier.REGISTERS]
    if any(not e.in_place for e in reads):
        return None
    return MmaWait(v.id, nxt[2], 1, nxt[3], deferred=True)


def _releasers(sched: Schedule, partitions: list[Partition], channels: list[Channel]) -> dict[tuple[int, str], str]:
    """For each group reading a channel, the reader it issues last in an iteration (stage, then
    offset): wgmma waits retire in issue order, so that reader's retirement frees the slot."""
    out = {}
    for ch in channels:
        for p in partitions:
            mine = [r for r in ch.readers if r in p.ops]
            if mine:
                out[(p.group, ch.name)] = max(mine, key=lambda r: (p.stage[r], p.ops.index(r)))
    return out


def _position(p: Partition, op: str, j: int) -> tuple[int, int]:
    return (j + p.stage[op], p.ops.index(op))


def _check_in_group_reuse(plan: Plan) -> None:
    """A ring read in its own group has no empty barrier: the wgmma wait that retires the reader
    must come before the load that overwrites its slot, in the group's program order."""
    sched = plan.schedule
    for ch in plan.channels:
        for ring in ch.rings:
            for reader in ring.readers:
                if sched.group_of(reader) != ring.group:
                    continue
                p = next(q for q in plan.partitions if q.group == ring.group)
                w = plan.waits[reader]
                retire = _position(p, w.after, w.lag) + (1,)
                overwrite = _position(p, ring.op, ring.copies) + (0,)
                if retire >= overwrite:
                    raise CodegenError(f"codegen: in group {ring.group}, {ring.op} of iteration i+{ring.copies} "
                                       f"overwrites its slot before {reader} of iteration i is retired; "
                                       f"{ring.copies} copies are too few for this order")


def _grant(plan: Plan) -> Grant | None:
    if len(plan.partitions) == 1:
        return None
    d = plan.default
    arch = plan.problem.arch
    lo, hi, step = (arch.limit(k) for k in ("reg_alloc_min", "reg_alloc_max", "reg_alloc_step"))
    for w in plan.workers:
        if w.regs is None:
            raise CodegenError(f"codegen: worker group {w.group} has no register budget")
        if w.regs % step or not lo <= w.regs <= hi:
            raise CodegenError(f"codegen: group {w.group} asks {w.regs} registers; setmaxnreg takes a multiple of "
                               f"{step} in [{lo}, {hi}]")
    g = grant(d.warps, tuple(w.warps for w in plan.workers), tuple(w.regs for w in plan.workers))
    for w, got in zip(plan.workers, g.workers, strict=True):
        if got != w.regs:
            raise CodegenError(f"codegen: group {w.group} asks {w.regs} registers but shares a warpgroup granted "
                               f"{got}")
    if g.default is None:
        raise CodegenError("codegen: the compiler would emit no setmaxnreg (the workers' budgets leave the default "
                           "partition under 24 registers)")
    if d.regs is not None and g.default < d.regs:
        raise CodegenError(f"codegen: default group {d.group} needs {d.regs} registers; the compiler grants only "
                           f"{g.default}")
    return g


def _check_operands(problem: Problem, frame: Frame, rings: dict[str, Ring], mmas: dict[str, MmaSpec]) -> None:
    """Every MMA operand comes from where the body says: a ring the op reads over an SMEM edge, a
    frame buffer, or a register value of an op with a register edge into the MMA."""
    staged = {s[0] for s in frame.staging()}
    for op, spec in mmas.items():
        sources = [(spec.a, spec.a_from), (spec.b, "ring")]
        for operand, kind in sources:
            if kind == "ring" and (operand not in rings or op not in rings[operand].readers):
                raise CodegenError(f"codegen: {op} reads {operand} but the body has no SMEM edge {operand}->{op}")
            if kind == "smem" and operand not in staged:
                raise CodegenError(f"codegen: {op} reads frame buffer {operand}, which the frame does not allocate")
            if kind == "regs" and not _register_edge(problem, operand, op, 0):
                raise CodegenError(f"codegen: {op} reads {operand} from registers but the body has no such edge")
        if spec.acc_from is not None and not _register_edge(problem, spec.acc_from, op, spec.acc_distance):
            raise CodegenError(f"codegen: {op} accumulates into {spec.acc_from} (distance {spec.acc_distance}) but "
                               "the body has no such register edge")


def _register_edge(problem: Problem, src: str, dst: str, distance: int) -> bool:
    return any(e.src == src and e.dst == dst and e.distance == distance and e.carrier == Carrier.REGISTERS
               for e in problem.edges)


def _value(frame: Frame, op: str, why: str) -> ValueSpec:
    try:
        return frame.value(op)
    except TwillError as err:
        raise CodegenError(f"codegen: {why}, but {err}") from None


def _operand_readers(sched: Schedule, mmas: dict[str, MmaSpec], src: str, readers: tuple[str, ...]) -> tuple[str, ...]:
    """The readers of ``src`` that are wgmmas taking it as their A operand: they read it from its SMEM slot (SS
    wgmma, as FA3 does with P in SMEM), so their group holds no registers for it, as the model counts. A group that
    reads it both ways would need two protocols on one slot: refused."""
    operand = tuple(r for r in readers if r in mmas and mmas[r].a_from == "regs" and mmas[r].a == src)
    for g in {sched.group_of(r) for r in operand}:
        if any(sched.group_of(r) == g and r not in operand for r in readers):
            raise CodegenError(f"codegen: group {g} reads {src} as a wgmma operand and in registers; one hand-off "
                               "serves one kind of reader per group")
    return operand


def _handoffs(sched: Schedule, problem: Problem, frame: Frame, mmas: dict[str, MmaSpec]) -> dict[str, Handoff]:
    """One hand-off per register value read in another group (design.md §2.4: the schedule charged
    the reader the store, the barrier and the load, and gave the value an SMEM buffer of its own,
    named ``src->dst``, whose depth is the slot count). Only a register op's value is handed off
    here: a wgmma's accumulator would have to be retired before its store, which no rule places."""
    crossing: dict[str, list] = {}
    for e in problem.edges:
        if e.carrier == Carrier.REGISTERS and sched.group_of(e.src) != sched.group_of(e.dst):
            crossing.setdefault(e.src, []).append(e)
    depth = {b.value: b.copies for b in sched.buffers if b.memory == "smem"}
    out = {}
    for src, edges in crossing.items():
        if _kind(problem, src) != "reg":
            raise CodegenError(f"codegen: {src} (a {_kind(problem, src)}) is read in group "
                               f"{sched.group_of(edges[0].dst)}; only register ops' values are handed off between groups")
        names = [f"{src}->{e.dst}" for e in edges]
        missing = [n for n in names if n not in depth]
        if missing:
            raise CodegenError(f"codegen: the schedule gives the hand-off {missing[0]} no SMEM buffer")
        copies = max(depth[n] for n in names)
        readers = tuple(sorted({e.dst for e in edges}))
        operand = _operand_readers(sched, mmas, src, readers)
        _check_slots(sched, problem, src, edges, copies, operand)
        value = _value(frame, src, f"{src} is read in another group ({readers[0]})")
        out[src] = Handoff(src, sched.group_of(src), readers, tuple(sorted({sched.group_of(r) for r in readers})),
                           copies, f"schedule buffer {' / '.join(names)}: {copies} slot(s)", value, operand)
    return out


def _check_slots(sched: Schedule, problem: Problem, src: str, edges: list, copies: int,
                 operand: tuple[str, ...] = ()) -> None:
    """The slot of iteration j is stored when ``src`` completes and freed when the reader of j has
    loaded it (a wgmma reading it as its operand: when it completes); iteration j + copies reuses it one
    stored value later. A reader due more than ``copies`` II after the store would stall the producer,
    a stall the schedule does not show."""
    stored = sched.op(src).start + problem.op(src).latency
    for e in edges:
        read = problem.op(e.dst).latency if e.dst in operand else 0
        held = sched.op(e.dst).start + e.distance * sched.ii + read - stored
        need = max(1, -(-held // sched.ii))
        if need > copies:
            raise CodegenError(f"codegen: {e.dst} loads {src}'s hand-off {held} cycles after its store (II "
                               f"{sched.ii}), which needs {need} SMEM slots; the schedule gives it {copies}")


def _finals(sched: Schedule, frame: Frame, mmas: dict[str, MmaSpec]) -> list[Final]:
    """The values the frame's write of each output reads that live in another group (FA's row sum l,
    where the group issuing P·V does not compute it): found by running ``finish`` on a recorder."""
    out: list[Final] = []
    for op in frame.outputs():
        seen: list[str] = []
        frame.finish(op, mmas[op], lambda src, _d, seen=seen: seen.append(src) or src)
        for src in dict.fromkeys(seen):
            if sched.group_of(src) != sched.group_of(op):
                value = _value(frame, src, f"the write of {op} reads {src} from another group")
                out.append(Final(src, sched.group_of(src), sched.group_of(op), value))
    return out


def _check_values(problem: Problem, frame: Frame, partitions: list[Partition]) -> None:
    """A group that keeps register values over iterations peels at most one stage: a deeper
    prologue would compute values of iterations that may not exist, under guards that Gluon cannot
    merge back into loop-carried values."""
    for p in partitions:
        regs = [o for o in p.ops if _kind(problem, o) == "reg"]
        if not regs:
            continue
        if p.depth > 1:
            raise CodegenError(f"codegen: group {p.group} computes register values ({regs[0]}, ...) over "
                               f"{p.depth + 1} stages; register groups are lowered with at most 2")
        for o in regs:
            frame.compute(o, lambda *_: "x")  # the frame knows the op (raises TwillError if not)


def make_plan(sched: Schedule, problem: Problem, frame: Frame | None = None, turns: bool | str = True) -> Plan:
    """The lowering plan of ``sched``, or ``CodegenError`` naming the first fact that cannot be lowered.

    ``turns``: how the tensor-core turn token is lowered: 'named' (the default, also ``True``: hardware
    named barriers), 'mbarrier' (an mbarrier array in SMEM), or ``False`` (no token: an ablation)."""
    kind = "named" if turns is True else (turns or None)
    if kind is not None and kind not in TURN_KINDS:
        raise CodegenError(f"codegen: unknown turn lowering {turns!r} (have {', '.join(TURN_KINDS)})")
    arch = problem.arch
    if arch.feature("accumulator") != "registers" or arch.feature("mma_issuer") != "warpgroup":
        raise CodegenError(f"codegen: arch {arch.name} issues MMAs by {arch.feature('mma_issuer')} into "
                           f"{arch.feature('accumulator')}; the emitter lowers Hopper (warpgroup wgmma, register "
                           "accumulators) only")
    frame = frame or frame_for(sched.program, dict(sched.body.params))
    for e in problem.edges:
        if e.carrier not in (Carrier.REGISTERS, Carrier.SMEM, Carrier.ORDER):
            raise CodegenError(f"codegen: edge {e.src}->{e.dst} carries {e.carrier.value}; only registers and SMEM "
                               "are lowered")
    rings = _rings(sched, problem, frame)
    _check_boxes(rings, frame)
    waits = _waits(sched, problem)
    partitions = _partitions(sched, problem, waits)
    _check_values(problem, frame, partitions)
    mmas = {o.id: frame.mma(o.id) for o in sched.ops if _kind(problem, o.id) == "wgmma"}
    _check_operands(problem, frame, rings, mmas)
    channels = _channels(sched, rings)
    tc_windows = _turns(sched, problem)
    deferred = _defer_window_work(problem, partitions, tc_windows)
    windows = tc_windows if kind else []
    handoffs = _handoffs(sched, problem, frame, mmas)
    finals = _finals(sched, frame, mmas)
    staging = sum(s[4] for s in frame.staging())
    smem = sum(r.copies * r.slot_bytes for r in rings.values()) + staging + \
        sum(BARRIER_BYTES * c.copies * (2 if c.cross else 1) for c in channels) + \
        BARRIER_BYTES * len(windows) * (kind == "mbarrier") + \
        sum(h.copies * (h.slot_bytes + 2 * BARRIER_BYTES) for h in handoffs.values()) + \
        sum(f.value.bytes + BARRIER_BYTES for f in finals)
    plan = Plan(sched, problem, frame, partitions, rings, channels, waits, mmas, None, smem, windows=windows,
                releasers=_releasers(sched, partitions, channels), tc_windows=tc_windows,
                turn_kind=kind if windows else None, deferred=deferred, handoffs=handoffs, finals=finals)
    if plan.turn_kind == "named" and NAMED_BARRIERS - len(windows) <= len(partitions):
        raise CodegenError(f"codegen: {len(windows)} tensor-core turns need named barriers {NAMED_BARRIERS - len(windows)}"
                           f"..{NAMED_BARRIERS - 1}, which meet Triton's own (0 to {len(partitions)}); lower the turns "
                           "with mbarriers")
    cap = problem.arch.limit("smem_bytes_per_cta")
    if smem > cap:
        raise CodegenError(f"codegen: rings, staging and barriers need {smem} B of SMEM; the CTA has {cap} B")
    reg_max = problem.arch.limit("regs_per_thread_max")
    for op, spec in mmas.items():
        p = next(q for q in partitions if op in q.ops)
        if spec.acc_shape[0] % (16 * p.warps):
            raise CodegenError(f"codegen: {op}'s accumulator has {spec.acc_shape[0]} rows; group {p.group}'s "
                               f"{p.warps} warps each need 16 of them (wgmma rows per warp)")
        need = frame.acc_regs_per_thread(spec, p.warps)
        room = p.regs if p.regs is not None else reg_max
        if need >= room:
            raise CodegenError(f"codegen: the accumulator of {op} needs {need} registers per thread in group {p.group} "
                               f"({p.warps} warps); the group may use {room}")
    _check_in_group_reuse(plan)
    plan.grant = _grant(plan)
    return plan
