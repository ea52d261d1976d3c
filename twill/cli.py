"""The ``twill`` command line: argparse -> public API -> tables and pictures.

Every ``TwillError`` becomes one line on stderr and exit status 2; nothing else prints a
traceback on bad input. Long solves report progress on stderr, results go to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from twill.errors import TwillError
from twill.options import UNITS_PER_SECOND, SolveOptions, default_work, pin_groups

_DEFAULTS = SolveOptions()  # one source of the option defaults
_STARTED = time.monotonic()  # the wall-clock cap counts from here: imports and output are the user's wait too
_OUTPUT = 0.5  # seconds kept back from the cap for validating and printing the result

if TYPE_CHECKING:
    from twill.codegen import Generated
    from twill.problem import Problem

__all__ = ["main"]

EPILOG = """examples:
  twill archs
  twill programs
  twill show fa_fwd --arch h100
  twill show examples/triton/kernels.py:attn_fwd --launch examples/triton/fa_fwd.toml --arch h100
  twill import examples/triton/ttgir/triton-3.6.0/fa_fwd.sm90.ttgir --arch h100 --out fa.graph.json
  twill solve fa_fwd --arch h100 -p subtiles=2 --gantt fa_fwd.png --out fa_fwd.json
  twill solve ../shared/ddg/fa_bwd.b200.curated_ddg.json --arch b200 --swp-only
  twill compare fa_fwd --arch h100 -p subtiles=2
  twill validate fa_fwd.json
  twill simulate fa_fwd.json --iterations 16 --trace fa_fwd.trace.json
  twill estimate fa_fwd.json --batch 2 --heads 16 --seqlen 8192
  twill calibrate --from-results bench/results/h100 --out my_h100.toml
  twill sweep fa_fwd --arch h100 -p subtiles=1,2 -p block_n=64,128 -p head_dim=64,128 -j 2
"""


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _arch(name: str):
    from twill.arch.registry import get_arch

    return get_arch(name)


def _problem(args: argparse.Namespace):
    from twill.problem import build_problem

    return build_problem(_body(args), _arch(args.arch))


def _body(args: argparse.Namespace):
    from twill.frontend.programs import TTGIR_SUFFIXES, load_program, parse_params, program_info, triton_kernel

    arch = _arch(args.arch)
    params: dict = {}
    if args.param:
        if args.program.endswith((".json", *TTGIR_SUFFIXES)) or triton_kernel(args.program):
            raise TwillError(f"program {args.program!r}: a graph file or Triton kernel takes no parameters")
        params = parse_params(args.param, program_info(args.program).parameters)
    return load_program(args.program, arch, params, launch=getattr(args, "launch", None))


# -- commands ---------------------------------------------------------------------------------
def cmd_archs(args: argparse.Namespace) -> int:
    from twill.arch.registry import available_archs

    archs = available_archs()
    rows = []
    for a in archs:
        rows.append([a.name, str(a.chip["sms"].value), str(a.rates["tensor_flops_per_clk_fp16"].value),
                     str(a.rates["mufu_ops_per_clk"].value), f"{a.limit('smem_bytes_per_cta') // 1024} KiB",
                     str(a.limit("regs_per_sm")), str(a.limit("tmem_cols")), ",".join(a.unit_names()), a.origin])
    print(_table(rows, ["arch", "SMs", "tensor FLOP/clk/SM", "MUFU/clk/SM", "SMEM/CTA", "regs/SM", "TMEM cols",
                        "units", "from"]))
    if args.sources:
        for a in archs:
            print(f"\n{a.name}: {a.description}")
            for key, fact in a.all_facts().items():
                print(f"  {key} = {fact.value}    [{fact.source}]")
    else:
        print("\nsources of the numbers above (twill archs --sources lists every fact):")
        for a in archs:
            for key in ("sms", "tensor_flops_per_clk_fp16", "mufu_ops_per_clk"):
                table = a.chip if key == "sms" else a.rates
                print(f"  {a.name}.{key}: {table[key].source}")
    return 0


def cmd_programs(args: argparse.Namespace) -> int:
    from twill.frontend.programs import describe_parameters, list_programs

    rows = [[p.name, describe_parameters(p) or "-", p.description] for p in list_programs()]
    print(_table(rows, ["program", "parameters (defaults)", "description"]))
    print("\nA PROGRAM argument may also be a .py file defining build(arch, **params), a graph .json (twill import, "
          "curated-ddg), a .ttgir file, or a Triton kernel file.py:kernel with --launch (docs/frontend.md).")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from twill.bounds import compute_bounds

    p = _problem(args)
    pins = _pinned(args, p)
    print(f"{p.body.name} on {p.arch.name}: {len(p.ops)} ops, {len(p.edges)} edges"
          + (f"  ({', '.join(f'{k}={v}' for k, v in p.body.params.items())})" if p.body.params else ""))
    rows = []
    for op in p.ops:
        uses = ", ".join(f"{u.unit}:{u.length}" + (f"@{u.offset}" if u.offset else "") +
                         (f"x{u.amount}" if u.amount > 1 else "") for u in op.uses) or "-"
        flags = "".join(["A" if op.is_async else "S", "V" if op.variable_latency else "", "T" if op.streaming else ""])
        warps = f"{op.min_warps}-{op.max_warps}" if op.max_warps else f"{op.min_warps}+"
        rows.append([op.name, op.kind, uses, str(op.latency), str(p.hold(op.name)), op.issuer.value, warps, flags,
                     str(op.regs or ""), str(op.smem_bytes or ""), str(op.tmem_cols or "")])
    print(_table(rows, ["op", "kind", "unit:cycles", "latency", "hold", "issuer", "warps", "flags", "regs",
                        "smem B", "tmem cols"]))
    print("flags: A async, S sync, V variable latency, T streaming; hold = cycles the issuing warp group is busy;"
          "\nwarps = sizes of the group that may issue it (a wgmma's accumulator rows cap it: 4 warps per 64 rows)")
    b = compute_bounds(p)
    print("\nunit work per iteration (ResMII per unit):")
    print(_table([[u.unit, str(u.work), str(u.capacity), str(u.ii)] for u in b.units],
                 ["unit", "unit-cycles", "capacity", "bound"]))
    print(f"\nResMII = {b.res_mii}   RecMII = {b.rec_mii}   MII = {b.mii}")
    print(f"binding: {b.binding()}")
    if b.recurrence:
        r = b.recurrence
        print(f"critical recurrence: {' -> '.join(r.ops)} -> {r.ops[0]} (latency {r.latency}, distance {r.distance})")
    from twill.bounds import bound_and_reason
    from twill.options import SolveOptions

    joint, why = bound_and_reason(p, SolveOptions(fixed_groups=pins), b)
    if joint > b.mii:
        print(f"joint problem (warp groups and memories{', the groups pinned' if pins else ''}): II >= {joint}; {why}")
    from twill.bounds import sequential_ii
    from twill.solver.run import Work
    from twill.solver.structure import structure_floor

    # a few CP-SAT probes of the structure relaxation (docs/design.md §3.1b), 5 units at most
    floor = structure_floor(p, SolveOptions(workers=1, fixed_groups=pins), joint, sequential_ii(p), Work.starting_now(60.0, 5.0))
    if floor is not None and floor.ii > joint:
        print(floor.sentence() + ("" if floor.decided else " (probes cut short: it may lie higher)"))
    from twill.solver.unrolled import unrolled_floor

    # and of the unrolled relaxation (§3.1g), from there, 5 units at most
    lo = max(joint, floor.ii if floor is not None else joint)
    unrolled = unrolled_floor(p, SolveOptions(workers=1, fixed_groups=pins), lo, sequential_ii(p), Work.starting_now(60.0, 5.0))
    if unrolled is not None and unrolled.ii > lo:
        print(unrolled.sentence() + ("" if unrolled.decided else " (probes cut short: it may lie higher)"))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Import a Triton kernel (or TTGIR, or any program) and save its loop body as a graph file."""
    from twill.body_json import write_body
    from twill.bounds import compute_bounds
    from twill.problem import build_problem

    body = _body(args)
    problem = build_problem(body, _arch(args.arch))
    b = compute_bounds(problem)
    print(f"{body.name} on {args.arch}: {len(body.ops)} ops, {len(body.edges)} edges, trip count "
          f"{body.trip_count if body.trip_count is not None else 'unknown'}")
    for key in ("flops_per_iteration", "load_bytes_per_iteration", "ttgir_pass", "triton_version"):
        if key in body.params:
            print(f"  {key}: {body.params[key]}")
    print(_table([[op.name, op.kind, op.ref] for op in body.ops], ["op", "kind", "from TTGIR"]))
    print(f"\nResMII = {b.res_mii}   RecMII = {b.rec_mii}")
    write_body(body, args.out)
    print(f"wrote {args.out} (use it as PROGRAM: twill solve {args.out} --arch {args.arch})")
    return 0


def _fixed_groups(text: str | None, ops: list[str] | None = None) -> tuple[tuple[str, int], ...]:
    """``--groups 'load_a=0,mma=1'``: ops imposed on warp groups (the solver keeps the rest free);
    or, without '=', a whole assignment as patterns (``'load_*;qk*,pv*;...'``, ``options.pin_groups``)."""
    if not text:
        return ()
    if "=" not in text:
        if ops is None:
            raise TwillError(f"--groups {text!r}: a pattern assignment needs the program's ops")
        return pin_groups(ops, text)
    out = []
    for item in text.split(","):
        name, sep, group = item.partition("=")
        if not sep or not name.strip() or not group.strip().isdigit():
            raise TwillError(f"--groups {text!r}: expected OP=GROUP[,OP=GROUP...] with GROUP a number, got {item!r}")
        out.append((name.strip(), int(group)))
    return tuple(out)


def _groups_arg(p: argparse.ArgumentParser, more: str = "") -> None:
    """The ``--groups`` option of ``solve`` and ``show``."""
    p.add_argument("--groups", metavar="OP=G,... | PATTERNS;...",
                   help="impose warp groups on ops, e.g. 'load_a=0,mma0=1,mma1=2' (group numbers only tell ops apart; "
                   "the solver still chooses warps and registers), or pin every op with fnmatch patterns, groups "
                   "separated by ';' (e.g. 'load_*;qk*,pv*;lds0,exc0_*;...'; programs/fa_fwd.py FA4_ROLES)" + more)


def _pinned(args: argparse.Namespace, problem: Problem) -> tuple[tuple[str, int], ...]:
    """``--groups`` for ``problem``, every name checked against its ops."""
    pins = _fixed_groups(getattr(args, "groups", None), [op.name for op in problem.ops])
    unknown = sorted({name for name, _ in pins} - {op.name for op in problem.ops})
    if unknown:
        raise TwillError(f"--groups names {', '.join(unknown)}, not ops of {problem.body.name} "
                         f"(ops: {', '.join(op.name for op in problem.ops)})")
    return pins


def _options(args: argparse.Namespace, from_start: bool = False, problem: Problem | None = None):
    """The solve options of the command line. ``from_start``: the wall-clock cap counts from the
    command's start (one solve); otherwise it is per solve (``compare``'s strategies, ``sweep``'s
    points, whose cache key must not move with start-up time). ``problem``: its op names, for a
    ``--groups`` pattern assignment."""
    if not args.time_limit > 0:
        raise TwillError(f"--time-limit {args.time_limit:g}: must be a positive number of seconds")
    spent = time.monotonic() - _STARTED + _OUTPUT if from_start else 0.0
    return SolveOptions(
        objective=tuple(x.strip() for x in args.objective.split(",")),
        swp_only=args.swp_only,
        # the work budget follows the cap the user gave; the cap itself is what is left of it
        time_limit=max(0.1, args.time_limit - spent),
        work_limit=args.work_limit if args.work_limit is not None else default_work(args.time_limit),
        phase_limit=args.phase_limit,
        workers=args.workers,
        max_groups=args.max_groups,
        max_warps=args.max_warps,
        no_handoff=args.no_handoff,
        fixed_groups=_pinned(args, problem) if problem is not None else _fixed_groups(getattr(args, "groups", None)),
        single_stage=getattr(args, "single_stage", False),
        progress=None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True)),
    )


def print_summary(problem, sched) -> None:
    from twill.bounds import compute_bounds

    b = compute_bounds(problem)
    print(f"{sched.program} on {sched.arch}: II = {sched.ii} cycles ({sched.status}), lower bound {sched.ii_lower_bound}")
    print(f"  proof: {sched.proof}")
    print(f"  bounds: ResMII {b.res_mii}, RecMII {b.rec_mii}; binding: {b.binding()}")
    settled = "" if sched.ii_seconds is None else (
        f" (II {'proven' if sched.status == 'optimal' else 'settled'} at {sched.ii_seconds:.1f} s)")
    print(f"  length {sched.length} cycles, {sched.stages} stages, solved in {sched.solve_seconds:.1f} s{settled}")
    secondary = {k: v for k, v in sched.objective_values.items() if k != "ii"}
    proven = sched.options.get("objective_proven", {})
    if secondary:
        print("  objectives: " + ", ".join(f"{k} {v}" + ("" if proven.get(k, True) else " (best found)")
                                         for k, v in secondary.items()))
    print("\nunit utilization in the steady state:")
    rows = [[u.unit, str(u.work), f"{100 * u.work / (u.capacity * sched.ii):.1f}%"] for u in b.units]
    print(_table(rows, ["unit", "busy cycles / II", "utilization"]))
    print("\nwarp groups:")
    rows = [[str(g.id), str(g.warps), str(g.regs_per_thread if g.regs_per_thread is not None else "-"), g.role,
             " ".join(g.ops)] for g in sched.groups]
    print(_table(rows, ["group", "warps", "regs/thread", "role", "ops"]))
    print("\nschedule (start = issue cycle in iteration 0; stage = start // II):")
    rows = [[o.id, o.name, o.unit or "-", str(o.start), str(o.stage), str(o.offset), str(o.group)]
            for o in sorted(sched.ops, key=lambda o: (o.start, o.id))]
    print(_table(rows, ["op", "kind", "unit", "start", "stage", "offset", "group"]))
    bufs = [b for b in sched.buffers if b.memory != "regs"]
    if bufs:
        print("\nbuffers:")
        print(_table([[b.value, b.memory, str(b.copies), str(b.bytes)] for b in bufs],
                     ["value", "memory", "copies", "bytes"]))


def cmd_solve(args: argparse.Namespace) -> int:
    from twill.solver import solve

    problem = _problem(args)
    if getattr(args, "solver", "cpsat") == "z3":
        from twill.solver.z3_backend import solve_z3 as solve
    options = _options(args, from_start=True, problem=problem)
    sched = solve(problem, options)
    print_summary(problem, sched)
    _check(problem, sched)
    if args.out:
        sched.write(args.out)
        print(f"\nwrote {args.out}")
    if args.gantt:
        _write_gantt(problem, sched, args.gantt)
    if args.trace:
        _write_static_trace(problem, sched, args.trace)
    return 0


def _check(problem, sched) -> None:
    """Every schedule twill prints passes the independent validator, or the command fails."""
    from twill.validate import validate

    violations = validate(problem, sched)
    if violations:
        raise TwillError(f"internal error: the solver's schedule fails validation: {violations[0].message} "
                         f"(and {len(violations) - 1} more)")
    print("\nvalidator: the schedule passes every check")


def _write_gantt(problem, sched, path: str) -> None:
    from twill.viz.gantt import render_gantt, schedule_gantt

    render_gantt(schedule_gantt(problem, sched), path)
    print(f"wrote {path}")


def _write_static_trace(problem, sched, path: str) -> None:
    from twill.timeline import static_spans
    from twill.viz.perfetto import write_trace

    write_trace(static_spans(problem, sched, sched.stages + 2), path, clock_mhz=float(problem.arch.chip["clock_mhz"].value),
                name=f"{sched.program} on {sched.arch} (static schedule)")
    print(f"wrote {path}")


def _load(path: str):
    from twill.schedule import Schedule
    from twill.validate import problem_for

    sched = Schedule.read(path)
    return problem_for(sched), sched


def cmd_compare(args: argparse.Namespace) -> int:
    from twill.compare import HEADER, compare, swp_reference, table

    problem = _problem(args)
    options = _options(args)
    rows, notes = table(problem, compare(problem, options), swp_reference(problem, options))
    print(f"{problem.body.name} on {problem.arch.name}: strategies compared on the same model")
    print(_table(rows, HEADER))
    for note in notes:
        print(f"  {note}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from twill.validate import validate

    problem, sched = _load(args.schedule)
    violations = validate(problem, sched)
    if not violations:
        print(f"{args.schedule}: valid ({len(sched.ops)} ops, II {sched.ii}, {len(sched.groups)} groups)")
        return 0
    for v in violations:
        print(f"{v.rule}: {v.message}")
    print(f"{args.schedule}: {len(violations)} violation(s)", file=sys.stderr)
    return 1


def cmd_simulate(args: argparse.Namespace) -> int:
    from twill.sim import simulate

    problem, sched = _load(args.schedule)
    result = simulate(problem, sched, iterations=args.iterations, jitter=args.jitter, seed=args.seed)
    print(f"{sched.program} on {sched.arch}: simulated {args.iterations} iterations")
    print(f"  achieved interval {result.achieved_ii:.1f} cycles per iteration (schedule II {sched.ii})")
    print(f"  total {result.total_cycles} cycles")
    print("\nunit utilization:")
    print(_table([[u, f"{100 * x:.1f}%"] for u, x in sorted(result.unit_utilization.items())], ["unit", "busy"]))
    print("\nstall cycles per group:")
    rows = [[str(g), ", ".join(f"{k} {v}" for k, v in causes.items() if v) or "none"]
            for g, causes in sorted(result.stalls.items())]
    print(_table(rows, ["group", "stalls by cause"]))
    for w in result.warnings:
        print(f"warning: {w}")
    if args.trace:
        from twill.viz.perfetto import write_trace

        write_trace(list(result.trace.spans), args.trace, clock_mhz=float(problem.arch.chip["clock_mhz"].value),
                    name=f"{sched.program} on {sched.arch} (simulated)")
        print(f"wrote {args.trace}")
    if args.gantt:
        from twill.viz.gantt import gantt_figure, render_gantt

        fig = gantt_figure(list(result.trace.spans), ii=sched.ii, title=f"{sched.program} on {sched.arch}: simulated")
        render_gantt(fig, args.gantt)
        print(f"wrote {args.gantt}")
    return 0


def cmd_gantt(args: argparse.Namespace) -> int:
    problem, sched = _load(args.schedule)
    if args.simulated:
        from twill.sim import simulate
        from twill.viz.gantt import gantt_figure, render_gantt

        result = simulate(problem, sched, iterations=args.iterations)
        fig = gantt_figure(list(result.trace.spans), ii=sched.ii, title=f"{sched.program} on {sched.arch}: simulated")
        render_gantt(fig, args.output)
        print(f"wrote {args.output}")
    else:
        _write_gantt(problem, sched, args.output)
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from twill import estimate as est

    problem, sched = _load(args.schedule)
    params = dict(sched.body.params)
    arch = problem.arch
    prologue = max(0, sched.length - sched.ii)
    if sched.program == "fa_fwd":
        e = est.estimate_fa_forward(arch, sched.ii, batch=args.batch, heads=args.heads, seqlen=args.seqlen,
                                    head_dim=params.get("head_dim", 128), block_m=params.get("block_m", 128),
                                    block_n=params.get("block_n", 128), causal=args.causal, prologue_cycles=prologue)
    elif sched.program == "fa_bwd":
        e = est.estimate_fa_backward(arch, sched.ii, batch=args.batch, heads=args.heads, seqlen=args.seqlen,
                                     head_dim=params.get("head_dim", 128), block_m=params.get("block_m", 64),
                                     block_n=params.get("block_n", 64), causal=args.causal, prologue_cycles=prologue)
    elif sched.program == "gemm":
        e = est.estimate_gemm(arch, sched.ii, m=args.m, n=args.n, k=args.k, block_m=params.get("block_m", 128),
                              block_n=params.get("block_n", 256), block_k=params.get("block_k", 64),
                              prologue_cycles=prologue, dtype=params.get("dtype", "fp16"))
    else:
        raise TwillError(f"estimate: no whole-kernel model for program {sched.program!r} (fa_fwd, fa_bwd and gemm "
                         "have one)")
    e = est.with_band(e, sched.program + ("_causal" if args.causal else ""))  # bands are per structure
    print("\n".join(e.lines()))
    return 0


def _print_kernel_replay(gen: Generated) -> None:
    """The kernel's own statements replayed on the schedule's costs (twill.codegen.replay): where the emitted waits
    cost what the schedule did not plan, the user learns it here, before a GPU does."""
    from twill.codegen.replay import replay

    ii = gen.plan.schedule.ii
    try:
        r = replay(gen.source, gen.plan, gen.plan.problem)
    except RuntimeError as err:
        print(f"kernel replay: {err}")
        return
    line = (f"kernel replay on the schedule's costs: {r.cycles_per_iteration:.0f} cycles per iteration "
            f"(II {ii})")
    if r.cycles_per_iteration > ii * 1.005:
        g, code, c = r.slowest()
        line += (f"; the kernel waits where the schedule does not, most at group {g}'s "
                 f"{code.split('  #')[0][:60]} ({c:.0f} cycles per iteration)")
    print(line)


def cmd_codegen(args: argparse.Namespace) -> int:
    """Write the Gluon kernel of a schedule; --check also compiles it for sm_90a (no GPU needed)."""
    from pathlib import Path

    from twill.codegen import generate_file

    turns = False if args.no_turns else args.turns
    budget = "schedule budget"
    if args.fit_registers:
        from twill.codegen.fit import fit_registers
        from twill.schedule import Schedule

        fitted = fit_registers(Schedule.read(args.schedule), Path(args.schedule).name, turns)
        gen = fitted.generated
        Path(args.output).write_text(gen.source, encoding="utf-8")
        said = (f"{fitted.said()} (ptxas spilled {fitted.spilled[0]}/{fitted.spilled[1]} B at the schedule's)"
                if fitted.raised_by else
                "the schedule's register budgets kept" + (" (ptxas spills at them, and the register file has no more "
                                                          "to give)" if any(fitted.spilled) else ""))
        print(f"fit: {said}")
        args.check = True
        budget = "fitted budget" if fitted.raised_by else budget
    else:
        gen = generate_file(args.schedule, args.output, turns=turns)
    plan = gen.plan
    parts = ", ".join(f"g{p.group}{'*' if p.default else ''} {p.warps}w" for p in plan.partitions)
    print(f"wrote {args.output}: {len(plan.partitions)} partition(s) ({parts}; * = default), "
          f"rings {', '.join(f'{r.op} x{r.copies}' for r in plan.rings.values())}, SMEM {plan.smem_bytes} B")
    _print_kernel_replay(gen)
    if args.check:
        from twill.codegen.compile import compile_generated

        c = compile_generated(gen.source, plan.frame, "twill_codegen_check")
        print(f"compiled for sm_90a: {c.registers} registers, spills {c.spill_stores}/{c.spill_loads} B "
              f"(stores/loads), worker warps {list(c.partition_warps)}, requested registers "
              f"{list(c.requested_regs)}, setmaxnreg {sorted(set(c.setmaxnreg))}")
        if plan.grant is not None:
            d = plan.default
            print(f"default partition g{d.group}: {budget} {d.regs} registers, compiler grant {plan.grant.default} "
                  f"(launch maxnreg {plan.grant.maxnreg}: the leftover of the register file)")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure this machine's GPU (or read earlier results) and write an arch TOML from the numbers."""
    from pathlib import Path

    from twill.arch import calibrate as cal
    from twill.arch.toml import load_arch_toml

    results_dir = Path(args.from_results) if args.from_results else cal.run_suite(args.results_out)
    results = cal.load_results(results_dir)
    base = args.base if args.base.endswith(".toml") or "/" in args.base else _arch(args.base).path
    if base is None:
        raise cal.CalibrationError(f"base arch {args.base!r} has no TOML file; pass a .toml path with --base")
    name = args.name or cal.default_name(results)
    gpu = results["wgmma"].get("device", {}).get("name", "GPU")
    description = args.description or f"{gpu}, calibrated from {results_dir} (other facts from {Path(base).name})"
    reference = cal.load_results(args.reference) if args.reference else None
    text = cal.calibrated_toml(results, cal.load_base(base), name=name, description=description,
                               results_label=str(results_dir), reference=reference,
                               reference_label=str(args.reference or ""), warpgroup_rates=args.warpgroup_rates)
    Path(args.out).write_text(text, encoding="utf-8")
    arch = load_arch_toml(args.out, origin="file")  # what was written must load
    old = _arch(str(base)) if str(base).endswith(".toml") else _arch(args.base)
    rows = []
    for m in cal.derive(results, reference, args.warpgroup_rates):
        table = getattr(arch, m.section)
        before = getattr(old, m.section).get(m.key)
        rows.append([f"{m.section}.{m.key}", str(before.value) if before else "-", str(table[m.key].value)])
    print(f"{name}: {len(rows)} facts measured on {gpu}")
    print(_table(rows, ["fact", "base", "measured"]))
    print(f"\nwrote {args.out} (use it with --arch {args.out})")
    return 0


def _default_cache() -> str:
    """``$XDG_CACHE_HOME/twill/sweep`` (``~/.cache/twill/sweep``): results outlive the shell."""
    import os
    from pathlib import Path

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "twill" / "sweep")


def _sweep_rows(result, names: tuple[str, ...], band=None) -> list[list[str]]:
    """The ranked table: one row per point, throughput as a range where the II is not proven, and,
    where measured kernels of the program's structure give a fidelity band, the throughput to expect."""
    rows = []
    for n, r in enumerate(result.ranked, 1):
        if r.tflops is not None:
            tflops = f"{r.tflops:.0f}" if r.status == "optimal" else f"{r.tflops:.0f}-{r.tflops_bound:.0f}"
        else:
            tflops = f"<={r.tflops_bound:.0f}" if r.tflops_bound else "-"
        if band is not None:
            tflops += "" if r.tflops is None else f" (expect {r.tflops / band.high:.0f}-{r.tflops / band.low:.0f})"
        binds = r.binds if r.ii is None or r.static_bound is None or r.ii <= r.static_bound else \
            f"joint constraints (static bound {r.static_bound}: {r.binds})"
        status = r.status + ("*" if r.status == "optimal" and not r.objectives_proven else "")
        rows.append([str(n), r.label(names), status, str(r.ii or "-"), str(r.bound or "-"), tflops,
                     "-" if r.regs is None else str(r.regs), "-" if r.smem_bytes is None else f"{r.smem_bytes // 1024}",
                     "-" if r.groups is None else f"{r.groups}/{r.warps}",
                     "cache" if r.cached else f"{r.seconds:.1f}",
                     r.message if r.status in ("error", "invalid") else binds or r.message])
    return rows


def cmd_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from twill.estimate import fidelity_band
    from twill.sweep.cache import ResultCache
    from twill.sweep.engines import make_engine
    from twill.sweep.run import sweep_grid
    from twill.sweep.source import ProgramSource
    from twill.sweep.space import parse_space

    arch = _arch(args.arch)
    source = ProgramSource(args.program, args.launch)
    if source.is_fixed_graph and args.param:
        raise TwillError(f"program {args.program!r}: a graph or TTGIR file takes no parameters")
    space = parse_space(args.param, source.parameters())
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise TwillError(f"--plot {args.plot}: the plot must be a .png, .svg or .pdf file")  # before hours of solves
    options = replace(_options(args), progress=None)
    engine = make_engine(args.jobs, args.cluster)
    cache = ResultCache(None if args.no_cache else (args.cache or _default_cache()))
    report = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.budget is not None and args.budget < space.size:
        from twill.sweep.tune import sweep_tuned

        result = sweep_tuned(source, arch, space, options, budget=args.budget, batch=args.batch,
                             seed=args.seed, engine=engine, cache=cache, report=report)
        how = f"{len(result.ranked)} of {space.size} points, chosen by Optuna TPE (seed {args.seed})"
    else:
        result = sweep_grid(source, arch, space, options, engine=engine, cache=cache, report=report)
        how = f"{space.size} point{'s' if space.size != 1 else ''}"
    names = space.shown
    print(f"{result.program} on {result.arch}: {how}; {result.solved} solved on {engine.name}, "
          f"{result.from_cache} from the cache; per point: {options.time_limit:g} s cap, {options.work:g} work units, "
          f"{options.workers or 'all'} CP-SAT worker(s)")
    band = fidelity_band(result.arch, result.program)
    print(_table(_sweep_rows(result, names, band), ["rank", " ".join(names) or "point", "status", "II", "bound",
                                                    "TFLOP/s", "regs", "SMEM KiB", "groups/warps", "seconds", "binds"]))
    print("TFLOP/s: useful FLOPs per iteration / II, on every SM at the arch's clock (a range: II not proven, up to "
          "the bound)")
    print(f"expect: measured {result.program} kernels on {result.arch} took {band.low:.2f}-{band.high:.2f}x the "
          f"prediction ({band.kernels} kernels, the fidelity table of docs/benchmarks.md)" if band is not None else
          f"expect: no measured kernels of {result.program} on {result.arch} give an error band yet")
    if any(r.status == "optimal" and not r.objectives_proven for r in result.ranked):
        print("optimal*: II proven; a secondary objective (groups, hand-offs, registers, length) stopped at its phase "
              "limit, so its registers and SMEM may not be minimal")
    best = result.best
    if best is not None:
        print(f"best: {best.label(names)} at II {best.ii} ({best.status}), {best.tflops:.0f} TFLOP/s")
    if args.json:
        _write_sweep_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        from twill.sweep.plot import plot_sweep

        print(f"wrote {plot_sweep(result, args.plot)}")
    return 0


def _write_sweep_json(result, path: str) -> None:
    import json
    from dataclasses import asdict
    from pathlib import Path

    rows = [{**asdict(r), "params": dict(r.params)} for r in result.ranked]
    doc = {"format": "twill.sweep/1", "program": result.program, "arch": result.arch, "points": rows}
    Path(path).write_text(json.dumps(doc, indent=1, default=repr) + "\n", encoding="utf-8")


# -- parser -----------------------------------------------------------------------------------
def _program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="built-in program name (see 'twill programs'), a .py file, a graph .json, a "
                   ".ttgir file, or a Triton kernel file.py:kernel_name (with --launch)")
    p.add_argument("--arch", "-a", required=True, help="arch name (see 'twill archs') or a .toml file")
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="program parameter, e.g. -p subtiles=2 (repeatable)")
    p.add_argument("--launch", metavar="LAUNCH.toml", help="launch description of a Triton kernel: signature, "
                   "constexprs, num_warps, num_stages, sizes (docs/frontend.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twill",
        description="twill finds the proven-optimal software pipeline and warp specialization of a GPU loop body "
                    "for an architecture model, checks it with an independent validator and a simulator, and draws it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("archs", help="list the architecture models and where their numbers come from")
    p.add_argument("--sources", action="store_true", help="print every fact of every arch with its source")
    p.set_defaults(func=cmd_archs)

    p = sub.add_parser("programs", help="list the built-in loop-body programs and their parameters")
    p.set_defaults(func=cmd_programs)

    p = sub.add_parser("show", help="show a program's ops, costs and lower bounds on an arch")
    _program_args(p)
    _groups_arg(p, "; the bounds then hold for that grouping (its hand-offs, in-order waits and holds)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("import", help="import a Triton kernel or TTGIR file and save its loop body as a graph file")
    _program_args(p)
    p.add_argument("--out", "-o", required=True, help="graph file to write (twill.body/1 JSON)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("solve", help="find the optimal modulo schedule and warp specialization")
    _program_args(p)
    p.add_argument("--objective", default=",".join(_DEFAULTS.objective),
                   help="lexicographic objectives, II first (default: %(default)s)")
    p.add_argument("--swp-only", action="store_true", help="pure modulo scheduling: no warp groups, registers or memory")
    p.add_argument("--time-limit", type=float, default=_DEFAULTS.time_limit,
                   help="wall-clock cap in seconds: the solve returns by then, and says so if the cap cut it "
                        "(default %(default)s)")
    p.add_argument("--work-limit", type=float, default=None,
                   help="the search's budget in CP-SAT deterministic units (about a core-second each); the same "
                        "budget gives the same answer on any machine load (default: "
                        f"{UNITS_PER_SECOND:g} per second of --time-limit, {default_work(_DEFAULTS.time_limit):g} at "
                        f"{_DEFAULTS.time_limit:g} s)")
    p.add_argument("--phase-limit", type=float, default=_DEFAULTS.phase_limit,
                   help="deterministic units for each secondary objective (default %(default)s)")
    p.add_argument("--workers", type=int, default=_DEFAULTS.workers,
                   help="CP-SAT workers (default: one per core); the answer is reproducible for a given count")
    p.add_argument("--max-groups", type=int, default=_DEFAULTS.max_groups,
                   help="most warp groups considered (default %(default)s)")
    p.add_argument("--max-warps", type=int, default=None, help="ablation: allow fewer warps than the CTA holds")
    p.add_argument("--no-handoff", action="store_true", help="ablation: no register value may cross warp groups")
    _groups_arg(p)
    p.add_argument("--single-stage", action="store_true",
                   help="ablation: no cross-iteration software pipeline (each iteration within its own II window, "
                        "as warp-specialized code without pipelining runs)")
    p.add_argument("--solver", choices=("cpsat", "z3"), default="cpsat",
                   help="backend: cpsat (default) or z3, the differential-testing reference for small graphs")
    p.add_argument("--out", "-o", help="write the schedule as twill.schedule/1 JSON")
    p.add_argument("--gantt", help="write a Gantt chart (.png or .svg)")
    p.add_argument("--trace", help="write a Perfetto / Chrome trace of the static schedule (.json)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("compare", help="the optimum beside the baselines compilers use (Rau's IMS, Triton's fixed "
                       "warp split, no pipelining)")
    _program_args(p)
    p.set_defaults(func=cmd_compare, objective=",".join(_DEFAULTS.objective), swp_only=False,
                   phase_limit=_DEFAULTS.phase_limit, max_groups=_DEFAULTS.max_groups, max_warps=None, no_handoff=False,
                   quiet=True, work_limit=None, groups=None)
    p.add_argument("--time-limit", type=float, default=_DEFAULTS.time_limit,
                   help="wall-clock seconds per strategy (default %(default)s)")
    p.add_argument("--workers", type=int, default=0, help="CP-SAT workers (default: one per core)")

    p = sub.add_parser("validate", help="check a schedule file against every rule; exit 1 on violations")
    p.add_argument("schedule", help="a twill.schedule/1 JSON file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("simulate", help="run a schedule in the discrete-event GPU timeline simulator")
    p.add_argument("schedule", help="a twill.schedule/1 JSON file")
    p.add_argument("--iterations", "-n", type=int, default=16, help="loop trip count (default %(default)s)")
    p.add_argument("--jitter", type=float, default=0.0, help="relative random extra latency of variable-latency ops")
    p.add_argument("--seed", type=int, default=0, help="seed for --jitter")
    p.add_argument("--trace", help="write the simulated timeline as a Perfetto / Chrome trace (.json)")
    p.add_argument("--gantt", help="write the simulated timeline as a Gantt chart (.png or .svg)")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("gantt", help="draw a schedule (or its simulated timeline) as a Gantt chart")
    p.add_argument("schedule", help="a twill.schedule/1 JSON file")
    p.add_argument("--output", "-o", required=True, help="output file (.png or .svg)")
    p.add_argument("--simulated", action="store_true", help="draw the simulated timeline instead of the static one")
    p.add_argument("--iterations", "-n", type=int, default=6, help="iterations to simulate (default %(default)s)")
    p.set_defaults(func=cmd_gantt)

    p = sub.add_parser("estimate", help="whole-kernel time and TFLOP/s of a FlashAttention or GEMM schedule, "
                       "with its error band where kernels of that structure were measured")
    p.add_argument("schedule", help="a twill.schedule/1 JSON file of fa_fwd, fa_bwd or gemm")
    p.add_argument("--batch", type=int, default=2, help="attention batch size (fa_fwd, fa_bwd; default 2)")
    p.add_argument("--heads", type=int, default=16, help="attention heads (fa_fwd, fa_bwd; default 16)")
    p.add_argument("--seqlen", type=int, default=8192,
                   help="query and key length, the same for both (fa_fwd, fa_bwd; default 8192)")
    p.add_argument("--causal", action="store_true",
                   help="causal mask: each query block visits only the key blocks at or before it (fa_fwd, fa_bwd)")
    p.add_argument("--m", type=int, default=8192, help="GEMM rows of A and C (gemm schedules; default 8192)")
    p.add_argument("--n", type=int, default=8192, help="GEMM columns of B and C (gemm schedules; default 8192)")
    p.add_argument("--k", type=int, default=8192, help="GEMM reduction length (gemm schedules; default 8192)")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("codegen", help="write a Gluon (Triton 3.6, Hopper) kernel and launcher from a schedule")
    p.add_argument("schedule", help="a twill.schedule/1 JSON file")
    p.add_argument("--output", "-o", required=True, help="Python file to write")
    p.add_argument("--check", action="store_true", help="also compile it for sm_90a (needs triton) and report "
                   "registers and spills")
    p.add_argument("--fit-registers", action="store_true", help="compile for sm_90a (needs triton) and, where ptxas "
                   "spills at the schedule's register budgets, raise the register-holding groups' budgets within the "
                   "register file until it does not (implies --check)")
    p.add_argument("--no-turns", action="store_true", help="ablation: leave out the token that makes groups take "
                   "tensor-core turns in the schedule's order (the schedule's windows are then not enforced)")
    p.add_argument("--turns", choices=("named", "mbarrier"), default="named",
                   help="how the turn token is lowered: hardware named barriers (bar.sync/bar.arrive, the default) "
                   "or an mbarrier array in SMEM")
    p.set_defaults(func=cmd_codegen)

    p = sub.add_parser("calibrate", help="measure this GPU with the bench/gpu microbenchmarks and write an arch TOML")
    p.add_argument("--out", "-o", required=True, help="arch TOML file to write")
    p.add_argument("--from-results", metavar="DIR", help="build the TOML from an earlier run_suite.py output folder "
                   "instead of running the suite (no GPU needed)")
    p.add_argument("--results-out", default="calibration-results", metavar="DIR",
                   help="where a fresh run writes its JSON (default: %(default)s)")
    p.add_argument("--base", default="h100", help="arch whose unmeasured facts are copied (name or .toml; "
                   "default: %(default)s)")
    p.add_argument("--name", help="arch name in the TOML (default: from the GPU's name)")
    p.add_argument("--description", help="one-line description in the TOML")
    p.add_argument("--reference", metavar="DIR", help="results of a GPU with the same SM, for facts the results "
                   "measured with a since-fixed method (the TMA latency recorded before issue 21); tagged I")
    p.add_argument("--warpgroup-rates", action="store_true",
                   help="also write one warpgroup's softmax step rates beside wgmma (fa_consumer.json), which the "
                   "cost model then charges instead of the per-SM pipe rates (off by default: docs/benchmarks.md "
                   "says why archs/h200.toml does not carry them yet)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("sweep", help="solve a grid of program parameters (tile sizes, sub-tiling) and rank the "
                       "points by predicted throughput")
    p.add_argument("program", help="built-in program name, a .py program, a Triton kernel file.py:kernel (with "
                   "--launch; its constexprs, num_warps and num_stages are the parameters), or a graph/.ttgir file "
                   "(no parameters)")
    p.add_argument("--launch", metavar="LAUNCH.toml", help="launch description of a Triton kernel (docs/frontend.md)")
    p.add_argument("--arch", "-a", required=True, help="arch name (see 'twill archs') or a .toml file")
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="values to try for a program parameter, e.g. -p block_n=64,128 (repeatable; others keep "
                        "their defaults)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="parallel solves (default %(default)s)")
    p.add_argument("--cluster", metavar="ADDRESS", help="run the solves on Dask: a scheduler address "
                   "(tcp://host:8786), or 'local' for a LocalCluster of -j workers")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="wall-clock cap in seconds per point (default %(default)s)")
    p.add_argument("--work-limit", type=float, default=None,
                   help="each point's search budget in CP-SAT deterministic units; the same budget gives the same "
                        "answer on any machine load (default: "
                        f"{UNITS_PER_SECOND:g} per second of --time-limit)")
    p.add_argument("--phase-limit", type=float, default=_DEFAULTS.phase_limit,
                   help="deterministic units for each secondary objective (default %(default)s)")
    p.add_argument("--workers", type=int, default=1,
                   help="CP-SAT workers per point (default %(default)s: deterministic; parallelism comes from -j)")
    p.add_argument("--budget", type=int, help="solve at most this many points, chosen by Optuna's TPE sampler")
    p.add_argument("--batch", type=int, default=4, help="points proposed at a time with --budget (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed with --budget (default %(default)s)")
    p.add_argument("--cache", metavar="DIR", help="result cache (default: $XDG_CACHE_HOME/twill/sweep)")
    p.add_argument("--no-cache", action="store_true", help="solve every point, store nothing")
    p.add_argument("--plot", default="sweep.png", help="throughput vs resources with the Pareto front "
                   "(default %(default)s; '' for none)")
    p.add_argument("--json", help="write the ranked results as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_sweep, objective=",".join(_DEFAULTS.objective), swp_only=False,
                   max_groups=_DEFAULTS.max_groups, max_warps=None, no_handoff=False, groups=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # an op name the terminal cannot encode prints escaped, not a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TwillError as err:
        print(f"twill: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("twill: interrupted", file=sys.stderr)
        return 130
    except (BrokenPipeError, OSError) as err:
        if isinstance(err, BrokenPipeError):
            return 0
        print(f"twill: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())



