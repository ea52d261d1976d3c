"""Ablation (issue 21, session 24): fa_cap's kernel with each wgmma retired right before the first op of its group
that reads its result (the schedule's times allow it anywhere from the result's due time to that reader), instead
of right after the last op issued before it is due.

    python bench/results/h200/fa_variants/gen_late.py bench/results/h200/fa_variants/fa_cap.json fa_cap_late.py [2]

Why: Nsight on fa_cap (session 23) put 6150 samples on the P.V retire right after its issue. The emitted order has
the softmax's exp between the issue and the retire, but ptxas sinks that FFMA/MUFU work below the wait (register
fences through ``deps=`` are LLVM-level only: fa_cap_fence.py, same cycles), so the P.V latency is exposed. Retired
where its result is first read, one Q.K^T later (wait(1)), there is no independent work left to sink below it.
The loop cut (plan._cut) then starts each consumer's body where no wgmma is in flight. With a third argument the
K and V rings are that deep (gen_rings2.py): the V slot is released later, one Q.K^T after the P.V that read it.
A fourth argument "before_next" retires no later than the group's next wgmma (depth 0).

What it showed (compiled for sm_90a on the CPU with twill.codegen.compile, disassembled, consumer loops read; no
kernel of it was timed):
- "reader": no loop cut keeps both retires in their issuing step within the emitter's one-stage register bodies
  (group 1's only cuts need two stages; in group 2 the two wgmmas' flights cover the whole II), so the body starts
  at 0 and a wgmma stays in flight across the back edge: ptxas serialized every wgmma (a DEPBAR after each HGMMA).
  The same by hand (moving the retires in fa_cap.py's source) compiled the same way.
- "before_next" (cuts 1176 and 1688, both valid): ptxas spills (STL/LDL in both consumer loops) and still issues
  58 of the 64 MUFU of the exp after the P.V retire.
So ptxas places the softmax's exp after a wgmma wait it does not depend on wherever the wait sits in the step; the
schedule's overlap of P.V with the exp is not reachable through the emitted order."""
import sys
from dataclasses import replace
from pathlib import Path

import twill.codegen.plan as P
import twill.validate as V
from twill.codegen import generate
from twill.ir import Carrier
from twill.schedule import Schedule

base_waits = P._waits
MODE = "reader"  # "reader": right before the first reader; "before_next": and before the group's next wgmma


def late_waits(sched, problem):
    out = base_waits(sched, problem)
    ii = sched.ii
    for v in sched.ops:
        if P._kind(problem, v.id) != "wgmma":
            continue
        reads = [e for e in problem.body.out_edges(v.id)
                 if e.carrier == Carrier.REGISTERS and sched.group_of(e.dst) == v.group]
        if not reads:
            continue
        t_read = min(sched.op(e.dst).start + e.distance * ii for e in reads)
        if MODE == "before_next":  # no later than the group's next wgmma: depth 0, nothing in flight across it
            nxt = [u.start + d * ii for u in sched.ops if u.group == v.group and P._kind(problem, u.id) == "wgmma"
                   for d in range(-sched.stages - 1, sched.stages + 3) if u.start + d * ii > v.start]
            t_read = min([t_read, *nxt])
        later = []
        for u in sched.ops:
            if u.group != v.group or P._kind(problem, u.id) == "tma_load":
                continue
            for d in range(-sched.stages - 1, t_read // ii + 2):
                t = u.start + d * ii
                if v.start < t < t_read or (t == v.start and u.offset > v.offset and d == 0):
                    later.append((t, u.offset, u.id, d))
        if not later:
            continue
        later.sort()
        _, _, u, d = later[-1]
        depth = sum(1 for x in later if P._kind(problem, x[2]) == "wgmma")
        out[v.id] = P.MmaWait(v.id, u, depth, d)
    return out


def lenient(problem, sched, real=V.validate):
    return [v for v in real(problem, sched) if not (v.rule == "buffers" and "copies" in v.message)]


def main(src: str, out: str, rings: str = "", mode: str = "reader") -> None:
    global MODE
    MODE = mode
    sched = Schedule.read(src)
    if rings:
        deeper = {"load_k": int(rings), "load_v": int(rings)}
        sched = replace(sched, buffers=tuple(
            replace(b, copies=deeper[b.value], bytes=b.bytes // b.copies * deeper[b.value]) if b.value in deeper else b
            for b in sched.buffers))
        V.validate = lenient
    P._waits = late_waits
    gen = generate(sched, Path(out).stem + ".json")
    for p in gen.plan.partitions:
        print(f"group {p.group}: cut {p.cut}, order {' '.join(p.ops)}")
    for k, w in sorted(gen.plan.waits.items()):
        print(f"  {k}: retired after {w.after} (lag {w.lag}), wait({w.depth})")
    Path(out).write_text(gen.source, encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:5])
