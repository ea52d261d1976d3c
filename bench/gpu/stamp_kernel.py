"""A generated kernel with clock stamps between the statements of its consumer loops (issue 21, session 70).

    python bench/gpu/stamp_kernel.py KERNEL.py STAMPED.py

Nsight's samples say how long each line of a kernel waits, per warp and on average; they cannot say when one
group's window ends and the other's begins, which is what decides whether the turn token or the tensor core holds
FA3's order back. This writes a copy of a `twill codegen` kernel in which every warp group of 4 warps with a steady
loop reads the SM clock (``%clock``) at the loop's top and after each statement of its body, and stores it per
thread to a buffer ``STAMPS`` (int32, ``[4 groups][64 trips][32 points][128 threads]``; only CTA (0, 0) stores,
and only the first 64 trips). All warps of a CTA share one SM, so their clocks compare. STAMPED.json names each
group's points: point 0 is the loop's top, point k the end of the body's k-th statement.

The stamps cost time (a clock read and a store per point), so the stamped kernel's cycles per step are reported
beside the unstamped kernel's by `bench/gpu/stamp_fa.py`, which runs both, checks both outputs and writes the
stamps.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

GROUPS, TRIPS, POINTS, THREADS = 4, 64, 32, 128
_PART = re.compile(r"^def (partition_g(\d+))\((.*)\):$")
_WARPS = re.compile(r'"""Group \d+ \([^)]*\): (\d+) warp')
_LOOP = re.compile(r"^(\s+)for t in range\(")
_LAYOUT = "gl.BlockedLayout([1], [32], [4], [0])"
_CLOCK = ('gl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r,r", [st_tok], dtype=gl.int32, is_pure=False, '
          'pack=1)')


def _store(point: int, indent: str) -> str:
    """One stamp: a constant offset from the trip's row (an immediate in the store, no register of its own)."""
    return f"{indent}gl.store(st_row + {point * THREADS}, {_CLOCK}, mask=st_ok)  # stamp {point}"


def _row(group: int, indent: str) -> str:
    row = f"{indent}st_row = stamps + (({group} * {TRIPS} + t) * {POINTS}) * {THREADS} + st_idx"
    return f"{row}  # stamp: this trip's points\n{indent}st_ok = st_on & (t < {TRIPS})"


def stamp(source: str) -> tuple[str, dict[int, list[str]]]:
    """The stamped source and, per group, the statement that ends at each point (point 0: the loop's top)."""
    lines = source.splitlines()
    out: list[str] = []
    points: dict[int, list[str]] = {}
    group, warps, body, indent = None, 0, None, ""
    for i, line in enumerate(lines):
        m = _PART.match(line)
        if m:
            group, body = int(m.group(2)), None
            out.append(f"def {m.group(1)}({m.group(3)}, stamps):")
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            warps = int(w.group(1)) if (w := _WARPS.search(nxt)) else 0
            continue
        if line.startswith("def ") and "_kernel(" in line:
            group = None
            out.append(line.replace("):", ", stamps):"))
            continue
        if group is not None and warps == 4 and line.startswith('    """'):
            out.append(line)
            out.append(f"    st_idx = gl.arange(0, {THREADS}, layout={_LAYOUT})  # stamp: one slot per thread")
            out.append(f"    st_tok = gl.full([{THREADS}], 0, gl.int32, {_LAYOUT})")
            out.append("    st_on = (st_idx >= 0) & (gl.program_id(0) == 0) & (gl.program_id(1) == 0)")
            continue
        loop = _LOOP.match(line) if group is not None and warps == 4 else None
        if loop:
            body, indent = [], loop.group(1) + "    "
            points[group] = ["loop top"]
            out.append(line)
            out.append(_row(group, indent))
            out.append(_store(0, indent))
            continue
        if body is not None and (not line.strip() or not line.startswith(indent)):
            body = None
        out.append(line)
        if body is not None and line.strip() and not line.strip().startswith("#"):
            if len(points[group]) >= POINTS:
                raise SystemExit(f"stamp_kernel: group {group}'s loop has more than {POINTS - 1} statements")
            points[group].append(line.strip())
            out.append(_store(len(points[group]) - 1, indent))
    text = "\n".join(out) + "\n"
    text = re.sub(r"^(    args = \(.*),\)$", r"\1, stamps,)", text, flags=re.M)
    text = re.sub(r"(\w+_kernel\[grid\]\(.*?), (num_warps=)", r"\1, STAMPS, \2", text)
    text = text.replace("\nPARAMS = ", "\nSTAMPS = None  # set by the harness: torch.int32 tensor of "
                        f"{GROUPS * TRIPS * POINTS * THREADS} elements\nPARAMS = ", 1)
    return text, points


def raise_budgets(text: str, regs: int) -> str:
    """Every worker register budget of at least 128 below ``regs`` raised to it (the stamps' registers must not
    make ptxas spill the loop they time)."""
    def bump(m: re.Match) -> str:
        budgets = [int(x) for x in m.group(2).split(",")]
        return m.group(1) + ", ".join(str(regs if 128 <= b < regs else b) for b in budgets) + "])"
    return re.sub(r"(gl\.warp_specialize\(.*\], \[)([\d, ]+)\]\)", bump, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--regs", type=int, default=0, help="raise the consumers' register budgets to this")
    args = ap.parse_args(argv)
    text, points = stamp(args.kernel.read_text(encoding="utf-8"))
    if args.regs:
        text = raise_budgets(text, args.regs)
    if not points:
        raise SystemExit(f"stamp_kernel: {args.kernel} has no 4-warp group with a steady loop")
    args.out.write_text(text, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps({"kernel": str(args.kernel), "groups": points,
                                                         "shape": [GROUPS, TRIPS, POINTS, THREADS]}, indent=1))
    print(f"{args.out}: " + ", ".join(f"group {g} {len(p)} points" for g, p in points.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
