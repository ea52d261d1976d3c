"""Where each loop of a generated kernel spends its cycles, per line of the kernel's Python source (issue 21).

    python bench/gpu/ncu_lines.py bench/results/h100/lines/ncu_fa_opt --step 2592

PREFIX_cuda_sass.csv.gz is Nsight Compute's source page printed against the source (`ncu -i REPORT --page source
--csv --print-source cuda,sass`, profiled with `--import-source yes`): every SASS instruction under the Python line
Triton's line info names. Each op of a `twill codegen` kernel is one line, so a line's warp-state samples are that
op's time, its waits included (a stall is charged to the instruction that waits to issue). Code inlined from Triton's
own library (the reductions of ``gl.max`` and ``gl.sum``) is named by the library's lines; it is given to the line of
the loop that makes that call (``LIBRARY``), else to the kernel line before it in address order. Loops are found as in ncu_waits.py; for each, the
cycles per loop step of every line (``--step`` x its share of the loop's samples) with its main stall reasons."""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from ncu_waits import loops


@dataclass(frozen=True)
class Sass:
    address: int
    file: str
    line: int
    samples: int
    executed: int
    stalls: dict[str, int]


def read(prefix: str) -> tuple[list[Sass], dict[tuple[str, int], str]]:
    """Every SASS instruction with its source line, and the source text of each line."""
    with gzip.open(f"{prefix}_cuda_sass.csv.gz", "rt") as f:
        rows = list(csv.reader(f))
    out, text, file, line, hdr = [], {}, "", 0, []
    for r in rows:
        if r and r[0] == "File Path":
            file = r[1]
        elif r and r[0] == "Line No":
            hdr = r
        elif len(r) == len(hdr) and r[0]:
            line, text[file, int(r[0])] = int(r[0]), r[1]
        elif len(r) == len(hdr) and r[2].startswith("0x"):
            num = {h: int(v.replace(",", "")) for h, v in zip(hdr, r, strict=True) if v.replace(",", "").isdigit()}
            stalls = {h[6:]: num.get(h, 0) for h in hdr if h.startswith("stall_") and "Not Issued" not in h}
            out.append(Sass(int(r[2], 16), file, line, num.get("Warp Stall Sampling (All Samples)", 0),
                            num.get("Instructions Executed", 0), stalls))
    return sorted(out, key=lambda s: s.address), text


# A call in a generated line, and the words of the library lines its inlined code carries (triton/language/standard.py).
LIBRARY = {"gl.max(": ("maximum", "_elementwise_max"), "gl.sum(": ("a + b", "_sum_combine")}


def kernel_lines(sass: list[Sass], kernel: str, text: dict[tuple[str, int], str]) -> list[int]:
    """The kernel line of each instruction of one loop: its own; for inlined library code, the loop's line that makes
    the call, else the kernel line before it."""
    mine = [s.line for s in sass if s.file == kernel and s.line]
    span = range(min(mine, default=0), max(mine, default=-1) + 1)  # the loop's lines, those wholly inlined included
    caller = {call: next((n for n in span if call in text.get((kernel, n), "")), None) for call in LIBRARY}
    out, last = [], 0
    for s in sass:
        last = s.line if s.file == kernel else last
        words = text.get((s.file, s.line), "")
        called = [caller[c] for c, marks in LIBRARY.items() if caller[c] and any(m in words for m in marks)]
        out.append(s.line if s.file == kernel else (called[0] if called else last))
    return out


def local(path: str) -> Path | None:
    """The kernel file the profile names, here: the same path, else the same path from ``bench/`` on."""
    here = Path(path)
    if here.is_file():
        return here
    cut = path.find("bench/")
    there = Path(__file__).resolve().parents[2] / path[cut:] if cut >= 0 else None
    return there if there is not None and there.is_file() else None


def op_name(source: str) -> str:
    """The op a generated line issues, from its comment ("# exp0 of iteration t", "# qk0: group 1"), else the
    statement's first words."""
    m = re.search(r"#\s*(?:retire\s+)?(\w+)(?: of iteration|:)", source)
    return ("retire " if "# retire" in source else "") + m.group(1) if m else source.strip()[:40]


def per_line(prefix: str, step: float) -> list[dict[int, tuple[str, float, collections.Counter]]]:
    """For each loop: kernel line -> (its op, cycles per step, cycles per stall reason)."""
    sass, text = read(prefix)
    files = collections.Counter(s.file for s in sass if "site-packages" not in s.file)
    if not files:
        raise SystemExit(f"{prefix}_cuda_sass.csv.gz: no instruction outside the Triton library")
    kernel = files.most_common(1)[0][0]
    source = local(kernel)
    if source is not None:  # the page names only lines with code of their own; a call wholly inlined has none
        text.update({(kernel, n): t for n, t in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)})
    out = []
    for a, b in loops([s.executed for s in sass], [s.samples for s in sass]):
        total = sum(s.samples for s in sass[a:b + 1])
        counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        for s, line in zip(sass[a:b + 1], kernel_lines(sass[a:b + 1], kernel, text), strict=True):
            counts[line]["samples"] += s.samples
            counts[line].update(s.stalls)
        out.append({line: (op_name(text.get((kernel, line), "")), step * c.pop("samples") / total,
                           collections.Counter({k: step * v / total for k, v in c.items() if v}))
                    for line, c in sorted(counts.items())})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--step", type=float, required=True, help="cycles per loop step (Nsight's active cycles / steps)")
    ap.add_argument("--min", type=float, default=5.0, help="leave out lines under this many cycles per step")
    args = ap.parse_args(argv)
    for loop in per_line(args.prefix, args.step):
        print(f"loop of {len(loop)} lines, {args.step:.0f} cycles per step")
        for line, (op, cycles, why) in loop.items():
            if cycles >= args.min:
                reasons = ", ".join(f"{k} {v:.0f}" for k, v in why.most_common())[:60]
                print(f"  {line:4d} {op:<18} {cycles:6.0f}   {reasons}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
