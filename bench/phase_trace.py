"""Where a solve's work goes: `twill solve` with each phase of the II search traced (issue 16).

Run from the repository root, with the arguments of `twill solve` after ``--``:

    python bench/phase_trace.py -- fa_fwd --arch b200 --workers 2 --work-limit 30 --time-limit 600 -q
    python bench/phase_trace.py --reserve 8 -- BODY.json --arch b200 --workers 2 --work-limit 30 -q

Every window phase and undecided phase (``twill.solver.phases``) and the early descent print, on stderr, the window
they ran on, the deterministic work before and after, and their verdict. Three variants of the search, for
measuring leads before they become changes (docs/benchmarks_notes.md, session 39), each off by default:

* ``--reserve U``: the first window's phases leave U units for the descent after it;
* ``--skip-replay``: no ``hint_relaxation`` on a window where ``floor_hint``'s relaxation ended undecided (it would
  repeat that solve's first units exactly: the same model and parameters);
* ``--skip-memory``: no memory relaxation after one that ended undecided without raising its floor.

A bench tool, never a test: it patches the search module in this process only.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from twill.solver import phases, search
from twill.solver.phases import Context, Outcome, Phase, Verdict, Window


def _print(name: str, w: Window, before: float, ctx: Context, out: Outcome) -> None:
    found = f" found {out.found.ii}" if out.found is not None else ""
    print(f"    [{name}] [{w.lo}, {w.hi}] {before:.1f} -> {ctx.work.spent:.1f} units: {out.verdict.name} floor "
          f"{out.floor}{found}", file=sys.stderr, flush=True)


def _traced(ph: Phase, args: argparse.Namespace) -> Phase:
    """``ph`` printing its work and verdict, and recording on the context what the skip variants read."""
    def run(ctx: Context, w: Window, budget: Any) -> Outcome:
        before = ctx.work.spent
        out = ph.run(ctx, w, budget)
        if ph.name == "floor_hint" and ctx.hint is None and out.verdict is Verdict.UNDECIDED:
            ctx.trace_replay = ctx.window  # type: ignore[attr-defined]
        if ph.name == "memory_relaxation" and out.verdict is Verdict.UNDECIDED and out.floor <= w.lo:
            ctx.trace_memory_undecided = True  # type: ignore[attr-defined]
        _print(ph.name, w, before, ctx, out)
        return out

    applies = ph.applies
    if ph.name == "hint_relaxation" and args.skip_replay:
        def applies(ctx: Context) -> bool:
            return ph.applies(ctx) and getattr(ctx, "trace_replay", None) is not ctx.window
    if ph.name == "memory_relaxation" and args.skip_memory:
        def applies(ctx: Context) -> bool:
            return ph.applies(ctx) and not getattr(ctx, "trace_memory_undecided", False)
    return replace(ph, run=run, applies=applies)


def _patch(args: argparse.Namespace) -> None:
    """Trace the phases; give the first window's phases ``args.reserve`` units less; trace the early descent."""
    search.WINDOW_PHASES = tuple(_traced(p, args) for p in phases.WINDOW_PHASES)
    search.UNDECIDED_PHASES = tuple((_traced(p, args), f) for p, f in phases.UNDECIDED_PHASES)
    decide, descend, windows = search._decide, search._descend, []

    def first_window_reserved(ctx: Context, w: Window) -> Outcome:
        first = not windows
        windows.append(w)
        ctx.work.limit -= args.reserve if first else 0.0
        try:
            return decide(ctx, w)
        finally:
            ctx.work.limit += args.reserve if first else 0.0

    def traced_descent(ctx: Context, lb: int, cap: int) -> Any:
        before = ctx.work.spent
        found = descend(ctx, lb, cap)
        print(f"    [early descent] [{lb}, {cap}] {before:.1f} -> {ctx.work.spent:.1f} units: "
              f"{found.ii if found is not None else 'nothing'}", file=sys.stderr, flush=True)
        return found

    search._decide, search._descend = first_window_reserved, traced_descent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reserve", type=float, default=0.0, help="units the first window's phases leave for the descent")
    ap.add_argument("--skip-replay", action="store_true", help="no hint_relaxation where floor_hint's was undecided")
    ap.add_argument("--skip-memory", action="store_true", help="no memory relaxation after an undecided one")
    ap.add_argument("solve", nargs=argparse.REMAINDER, help="-- then the arguments of `twill solve`")
    args = ap.parse_args()
    _patch(args)
    from twill.cli import main as cli

    return cli(["solve", *(a for a in args.solve if a != "--")])


if __name__ == "__main__":
    sys.exit(main())
