"""Ablation (issue 21, session 24): fa_cap's kernel with the values computed under each wgmma passed through its
retire (``warpgroup_mma_wait(deps=...)``), to test whether ptxas moving them below the wait is fa_cap's extra cost.

    python bench/results/h200/fa_variants/gen_fence.py bench/results/h200/fa_variants/fa_cap.py fa_cap_fence.py

Measured (run_s24.sh, device call 1): 3217 cycles per KV step against fa_cap's 3203; such fences are LLVM-level only.
Writes the kernel timed as fa_cap_fence.py from the generated fa_cap.py (four retires of the steady-state loop)."""
import sys
from pathlib import Path

FENCES = (
    ("s0 = warpgroup_mma_wait(0, deps=(s0,))  # retire qk0", "s0, rescale0, cast0 = warpgroup_mma_wait(0, deps=(s0, rescale0, cast0))  # retire qk0"),
    ("o0, cast0 = warpgroup_mma_wait(0, deps=(o0, cast0,))  # retire pv0",
     "o0, cast0, alpha0, exp0 = warpgroup_mma_wait(0, deps=(o0, cast0, alpha0, exp0))  # retire pv0"),
    ("s1 = warpgroup_mma_wait(0, deps=(s1,))  # retire qk1", "s1, rowsum1 = warpgroup_mma_wait(0, deps=(s1, rowsum1))  # retire qk1"),
    ("o1, cast1 = warpgroup_mma_wait(0, deps=(o1, cast1,))  # retire pv1",
     "o1, cast1, rowmax1 = warpgroup_mma_wait(0, deps=(o1, cast1, rowmax1))  # retire pv1"),
)


def main(src: str, out: str) -> None:
    text = Path(src).read_text(encoding="utf-8")
    for old, new in FENCES:
        assert text.count("        " + old) == 1, old  # the steady-state loop's retire, once
        text = text.replace("        " + old, "        " + new)
    Path(out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
