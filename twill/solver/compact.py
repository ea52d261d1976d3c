"""Stage compaction: the fewest stages a schedule's offsets and groups allow, as a final pass.

Why: the II search accepts any schedule at the II it proves, and CP-SAT's first solutions of the
any-schedule models place ops many stages apart (one-tile FlashAttention on the h100 came out at
31 stages, 75671 cycles for a 2441-cycle II), which is a 30-iteration prologue in a kernel. The
length objective repairs that when the budget reaches it; where the budget ran out first, this pass
does it without a solver.

What it may change, and why the rest stays valid: only each op's stage (start = stage * II +
offset). Unit reservations, in-order issue, variable-latency isolation and hand-off buffers depend
on offsets and groups alone (design.md §2.3, §2.7), so they are untouched. Dependences are kept as
constraints, and so is every stored value's lifetime, which may shrink but not grow: a value is
live on [offset, offset + lifetime) of the II circle, so a shorter lifetime never raises a register,
SMEM or TMEM peak, nor a ring's depth ceil(lifetime / II).

How: every rule is a difference constraint on stages, k_j - k_i >= a (a dependence: a from the
latency, hand-off cost and offsets; a lifetime cap: the reverse direction), with k >= 0. The
feasible stage vectors form a lattice closed under minimum, so the least one (longest paths from a
source, Bellman-Ford) minimises every stage at once, hence the length. The schedule passed in is
one solution, so a least one exists. The result is validated; the original stands if anything fails.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from twill.problem import Problem, read_time
from twill.schedule import Buffer, Schedule
from twill.solver.assemble import copies_needed
from twill.validate import validate

__all__ = ["compact_stages"]

SOURCE = "\0source"  # the longest-path origin: k_i >= 0 for every op


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _least_stages(problem: Problem, sched: Schedule) -> dict[str, int] | None:
    """The least stage vector under the offsets, groups and lifetimes of ``sched``; None when the
    constraints admit none (they always admit ``sched``'s own, so only on a malformed schedule)."""
    ii = sched.ii
    off = {o.id: o.offset for o in sched.ops}
    group = {o.id: o.group for o in sched.ops}
    starts = {o.id: o.start for o in sched.ops}
    g = nx.DiGraph()
    g.add_nodes_from(off)

    def at_least(src: str, dst: str, a: int) -> None:
        """k_dst - k_src >= a, as an edge of weight -a (shortest paths on negated weights)."""
        if g.has_edge(src, dst):
            a = max(a, -g[src][dst]["weight"])
        g.add_edge(src, dst, weight=-a)

    for name in off:
        at_least(SOURCE, name, 0)
    for e in problem.edges:
        cost = e.latency + (problem.cross_group_cost(e) if sched.groups and group[e.src] != group[e.dst] else 0)
        # k_dst * II + off_dst + d * II >= k_src * II + off_src + cost
        at_least(e.src, e.dst, _ceil_div(cost + off[e.src] - off[e.dst], ii) - e.distance)
    for op in problem.ops:
        if not (op.regs or op.smem_bytes or op.tmem_cols):
            continue
        life = problem.lifetime(starts, ii, op.name)
        for e in problem.body.out_edges(op.name):
            # k_r * II + off_r + d * II + read - (k_v * II + off_v) <= life, i.e. k_v - k_r >= -b
            slack = life - off[e.dst] - e.distance * ii - read_time(e, problem.op(e.dst)) + off[op.name]
            at_least(e.dst, op.name, -(slack // ii))
    try:
        dist = nx.single_source_bellman_ford_path_length(g, SOURCE, weight="weight")
    except nx.NetworkXUnbounded:
        return None
    return {name: -dist[name] for name in off}


def compact_stages(problem: Problem, sched: Schedule) -> Schedule:
    """``sched`` with every op at its least stage (module docstring); ``sched`` itself when that
    shortens nothing or the compacted schedule would fail the validator."""
    stages = _least_stages(problem, sched)
    if stages is None or all(stages[o.id] == o.stage for o in sched.ops):
        return sched
    ii = sched.ii
    ops = tuple(replace(o, stage=stages[o.id], start=stages[o.id] * ii + o.offset) for o in sched.ops)
    starts = {o.id: o.start for o in ops}
    buffers = tuple(_rebuffered(problem, b, starts, ii) for b in sched.buffers)
    groups = {o.id: o.group for o in ops} if not sched.swp_only else None
    length = problem.length(starts, groups)
    values = dict(sched.objective_values)
    if "length" in values:
        values["length"] = length
    out = replace(sched, ops=ops, buffers=buffers, length=length, objective_values=values)
    return out if out.length <= sched.length and not validate(problem, out) else sched


def _rebuffered(problem: Problem, b: Buffer, starts: dict[str, int], ii: int) -> Buffer:
    """A value's buffer with its ring depth recounted (a hand-off buffer, named src->dst, is one copy)."""
    if "->" in b.value or b.copies == 0:
        return b
    copies = copies_needed(problem, starts, ii, b.value)
    return replace(b, copies=copies, bytes=b.bytes // b.copies * copies)
