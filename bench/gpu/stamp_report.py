"""Where each consumer's cycles go by clock stamps (bench/gpu/stamp_fa.py's records), per statement (issue 21).

    python bench/gpu/stamp_report.py bench/results/h100/stamps/stamps_fa_war.json [--timeline 32]

Per group: each statement of the loop body with its median cycles per trip (mean of the 4 warps; a statement's
time runs from the stamp before it to the stamp after it, so a wait is charged to the statement that waits) and
the median spread between the group's warps when they leave it (the skew a warpgroup-wide wait absorbs). With
``--timeline T``: trip T of every group merged on the SM's clock, so one group's window (turn taken to turn
passed) can be read against the other's. Trips 8 to 55 are counted (the pipeline is full, the stamps all stored).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

FIRST, LAST = 8, 56


def load(path: Path) -> tuple[dict, dict[int, list[str]], dict[int, list[list[list[int]]]]]:
    """The record, each group's statement per point, and its stamps unwrapped to a common origin."""
    rec = json.loads(path.read_text())
    manifest = json.loads(Path(rec["stamped"]).with_suffix(".json").read_text()) if Path(
        rec["stamped"]).with_suffix(".json").is_file() else {"groups": {}}
    names = {int(g): p for g, p in manifest["groups"].items()}
    origin = rec["stamps"][min(rec["stamps"], key=int)][0][0][0]
    stamps = {int(g): [[[(x - origin) % 2**32 for x in warps] for warps in trip] for trip in trips]
              for g, trips in rec["stamps"].items()}
    for g in stamps:  # a clock read past the 32-bit wrap is near 2^32 after the origin: fold it back
        stamps[g] = [[[x - 2**32 if x > 2**31 else x for x in warps] for warps in trip] for trip in stamps[g]]
    return rec, names, stamps


def short(code: str) -> str:
    """A statement's name: the op its comment names, else the call it makes."""
    m = re.search(r"#\s*(?:retire\s+)?(\w+)(?: of iteration|:)", code)
    if "bar.sync" in code:
        return "turn wait (bar.sync)"
    if "bar.arrive" in code:
        return "turn pass (bar.arrive)"
    if "warpgroup_mma_wait" in code:
        return "retire " + (m.group(1) if m and "retire" in code else "(wait)")
    if m:
        return m.group(1)
    return code.split("(")[0][:40]


def per_statement(names: list[str], trips: list[list[list[int]]]) -> list[tuple[str, float, float]]:
    """(statement, median cycles, median warp spread at its end) for points 1.. and the back edge."""
    n = len(names)
    out = []
    for k in range(1, n + 1):
        dur, spread = [], []
        for t in range(FIRST, LAST):
            end = trips[t][k] if k < n else trips[t + 1][0]
            dur.append(statistics.mean(end) - statistics.mean(trips[t][k - 1]))
            spread.append(max(end) - min(end))
        label = short(names[k]) if k < n else "loop back edge"
        out.append((label, statistics.median(dur), statistics.median(spread)))
    return out


def timeline(names: dict[int, list[str]], stamps: dict[int, list], t: int) -> list[tuple[float, int, str]]:
    """Every group's points of trip ``t`` on one clock: (cycle, group, the statement that just ended)."""
    events = []
    for g, trips in stamps.items():
        for k, warps in enumerate(trips[t]):
            if k < len(names[g]):
                events.append((statistics.mean(warps), g, "loop top" if k == 0 else short(names[g][k])))
    events.sort()
    base = events[0][0]
    return [(c - base, g, what) for c, g, what in events]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--timeline", type=int, default=None, metavar="TRIP")
    args = ap.parse_args(argv)
    for path in args.records:
        rec, names, stamps = load(path)
        print(f"{path.name}: {rec['stamped_cycles_per_step']:.0f} cycles per step stamped; times plain "
              f"{rec['ms']['plain']:.3f} ms, stamped {rec['ms']['stamped']:.3f} ms ({rec['device']})")
        for g in sorted(stamps):
            rows = per_statement(names[g], stamps[g])
            print(f"  group {g}: {sum(r[1] for r in rows):.0f} cycles per trip")
            for label, cycles, spread in rows:
                if cycles >= 5:
                    print(f"    {cycles:6.0f}  (warps apart {spread:4.0f})  {label}")
        if args.timeline is not None:
            print(f"  trip {args.timeline} on the SM clock:")
            for c, g, what in timeline(names, stamps, args.timeline):
                print(f"    {c:7.0f}  g{g}  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
