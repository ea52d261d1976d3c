"""Schedules of a one-consumer body by enumerating its consumer group's cyclic issue order (issue 16, session 75; a
measurement, not a phase of twill).

    python bench/issue_orders.py random-regs-16508-n12-h100 --ii 1636,1635 --out regs16508.json
    python bench/issue_orders.py random:75000:12:regs:h100 --ii 1600,1500
    python bench/issue_orders.py random-regs-16508-n12-h100 --ii 1650,1600 --cpsat 10 --pin-budgets 4:24,8:232

For a body whose loads sit on one group and whose other ops all issue from one consumer group (Triton's split) and
form one dependence chain, a schedule at a fixed II is: a cyclic order of the consumer's holds, each op's stage, and
starts. With the order fixed and every register value shorter than II, which values are live at each op's issue is
decided by the order alone wherever a value dies at a synchronous reader's issue (``problem.read_time`` is 0 for a
register read in place); where it dies later (an asynchronous reader's latency, or an op's own latency where nothing
reads it) this script counts it live at every issue that could fall before its end (the holds between do not yet
cover it), so its register check is conservative. What remains is difference constraints (dependences, the holds in
order, the tensor core's two uses, lifetimes under II), solved by Bellman-Ford (networkx). The loads are placed after,
as late as their consumers allow, and every schedule goes through ``twill.validate``: the script finds schedules; it
refutes nothing (it leaves out orders with a value living II or more, longer chains of stages, and every other
grouping).
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import permutations
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_case, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem, build_problem, read_time  # noqa: E402
from twill.random_loops import random_body  # noqa: E402
from twill.schedule import Schedule  # noqa: E402
from twill.solver.assemble import Assignment, assemble, copies_needed  # noqa: E402
from twill.solver.model import build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402
from twill.solver.strategies import producer_consumer_split  # noqa: E402
from twill.validate import validate  # noqa: E402


def chain(problem: Problem, names: list[str]) -> list[str]:
    """The consumer ops in their one dependence order (every consecutive pair joined by an edge of distance 0)."""
    g = nx.DiGraph((e.src, e.dst) for e in problem.edges if e.distance == 0 and e.src in names and e.dst in names)
    g.add_nodes_from(names)
    order = list(nx.topological_sort(g))
    if any(not g.has_edge(a, b) for a, b in zip(order, order[1:], strict=False)):
        raise SystemExit("the consumer ops are not one dependence chain")
    return order


def value_ends(problem: Problem, names: list[str]) -> dict[str, tuple[str, int]]:
    """value -> (the op at whose issue its life is measured to end, cycles after that issue): its last reader in
    the chain and the read time, or itself and its latency where nothing reads it."""
    pos = {n: i for i, n in enumerate(names)}
    ends = {}
    for n in names:
        if not problem.op(n).regs:
            continue
        reads = [(pos[e.dst], e.dst, read_time(e, problem.op(e.dst))) for e in problem.edges
                 if e.src == n and e.dst in pos and e.distance == 0]
        ends[n] = (max(reads)[1], max(r for p_, _, r in reads if p_ == max(reads)[0])) if reads else (
            n, problem.op(n).latency)
    return ends


def peak(problem: Problem, order: tuple[str, ...], ends: dict[str, tuple[str, int]]) -> int:
    """The most register words live at any issue in the cyclic ``order`` (values shorter than II). A value is live
    from its producer's issue up to its reader's; where it outlives that issue by ``after`` cycles it is counted at
    every later issue that the holds in between do not yet put ``after`` cycles on (conservative)."""
    n, at = len(order), {name: i for i, name in enumerate(order)}
    most = 0
    for q in range(n):
        words = 0
        for v, (r, after) in ends.items():
            d_q, d_r = (q - at[v]) % n, (at[r] - at[v]) % n
            live = d_q < d_r or d_q == 0
            if not live and after > 0:  # q at or past the issue the value ends after
                live = sum(problem.hold(order[(at[r] + k) % n]) for k in range(d_q - d_r)) < after
            words += problem.op(v).regs if live else 0
        most = max(most, words)
    return most


def solve_order(problem: Problem, ii: int, order: tuple[str, ...], names: list[str],
                ends: dict[str, tuple[str, int]], full: dict[str, int]) -> dict[str, int] | None:
    """Starts of the consumer ops for the cyclic ``order`` (first op at offset 0, stages from the chain walking
    round the circle), or None: difference constraints x[b] - x[a] <= w as a graph, Bellman-Ford from a source."""
    at = {n: i for i, n in enumerate(order)}
    stage = {names[0]: 0}
    for a, b in zip(names, names[1:], strict=False):
        stage[b] = stage[a] + (1 if at[b] < at[a] else 0)
    g = nx.DiGraph()

    def at_least(b: str, a: str, w: int) -> None:  # x[b] - x[a] >= w, i.e. x[a] - x[b] <= -w: edge b -> a of -w
        if g.has_edge(b, a):
            g[b][a]["weight"] = min(g[b][a]["weight"], -w)
        else:
            g.add_edge(b, a, weight=-w)

    for e in problem.edges:
        if e.src in at and e.dst in at:
            at_least(e.dst, e.src, e.latency - e.distance * ii)
    for a, b in zip(order, order[1:], strict=False):  # offsets in order, holds apart
        at_least(b, a, problem.hold(a) + (stage[b] - stage[a]) * ii)
    first, last = order[0], order[-1]  # the wrap: the first op's next hold starts after the last one's
    at_least(first, last, problem.hold(last) - ii + (stage[first] - stage[last]) * ii)
    mmas = [n for n in order if any(u.unit == "tc" for u in problem.op(n).uses)]
    for a, b in zip(mmas, mmas[1:] + mmas[:1], strict=False):  # the tensor core's uses do not overlap mod II
        if a == b:
            continue
        use = next(u.length for u in problem.op(a).uses if u.unit == "tc")
        turn = ii if at[b] < at[a] else 0
        at_least(b, a, use - turn + (stage[b] - stage[a]) * ii)
    for v, (r, after) in ends.items():  # each value's life within [full x II, (full + 1) x II)
        at_least(v, r, after - ((full[v] + 1) * ii - 1))
        at_least(r, v, full[v] * ii - after)
    g.add_node("src")
    for n in order:
        g.add_edge("src", n, weight=0)
    try:
        dist = nx.single_source_bellman_ford_path_length(g, "src")
    except nx.NetworkXUnbounded:
        return None
    base = dist[names[0]]
    return {n: dist[n] - base for n in order}


def least_life(problem: Problem, names: list[str], ends: dict[str, tuple[str, int]]) -> dict[str, int]:
    """Each value's shortest life: the longest dependence path (distance 0) from its producer to the op it ends
    after, plus that op's read time."""
    g = nx.DiGraph()
    for e in problem.edges:
        if e.distance == 0 and e.src in names and e.dst in names:
            w = max(e.latency, g[e.src][e.dst]["weight"]) if g.has_edge(e.src, e.dst) else e.latency
            g.add_edge(e.src, e.dst, weight=w)
    out, topo = {}, list(nx.topological_sort(g))
    for v, (r, after) in ends.items():
        longest = {v: 0}
        for n in topo:
            for _, m, d in g.out_edges(n, data=True):
                if n in longest:
                    longest[m] = max(longest.get(m, 0), longest[n] + d["weight"])
        out[v] = longest.get(r, 0) + after
    return out


def with_loads(problem: Problem, ii: int, starts: dict[str, int], loads: list[str]) -> dict[str, int]:
    """The loads as late as their readers allow, one TMA use after another (mod II); every start shifted to >= 0."""
    out = dict(starts)
    taken: list[tuple[int, int]] = []
    for n in sorted(loads, key=lambda x: min(starts[e.dst] for e in problem.edges if e.src == x)):
        t = min(starts[e.dst] - e.latency + e.distance * ii for e in problem.edges if e.src == n)
        length = max(u.length for u in problem.op(n).uses)
        while any((t - s) % ii < l_ or (s - t) % ii < length for s, l_ in taken):
            t -= 1
        taken.append((t, length))
        out[n] = t
    low = min(out.values())
    return {n: s - low for n, s in out.items()}


def schedule(problem: Problem, ii: int, starts: dict[str, int], groups: dict[str, int]) -> Schedule | None:
    """The validated schedule (warps and budgets: the largest consumer budget the register file holds), or None."""
    arch = problem.arch
    load_group, consumer = (groups[n] for n in (next(o.name for o in problem.ops if o.variable_latency),
                                                 next(o.name for o in problem.ops if not o.variable_latency)))
    per = arch.reg_alloc_warps()
    file = arch.limit("regs_per_sm")
    least = min(arch.register_budgets())
    for warps in sorted(arch.warp_group_sizes(), reverse=True):
        budget = max((b for b in arch.register_budgets() if 32 * (warps * b + per * least) <= file), default=None)
        if budget is None:
            continue
        a = Assignment(ii=ii, starts=starts, groups=groups, warps={load_group: 1, consumer: warps},
                       regs={load_group: least, consumer: budget},
                       copies={o.name: copies_needed(problem, starts, ii, o.name) for o in problem.ops
                               if o.smem_bytes or o.regs})
        s = assemble(problem, SolveOptions(), a, optimal=False, proven_lb=0, proof="issue-order enumeration",
                     proven={}, seconds=0.0)
        if not validate(problem, s):
            return s
    return None


def problem_of(case: str) -> Problem:
    """The problem a suite case id or a ``random:SEED:OPS:PROFILE:ARCH`` spec names."""
    if case.startswith("random:"):
        _, seed, ops, profile, arch = case.split(":")
        return build_problem(random_body(int(seed), int(ops), profile=profile), get_arch(arch))
    cases = [c for half in ("tuned", "fresh") for c in read_manifest(half)["cases"] if c["id"] == case]
    if not cases:
        raise SystemExit(f"no suite case {case!r}")
    return build_case(cases[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", help="a suite case id, or random:SEED:OPS:PROFILE:ARCH (twill.random_loops.random_body)")
    ap.add_argument("--ii", required=True, help="comma-separated IIs, each tried on its own")
    ap.add_argument("--out", help="write the lowest-II schedule found here (twill.schedule/1 JSON)")
    ap.add_argument("--cpsat", type=float, metavar="UNITS",
                    help="instead: one CP-SAT solve of the joint model per II, Triton's split pinned, 2 workers")
    ap.add_argument("--pin-budgets", metavar="W:R,W:R", help="with --cpsat: the load and consumer groups' warps:registers")
    args = ap.parse_args(argv)
    p = problem_of(args.case)
    if args.cpsat:
        return cpsat_probes(p, [int(x) for x in args.ii.split(",")], args.cpsat, args.pin_budgets)
    groups = dict(producer_consumer_split(p))
    loads = [o.name for o in p.ops if o.variable_latency]
    names = chain(p, [o.name for o in p.ops if not o.variable_latency])
    ends = value_ends(p, names)
    room = max(32 * w * (b - p.arch.limit("regs_reserved_per_thread")) for w in p.arch.warp_group_sizes()
               for b in p.arch.register_budgets()
               if 32 * (w * b + p.arch.reg_alloc_warps() * min(p.arch.register_budgets())) <= p.arch.limit("regs_per_sm"))
    t0 = time.time()
    peaks = {(names[0], *rest): peak(p, (names[0], *rest), ends) for rest in permutations(names[1:])}
    fitting = sorted((o for o, w in peaks.items() if w <= room), key=lambda o: (peaks[o], o))
    print(f"{len(names)} consumer ops; {len(fitting)} cyclic orders fit {room} register words "
          f"({time.time() - t0:.1f} s)", flush=True)
    shortest = least_life(p, names, ends)
    best: Schedule | None = None
    for ii in (int(x) for x in args.ii.split(",")):
        s = at_ii(p, ii, fitting, peaks, room, names, ends, shortest, loads, groups)
        best = s if s is not None and (best is None or s.ii < best.ii) else best
        print(f"II {ii}: " + (f"a valid schedule, order {' '.join(o.id for o in sorted(s.ops, key=lambda o: o.start % ii))}"
                              if s is not None else "none") + f" ({time.time() - t0:.1f} s)", flush=True)
    if best is not None and args.out:
        best.write(args.out)
    return 0 if best is not None else 1


def cpsat_probes(p: Problem, iis: list[int], units: float, budgets: str | None) -> int:
    """CP-SAT at each II with Triton's split pinned (and, given, each group's warps and registers): the fixed-grouping
    instance the enumeration decides by orders, for comparison."""
    split = producer_consumer_split(p)
    options = SolveOptions(workers=2, time_limit=900, work_limit=units, fixed_groups=split)
    labels = sorted(set(dict(split).values()))
    for ii in iis:
        v = build_model(p, options, ii, ii)
        for g, pair in zip(labels, budgets.split(",") if budgets else [], strict=False):
            w, r = (int(x) for x in pair.split(":"))
            v.m.add(v.warps[g] == w)
            v.m.add(v.regs[g] == r)
        work = Work.starting_now(900, units)
        s = solver(work, units, 2)
        status = s.solve(v.m)
        print(f"II {ii}, CP-SAT with the split pinned: {s.status_name(status)} in {work.spent:.2f} units", flush=True)
    return 0


def at_ii(p: Problem, ii: int, fitting: list[tuple[str, ...]], peaks: dict[tuple[str, ...], int], room: int,
          names: list[str], ends: dict[str, tuple[str, int]], shortest: dict[str, int], loads: list[str],
          groups: dict[str, int]) -> Schedule | None:
    """The first valid schedule at ``ii`` over the fitting orders and, per order, the full-copy counts: each value
    at the least its shortest life forces, and one more copy of any value whose shortest life is half II or more."""
    forced = {v: shortest[v] // ii for v in ends}
    long = [v for v in ends if shortest[v] * 2 >= ii]
    counts = []
    for mask in range(1 << len(long)):
        full = dict(forced)
        for i, v in enumerate(long):
            full[v] += (mask >> i) & 1
        counts.append((sum(p.op(v).regs * f for v, f in full.items()), full))
    counts.sort(key=lambda c: c[0])
    for order in fitting:
        for extra, full in counts:
            if peaks[order] + extra > room:
                break
            starts = solve_order(p, ii, order, names, ends, full)
            if starts is None:
                continue
            s = schedule(p, ii, with_loads(p, ii, starts, loads), groups)
            if s is not None:
                return s
    return None


if __name__ == "__main__":
    raise SystemExit(main())
