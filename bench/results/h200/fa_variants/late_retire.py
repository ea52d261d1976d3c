"""Session 24: derive fa_cap_late.py / fa_cap_rings2_late.py from the generated fa_cap kernels by hand.

Each consumer's P.V retire moves from the end of the loop body (where the schedule's times put it: the
softmax ops issued under P.V are done before its result is due) to where its result is first read, one
wgmma later (wait(1) behind the next Q.K^T; for group 2 the Q.K^T wait(0) retires it), its V slot
released there (guarded for the first step, which has no P.V in flight). ptxas sinks the softmax's
FFMA/MUFU below a wgmma wait it does not depend on, which the emitted order cannot prevent (Nsight:
fa_cap's P.V wait right after issue, 6150 samples; deps= fences are LLVM-level only).
"""
import re
import sys


def patch(src: str, slot) -> str:
    lines = src.split("\n")
    out = []
    in_loop = {1: False, 2: False}
    part = None
    for ln in lines:
        if ln.startswith("def partition_g1"):
            part = 1
        elif ln.startswith("def partition_g2"):
            part = 2
        elif ln.startswith("def "):
            part = None
        s = ln.strip()
        loop = ln.startswith("        ")
        # group 1: drop the in-loop retire of pv0 and its release
        if part == 1 and loop and s.startswith("o0, cast0 = warpgroup_mma_wait(0"):
            continue
        if part == 1 and loop and s.startswith("mbarrier.arrive(ch1_empty"):
            continue
        if part == 1 and loop and s.startswith("rescale0 = o0"):
            out.append("        o0, cast0 = warpgroup_mma_wait(1, deps=(o0, cast0))  # late retire: pv0 of iteration t - 2, qk0 (t) in flight")
            out.append("        if t > 1:")
            out.append(f"            mbarrier.arrive(ch1_empty.index({slot('t - 2')}))  # its V slot")
        if part == 1 and not loop and ln.startswith("    rescale0 = o0"):
            out.append("    o0, cast0 = warpgroup_mma_wait(0, deps=(o0, cast0))  # late retire of the loop's last pv0")
            out.append("    if n_iter > 1:")
            out.append(f"        mbarrier.arrive(ch1_empty.index({slot('n_iter - 2')}))")
        # group 2: the pv1 retire joins qk1's wait(0)
        if part == 2 and loop and s.startswith("o1, cast1 = warpgroup_mma_wait(0"):
            continue
        if part == 2 and loop and s.startswith("mbarrier.arrive(ch1_empty"):
            continue
        if part == 2 and loop and s.startswith("s1 = warpgroup_mma_wait(0"):
            out.append("        s1, o1, cast1 = warpgroup_mma_wait(0, deps=(s1, o1, cast1))  # retires qk1 (t) and pv1 (t - 2)")
            out.append("        if t > 1:")
            out.append(f"            mbarrier.arrive(ch1_empty.index({slot('t - 2')}))  # pv1's V slot")
            continue
        if part == 2 and not loop and ln.startswith("    cast1 = "):  # before cast1 is redefined: the pending pv1 reads it
            out.append("    o1, cast1 = warpgroup_mma_wait(0, deps=(o1, cast1))  # late retire of the loop's last pv1")
            out.append("    if n_iter > 1:")
            out.append(f"        mbarrier.arrive(ch1_empty.index({slot('n_iter - 2')}))")
        out.append(ln)
    return "\n".join(out)


if __name__ == "__main__":
    src, dst, rings = sys.argv[1], sys.argv[2], int(sys.argv[3])
    slot = (lambda e: "0") if rings == 1 else (lambda e: f"({e}) % {rings}")
    text = patch(open(src).read(), slot)
    open(dst, "w").write(text.replace("do not edit.", "do not edit.\nHand-patched by late_retire.py (session 24)."))
