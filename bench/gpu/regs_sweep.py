"""What ptxas needs for a generated kernel's consumer: spills at each register budget (issue 21).

    python bench/gpu/regs_sweep.py --kernels K1.py K2.py ... --budgets 232,224,216 --out DIR

twill's register model counts, per warp group and cycle of the steady state, the live results of its ops plus a
reserve per thread (``regs_reserved_per_thread``); a group's ``setmaxnreg`` budget must hold that peak. Whether
ptxas agrees is what this measures: each generated ``fa_fwd`` kernel is rebuilt with its last worker partition
(a consumer; the default partition, the other consumer, keeps the compiler's grant, 256 here) given each budget in
turn, compiled by a launch at 1x2x512, checked (NaN-prefilled output, fp32 reference on every head, the check
of bench/gpu/codegen_fa.py), and its ``n_regs`` and ``n_spills`` recorded. The least budget without spills, set
beside the model's peak for the same schedule, is the register cost the model does not count (or counts twice).
Nothing is timed. Each budget compiles in a process of its own (spawned: CUDA does not survive a fork), several at
once. Output: DIR/regs_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

SHAPE = (1, 2, 512)  # (B, H, S): a few KV blocks, enough to compile and check
CALL = re.compile(r"(gl\.warp_specialize\(.*\], \[[0-9, ]*?)(\d+)(\]\))")


def with_budget(source: str, budget: int) -> str:
    """The kernel's source with its last worker partition's register request set to ``budget``."""
    out, n = CALL.subn(lambda m: f"{m.group(1)}{budget}{m.group(3)}", source)
    if n != 1:
        raise ValueError("expected one gl.warp_specialize call with worker register budgets")
    return out


def one(kernel: str, budget: int, work: str) -> dict:
    """Compile and check one kernel at one budget (runs in a child process)."""
    from codegen_fa import check, describe, load

    src = Path(kernel).read_text()
    path = Path(work) / f"{Path(kernel).stem}_r{budget}.py"
    path.write_text(with_budget(src, budget))
    rec: dict = {"kernel": Path(kernel).stem, "budget": budget}
    try:
        mod = load(path)
        handle: dict = {}

        def run(q, k, v, o, sm_scale):
            handle["compiled"] = mod.launch(q, k, v, o, sm_scale)
            return o

        c, _ = check(run, (*SHAPE, mod.PARAMS["head_dim"]), mod.PARAMS["dtype"], every_head=True, against_cudnn=False)
        compiled = handle["compiled"]
        rec.update(ok=c["ok"], check=describe(c), n_regs=compiled.n_regs, n_spills=compiled.n_spills)
    except Exception as e:  # a budget the compiler refuses is a result too
        rec.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", nargs="+", required=True)
    ap.add_argument("--budgets", required=True, help="comma-separated budgets for the last worker partition")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    out = Path(args.out)
    work = out / "kernels"
    work.mkdir(parents=True, exist_ok=True)
    budgets = [int(b) for b in args.budgets.split(",")]
    tasks = [(k, b) for k in args.kernels for b in budgets]
    import multiprocessing as mp

    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
        recs = list(pool.map(one, *zip(*tasks, strict=True), [str(work)] * len(tasks)))
    for r in recs:
        print(f"{r['kernel']:12} budget {r['budget']:3}: " + (f"regs {r['n_regs']} spills {r['n_spills']} "
              f"{'ok' if r['ok'] else 'FAILED'}" if "n_regs" in r else r.get("error", "?")), flush=True)
    (out / "regs_sweep.json").write_text(json.dumps({"shape": SHAPE, "records": recs}, indent=1))


if __name__ == "__main__":
    main()
