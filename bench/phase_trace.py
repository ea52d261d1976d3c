"""Where a solve's work goes: `twill solve` with each phase of the II search traced (issue 16).

Run from the repository root, with the arguments of `twill solve` after ``--``:

    python bench/phase_trace.py -- fa_fwd --arch b200 --workers 2 --work-limit 30 --time-limit 600 -q
    python bench/phase_trace.py --reserve 0 --replay -- BODY.json --arch b200 --workers 2 --work-limit 30 -q

Every window phase and undecided phase (``twill.solver.phases``) and the early descent print, on stderr, the window
they ran on, the deterministic work before and after, and their verdict. Variants of the search, for measuring
leads and trades (docs/benchmarks_notes.md, sessions 39-40), each off by default:

* ``--reserve U``: the first window's phases leave U units for the descent after it, in place of
  ``search.DESCENT_RESERVE`` (``--reserve 0``: the search before session 40);
* ``--replay``: ``hint_relaxation`` runs again on a window where ``floor_hint``'s relaxation ended undecided (the
  search before session 40; it repeats that solve's first units exactly, then goes further);
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
from twill.solver.run import Budget


def _print(name: str, w: Window, before: float, ctx: Context, out: Outcome) -> None:
    found = f" found {out.found.ii}" if out.found is not None else ""
    print(f"    [{name}] [{w.lo}, {w.hi}] {before:.1f} -> {ctx.work.spent:.1f} units: {out.verdict.name} floor "
          f"{out.floor}{found}", file=sys.stderr, flush=True)


def _traced(ph: Phase, args: argparse.Namespace) -> Phase:
    """``ph`` printing its work and verdict, and recording on the context what the variants read."""
    def run(ctx: Context, w: Window, budget: Any) -> Outcome:
        before = ctx.work.spent
        out = ph.run(ctx, w, budget)
        if ph.name == "memory_relaxation" and out.verdict is Verdict.UNDECIDED and out.floor <= w.lo:
            ctx.trace_memory_undecided = True  # type: ignore[attr-defined]
        _print(ph.name, w, before, ctx, out)
        return out

    applies = ph.applies
    if ph.name == "hint_relaxation" and args.replay:
        def applies(ctx: Context) -> bool:
            return phases._joint(ctx) and ctx.hint is None
    if ph.name == "memory_relaxation" and args.skip_memory:
        def applies(ctx: Context) -> bool:
            return ph.applies(ctx) and not getattr(ctx, "trace_memory_undecided", False)
    return replace(ph, run=run, applies=applies)


def _patch(args: argparse.Namespace) -> None:
    """Trace the phases and the early descent; set the first window's reserve where ``--reserve`` gives one."""
    search.WINDOW_PHASES = tuple(_traced(p, args) for p in phases.WINDOW_PHASES)
    search.UNDECIDED_PHASES = tuple((_traced(p, args), f) for p, f in phases.UNDECIDED_PHASES)
    if args.reserve is not None:
        search.DESCENT_RESERVE = Budget(share=0.0, at_least=args.reserve)
    descend = search._descend

    def traced_descent(ctx: Context, lb: int, cap: int) -> Any:
        before = ctx.work.spent
        found = descend(ctx, lb, cap)
        print(f"    [early descent] [{lb}, {cap}] {before:.1f} -> {ctx.work.spent:.1f} units: "
              f"{found.ii if found is not None else 'nothing'}", file=sys.stderr, flush=True)
        return found

    search._descend = traced_descent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reserve", type=float, default=None,
                    help="units the first window's phases leave for the descent (default: search.DESCENT_RESERVE)")
    ap.add_argument("--replay", action="store_true", help="hint_relaxation again where floor_hint's was undecided")
    ap.add_argument("--skip-memory", action="store_true", help="no memory relaxation after an undecided one")
    ap.add_argument("solve", nargs=argparse.REMAINDER, help="-- then the arguments of `twill solve`")
    args = ap.parse_args()
    _patch(args)
    from twill.cli import main as cli

    return cli(["solve", *(a for a in args.solve if a != "--")])


if __name__ == "__main__":
    sys.exit(main())
