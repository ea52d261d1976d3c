"""Ablation (issue 21, session 23): fa_cap's kernel with double K and V rings.

    python bench/results/h200/fa_variants/gen_rings2.py bench/results/h200/fa_variants/fa_cap.json fa_cap_rings2.py

The schedule is fa_cap's with the load_k and load_v buffers at 2 copies (and their bytes doubled); nothing else
changes. The validator refuses buffers that hold more copies than their lifetimes need, so exactly those
'buffers' violations are let through. Writes the kernel timed as fa_cap_rings2.py."""
import sys
from dataclasses import replace
from pathlib import Path

import twill.validate as V
from twill.codegen import generate
from twill.schedule import Schedule

DEEPER = {"load_k": 2, "load_v": 2}


def lenient(problem, sched, real=V.validate):
    return [v for v in real(problem, sched) if not (v.rule == "buffers" and "copies" in v.message)]


def main(src: str, out: str) -> None:
    sched = Schedule.read(src)
    buffers = tuple(replace(b, copies=DEEPER[b.value], bytes=b.bytes // b.copies * DEEPER[b.value])
                    if b.value in DEEPER else b for b in sched.buffers)
    V.validate = lenient
    gen = generate(replace(sched, buffers=buffers), "fa_cap_rings2.json")
    Path(out).write_text(gen.source, encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
