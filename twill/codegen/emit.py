"""Schedule-driven structure: one Gluon source file from a lowering plan.

Layout of the output: a header naming the schedule, one ``@gluon.jit`` function per partition
(group), the kernel (frame prelude, rings, barriers, ``warp_specialize``), and the frame's host
launcher. Every line that carries a schedule decision ends with a comment naming that decision.
"""

from __future__ import annotations

from twill.codegen import templates as T
from twill.codegen.plan import Channel, Partition, Plan

__all__ = ["emit_source"]

IND = "    "


def _needs_upper_guard(j: T.Iter) -> bool:
    """Whether ``j < trip count`` can fail (the trip count is only known to be >= 1)."""
    if not j.base:
        return j.off >= 1
    return j.off > 0


class _Body:
    """Lines of one partition function with the schedule facts in comments."""

    def __init__(self, plan: Plan, part: Partition):
        self.plan, self.part, self.lines = plan, part, []
        self.n = plan.frame.trip_count

    def add(self, line: str, depth: int = 1) -> None:
        self.lines.append(IND * depth + line)

    def _channel_first(self, ch: Channel, op: str) -> bool:
        mine = [o for o in self.part.ops if any(r.op == o for r in ch.rings)]
        return mine[0] == op

    def load(self, op: str, j: T.Iter, depth: int) -> None:
        plan, sched = self.plan, self.plan.schedule
        ring = plan.rings[op]
        ch = plan.channel_of(op)
        pred = f"{j.expr()} < {self.n}" if _needs_upper_guard(j) else None
        o = sched.op(op)
        where = f"{op}: group {o.group}, stage {o.stage}, offset {o.offset}"
        if self._channel_first(ch, op):
            if ch.cross:
                self.add(T.wait_empty(ch.name, j, ch.copies, pred,
                                      f"{ch.name} ring depth {ch.copies} ({'; '.join(r.copies_from for r in ch.rings)}); "
                                      f"readers in groups "
                                      f"{list(ch.reader_groups)}"), depth)
            self.add(T.expect(ch.name, j, ch.copies, ch.expect_bytes, pred,
                              f"{ch.name}: expect-tx {ch.expect_bytes} B = "
                              + " + ".join(f"{r.op} {r.slot_bytes} B" for r in ch.rings)), depth)
        self.add(T.tma_load(op, ring.spec.desc, ring.spec.coord(j.expr()), ch.name, j, ch.copies, pred, where), depth)

    def mma(self, op: str, j: T.Iter, depth: int) -> None:
        plan, sched = self.plan, self.plan.schedule
        spec = plan.mmas[op]
        o = sched.op(op)
        guard = f"{j.expr()} < {self.n}" if _needs_upper_guard(j) else None
        if guard:
            self.add(f"if {guard}:  # peeled step: {op} runs only for iterations that exist", depth)
            depth += 1
        seen: list[Channel] = []
        for src in (spec.a, spec.b):
            ch = plan.channel_of(src)
            if ch not in seen:
                seen.append(ch)
                self.add(T.wait_full(ch.name, j, ch.copies,
                                     f"{ch.name} filled by group {ch.producer}"
                                     + ("" if ch.cross else " (same group: TMA completion only)")), depth)
        ra, rb = plan.rings[spec.a], plan.rings[spec.b]
        mine = [x for x in self.part.ops if x in plan.mmas]
        turn = plan.turns.index(o.group) if plan.turns else None
        order = f"groups {plan.turns} take tensor-core turns in start order " + ", ".join(
            f"{x.id}@{x.start}" for x in sorted((sched.op(m) for m in plan.mmas), key=lambda x: x.start))
        if turn is not None and op == mine[0]:
            self.add(T.turn_wait(turn, j, f"wait for group {o.group}'s turn: {order}"), depth)
        self.add(T.wgmma(spec.acc, spec.a, ra.copies, spec.a_rows, spec.b, rb.copies, spec.b_permute, j,
                         f"{op}: group {o.group}, stage {o.stage}, offset {o.offset}; accumulator chained in place"),
                 depth)
        if turn is not None and op == mine[-1]:
            nxt = plan.turns[(turn + 1) % len(plan.turns)]
            self.add(T.turn_pass(turn, len(plan.turns), f"pass the turn to group {nxt}"), depth)
        for w in plan.waits.values():
            if w.after == op:
                self.retire(w.op, j.shift(-w.lag), w.depth, depth)

    def retire(self, op: str, j: T.Iter, k: int, depth: int) -> None:
        plan, sched = self.plan, self.plan.schedule
        spec = plan.mmas[op]
        lat = plan.problem.op(op).latency
        self.add(T.wgmma_wait(spec.acc, k, f"retire {op}: {k} later wgmma issue(s) of group {self.part.group} fall "
                                            f"within its latency {lat} (start {sched.op(op).start}, II {sched.ii})"),
                 depth)
        chans = []
        for src in (spec.a, spec.b):
            ch = plan.channel_of(src)
            if ch.cross and ch not in chans and plan.releases(self.part.group, ch.name, op):
                chans.append(ch)
        if not chans:
            return
        pred = f"{j.expr()} >= 0" if j.min < 0 else None
        if self.part.warps > 4:
            self.add(f"gl.thread_barrier()  # group {self.part.group} has {self.part.warps} warps: every warpgroup "
                     "retires its wgmma before the release", depth)
        for ch in chans:
            self.add(T.release(ch.name, j, ch.copies, pred, f"{op} of iteration {j.expr()} read {ch.name} (producer "
                                                            f"group {ch.producer}), the last reader group "
                                                            f"{self.part.group} issues"), depth)

    def op(self, op: str, j: T.Iter, depth: int) -> None:
        if op in self.plan.rings:
            self.load(op, j, depth)
        else:
            self.mma(op, j, depth)


def _partition(plan: Plan, part: Partition, args: str) -> list[str]:
    sched = plan.schedule
    b = _Body(plan, part)
    S = part.depth
    g = next(x for x in sched.groups if x.id == part.group)
    head = [
        "@gluon.jit",
        f"def partition_g{part.group}({args}):",
        f'{IND}"""Group {part.group} ({g.role}): {part.warps} warp(s), '
        f'{"no register budget" if part.regs is None else f"{part.regs} registers per thread"}; ops in issue order '
        f'{", ".join(part.ops)} (by offset); {S} peeled stage(s)."""',
    ]
    mine = [op for op in part.ops if op in plan.mmas]
    for op in mine:
        spec = plan.mmas[op]
        layout = T.acc_layout(part.warps, spec.acc_shape[1])
        b.add(f"{spec.acc}_layout: gl.constexpr = {layout}  # wgmma accumulator over group {part.group}'s "
              f"{part.warps} warps")
        for line in plan.frame.acc_init(spec, f"{spec.acc}_layout"):
            b.add(line)
        w = plan.waits[op]
        if part.ops.index(w.after) < part.ops.index(op):  # retired in the next iteration: async across the back edge
            b.add(f"{spec.acc} = warpgroup_mma_init({spec.acc})  # {op} is retired after the next iteration's "
                  f"{w.after}: its accumulator crosses the loop's back edge in flight")
    for p in range(S):
        b.add(f"# prologue step {p}: ops with stage offset <= {p} (stage peeling, depth {S})")
        for op in part.ops:
            s = part.stage[op]
            if s <= p:
                b.op(op, T.Iter("", p - s, 0), 1)
    b.add(f"for t in range({S}, {b.n}):  # steady state: every op, op of stage offset s works on iteration t - s")
    for op in part.ops:
        b.op(op, T.Iter("t", -part.stage[op], S), 2)
    for e in range(S):
        need = e < S - 1
        depth = 1
        b.add(f"# epilogue step {e}: ops with stage offset > {e} drain the last iterations")
        if need:
            b.add(f"if {b.n} + {e} >= {S}:  # short trip counts: the prologue already ran these steps")
            depth = 2
        for op in part.ops:
            s = part.stage[op]
            if s > e:
                b.op(op, T.Iter(b.n, e - s, 1), depth)
    for op in mine:
        spec = plan.mmas[op]
        b.add(T.wgmma_wait(spec.acc, 0, "frame: the epilogue reads the accumulator"))
        for line in plan.frame.epilogue(spec):
            b.add(line)
    if len(b.lines) == 0:
        b.add("pass")
    return head + b.lines


def _kernel(plan: Plan, name: str, args: list[str]) -> list[str]:
    frame = plan.frame
    lines = ["@gluon.jit", f"def {name}({', '.join(frame.kernel_params)}):"]
    for line in frame.prelude():
        lines.append(IND + line)
    for r in plan.rings.values():
        shape = [r.copies, *r.spec.block]
        lines.append(f"{IND}{r.op}_ring = gl.allocate_shared_memory({r.spec.dtype}, {shape}, {r.spec.desc}.layout)"
                     f"  # ring of {r.op}: {r.copies_from}")
    for sname, dtype, shape, layout, _ in frame.staging():
        lines.append(f"{IND}{sname} = gl.allocate_shared_memory({dtype}, {list(shape)}, {layout})  # frame: staging")
    for ch in plan.channels:
        rings = ", ".join(r.op for r in ch.rings)
        lines.append(f"{IND}{ch.name}_full = gl.allocate_shared_memory(gl.int64, [{ch.copies}, 1], "
                     f"mbarrier.MBarrierLayout())  # channel {ch.name} ({rings}) -> {', '.join(ch.readers)}")
        if ch.cross:
            lines.append(f"{IND}{ch.name}_empty = gl.allocate_shared_memory(gl.int64, [{ch.copies}, 1], "
                         f"mbarrier.MBarrierLayout())  # crosses groups {ch.producer} -> {list(ch.reader_groups)}")
        lines.append(f"{IND}for i in gl.static_range({ch.copies}):")
        lines.append(f"{IND * 2}mbarrier.init({ch.name}_full.index(i), count=1)  # one expect-tx per slot fill")
        if ch.cross:
            lines.append(f"{IND * 2}mbarrier.init({ch.name}_empty.index(i), count={len(ch.reader_groups)})"
                         f"  # one release per reader group")
    if plan.turns:
        lines.append(f"{IND}turn = gl.allocate_shared_memory(gl.int64, [{len(plan.turns)}, 1], mbarrier.MBarrierLayout())"
                     f"  # tensor-core turns of groups {plan.turns} (disjoint TC windows in the schedule)")
        lines.append(f"{IND}for i in gl.static_range({len(plan.turns)}):")
        lines.append(f"{IND * 2}mbarrier.init(turn.index(i), count=1)  # the group before passes the turn")
    lines.append(f"{IND}args = ({', '.join(args)},)")
    if len(plan.partitions) == 1:
        lines.append(f"{IND}partition_g{plan.default.group}(*args)  # one group: no warp specialization")
    else:
        parts = ", ".join(f"(partition_g{p.group}, args)" for p in plan.partitions)
        warps = [p.warps for p in plan.workers]
        regs = [p.regs for p in plan.workers]
        lines.append(f"{IND}gl.warp_specialize([{parts}], {warps}, {regs})"
                     f"  # default: group {plan.default.group}; workers: groups {[p.group for p in plan.workers]} "
                     f"with their warps and register budgets")
    return lines


def emit_source(plan: Plan, schedule_name: str = "") -> str:
    """The whole generated module as text."""
    sched, frame = plan.schedule, plan.frame
    name = f"twill_{sched.program}_kernel"
    args = list(frame.kernel_params[:0])
    args += [p for p in frame.kernel_params if p.endswith("_desc")]
    args += [f"{r}_ring" for r in plan.rings]
    args += [s[0] for s in frame.staging()]
    for ch in plan.channels:
        args.append(f"{ch.name}_full")
        if ch.cross:
            args.append(f"{ch.name}_empty")
    if plan.turns:
        args.append("turn")
    args += list(frame.scalars())
    launch = {"num_warps": plan.default.warps}
    g = plan.grant
    groups = "; ".join(f"g{x.id} {x.warps}w {x.regs_per_thread or '-'}r [{' '.join(x.ops)}]" for x in sched.groups)
    out = [
        f'"""Generated by twill codegen from {schedule_name or "a schedule"} -- do not edit.',
        "",
        f"program {sched.program} {dict(sched.body.params)} on {sched.arch}; II {sched.ii} ({sched.status}); "
        f"stages {sched.stages}",
        f"groups: {groups}",
        f"rings: {', '.join(f'{r.op} x{r.copies}' for r in plan.rings.values())}; "
        f"channels: {', '.join(f'{c.name}=' + '+'.join(r.op for r in c.rings) for c in plan.channels)}",
        f"SMEM {plan.smem_bytes} B; launch num_warps={plan.default.warps}"
        + ("" if g is None else f"; compiler grant (AllocateWarpGroups): maxnreg {g.maxnreg}, default "
           f"{g.default}, workers {list(g.workers)}, {g.total_warps} warps"),
        '"""',
        "import triton",
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        "from triton.experimental.gluon.language.nvidia.hopper import (",
        "    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)",
        "from triton.experimental.gluon.nvidia.hopper import TensorDescriptor",
        "",
        f"SCHEDULE = {{'file': {schedule_name!r}, 'program': {sched.program!r}, 'arch': {sched.arch!r}, "
        f"'status': {sched.status!r}, 'ii': {sched.ii}, "
        f"'groups': {[(x.id, x.warps, x.regs_per_thread) for x in sched.groups]}}}",
        f"PARAMS = {dict(sched.body.params)!r}",
        f"STAGES = {sched.stages}",
        f"RINGS = {{{', '.join(f'{r.op!r}: {r.copies}' for r in plan.rings.values())}}}",
        f"LAUNCH = {launch!r}",
        f"KERNEL_NAME = {name!r}",
        "",
    ]
    arglist = ", ".join(args)
    for p in plan.partitions:
        out += ["", *_partition(plan, p, arglist), ""]
    out += ["", *_kernel(plan, name, args), "", ""]
    out += frame.host(name, launch)
    return "\n".join(out) + "\n"
